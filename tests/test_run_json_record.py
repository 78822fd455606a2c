"""run.json as a record (advisor.runinfo): every key it declares is read from the run.json that
``advisor profile`` writes, and it reads leniently (docs/run-json.md): keys it does not know are
ignored, a value of another type reads as absent, a row that is not an object is left out."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any

import pytest

from advisor import record, runinfo
from advisor.runinfo import RunInfo

# run.json as advisor profile writes it (docs/run-json.md; the rows' keys as the writers in
# advisor/profile/ make them), with keys this record does not declare beside those it does
SAMPLE: dict[str, Any] = {
    "schema_version": 1,
    "advisor_version": "0.1.0",
    "script": "train.py",
    "phase": "train",
    "versions": {"torch": "2.5.0", "cuda": "12.4"},
    "device": {
        "type": "cuda",
        "index": 0,
        "count": 1,
        "name": "NVIDIA A100-SXM4-80GB",
        "compute_capability": "8.0",
        "total_memory_bytes": 85_000_000_000,
        "multi_processor_count": 108,
    },
    "host": {"cpu_count": 8, "cpu_count_total": 16, "cpu_model": "x", "memory_bytes": 1 << 36},
    "memory": {"peak_allocated_bytes": 123, "peak_reserved_bytes": 456},
    "backends": {
        "cudnn_benchmark": False,
        "cudnn_allow_tf32": True,
        "cudnn_deterministic": False,
        "matmul_allow_tf32": False,
        "matmul_allow_fp16_reduced_precision_reduction": True,
        "float32_matmul_precision": "highest",
        "deterministic": False,
        "detect_anomaly": False,
        "cuda_launch_blocking": False,
    },
    "forward": {
        "autocast": [{"device_type": "cuda", "dtype": "bfloat16"}],
        "autocast_dtypes": ["bfloat16"],
        "eval_with_grad": [
            {"module": "Net", "file": "/p/train.py", "line": 3, "function": "main", "count": 2}
        ],
    },
    "modules": {
        "conv_bias_before_bn": [{"conv": "Net.c1", "bn": "Net.b1", "file": "m.py", "line": 7}],
        "param_dtypes": {"float32": 10},
        "channels_last": False,
        "data_parallel": True,
        "data_parallel_sites": [{"file": "/p/train.py", "line": 9, "function": "main"}],
        "distributed_data_parallel": False,
        "fully_sharded_data_parallel": False,
        "compiled": False,
        "modules_seen": 3,
        "roots": ["Net"],
    },
    "dataloaders": [
        {
            "num_workers": 0,
            "pin_memory": False,
            "batch_size": 32,
            "persistent_workers": False,
            "prefetch_factor": None,
            "drop_last": False,
            "dataset_len": None,
            "dataset_class": "TensorDataset",
            "file": "/p/train.py",
            "line": 12,
            "phase": "train",
        }
    ],
    "optimizers": [
        {
            "class": "AdamW",
            "module": "torch.optim.adamw",
            "foreach": None,
            "fused": False,
            "param_tensors": 4,
            "param_groups": 1,
            "param_elements": 100,
            "param_dtypes": {"float32": 4},
            "file": "/p/train.py",
            "line": 14,
        }
    ],
    "zero_grad": [
        {
            "owner": "Optimizer",
            "set_to_none": False,
            "file": "/p/train.py",
            "line": 20,
            "function": "main",
        }
    ],
    "allocator": {
        "empty_cache": [{"calls": 5, "file": "/p/train.py", "line": 21, "function": "main"}],
        "alloc_conf": "expandable_segments:True",
        "caching_disabled": False,
        "no_memory_caching_env": None,
    },
    "compile": {
        "graph_breaks": [
            {
                "file": "/p/train.py",
                "line": 30,
                "function": "forward",
                "type": "Data-dependent branching",
                "reason": "generic_jump",
                "count": 2,
                "compile_ids": ["0/0"],
            }
        ],
        "frames": [
            {
                "compile_id": "1/0",
                "function": "torch_dynamo_resume_in_forward_at_30",
                "file": "/p/train.py",
                "line": 30,
                "resume": True,
                "graph_ops": 4,
                "compile_s": 0.5,
                "graph_breaks": 0,
                "fail_type": None,
                "fail_reason": None,
            }
        ],
        "recompiles": [
            {
                "compile_id": "0/1",
                "function": "forward",
                "file": "/p/train.py",
                "line": 25,
                "reason": "tensor 'x' size mismatch at index 0",
                "compile_s": 0.2,
            }
        ],
        "counters": {"graph_break": 1},
    },
}


def _record_of(tp: object) -> type | None:
    for t in (tp, *typing.get_args(tp)):
        if isinstance(t, type) and dataclasses.is_dataclass(t):
            return t
    return None


def unread(raw: object, cls: type, where: str = "run") -> list[str]:
    """The keys ``cls`` declares whose value in ``raw`` its record does not hold (dropped as
    of another type, or read as something else)."""
    rec = record.load(cls, raw, lenient=True)
    return _compare(raw, record.dump(rec), cls, where)


def _compare(raw: object, got: object, cls: type, where: str) -> list[str]:
    assert isinstance(raw, dict) and isinstance(got, dict)
    out = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key = str(f.metadata.get("key", f.name))
        if key not in raw:
            continue
        at, sub = f"{where}.{key}", _record_of(hints[f.name])
        item = typing.get_args(hints[f.name])[0] if typing.get_args(hints[f.name]) else None
        if sub is not None and isinstance(raw[key], dict):
            out += _compare(raw[key], got[key], sub, at)
        elif (
            isinstance(item, type) and dataclasses.is_dataclass(item) and isinstance(raw[key], list)
        ):  # rows
            if len(raw[key]) != len(got[key]):
                out.append(f"{at}: {len(got[key])} of {len(raw[key])} rows")
            else:
                for i, (r, g) in enumerate(zip(raw[key], got[key], strict=True)):
                    out += _compare(r, g, item, f"{at}[{i}]")
        elif got.get(key) != raw[key] or type(got.get(key)) is not type(raw[key]):
            # a key the record leaves out (its section not recorded) reads as None
            out.append(f"{at}: {raw[key]!r} read as {got.get(key)!r}")
    return out


def test_every_declared_key_of_a_sample_is_read() -> None:
    assert unread(SAMPLE, RunInfo) == []
    run = runinfo.read(SAMPLE)
    assert run is not None
    assert run.backends.cudnn_benchmark is False and run.optimizers[0].cls == "AdamW"
    assert run.compile.graph_breaks[0].kind == "Data-dependent branching"
    assert run.allocator.empty_cache[0].calls == 5 and run.host.cpu_count == 8


def test_the_check_sees_a_dropped_value() -> None:
    bad = {**SAMPLE, "backends": {"cudnn_benchmark": "yes"}, "zero_grad": [1, {"line": 2}]}
    assert sorted(unread(bad, RunInfo)) == [
        "run.backends.cudnn_benchmark: 'yes' read as None",
        "run.zero_grad: 1 of 2 rows",
    ]


def test_read_is_lenient() -> None:
    run = runinfo.read(
        {
            "a_key_of_a_later_version": {"x": 1},
            "phase": 3,  # another type: absent
            "device": "cuda",  # a section that is not an object: empty
            "host": {"cpu_count": "8"},
            "backends": {"cudnn_benchmark": True, "detect_anomaly": "on", "new_flag": 1},
            "dataloaders": [7, None, {"num_workers": "2", "pin_memory": True}],
            "optimizers": {"class": "SGD"},  # not a list: no rows
            "forward": {"autocast_dtypes": ["bfloat16", 16]},
        }
    )
    assert run is not None
    assert run.phase is None and run.device == runinfo.Device() and run.host.cpu_count is None
    assert run.backends.cudnn_benchmark is True and run.backends.detect_anomaly is None
    assert run.dataloaders == (runinfo.DataLoader(num_workers=None, pin_memory=True),)
    assert run.optimizers == () and run.forward.autocast_dtypes == ("bfloat16",)
    assert runinfo.read({}) == RunInfo() and runinfo.read(None) is None


def test_strict_load_still_names_the_key() -> None:
    with pytest.raises(record.RecordError, match=r"run\.backends\.cudnn_benchmark: expected"):
        record.load(RunInfo, {"backends": {"cudnn_benchmark": "yes"}}, "run")


def test_a_detector_reads_a_value_of_another_type_as_absent() -> None:
    """cudnn-benchmark skips without the flag; a flag that is not a bool is no flag."""
    from tests.detector_helpers import analyze
    from tests.test_cudnn_benchmark import _trace

    rep = analyze(_trace().load(), "cudnn-benchmark", {"backends": {"cudnn_benchmark": "no"}})
    assert [s.id for s in rep.skipped] == ["cudnn-benchmark"]
    assert "no backends.cudnn_benchmark" in rep.skipped[0].reason


@pytest.mark.slow
def test_the_run_json_advisor_profile_writes_is_read_whole(tmp_path: Path) -> None:
    """Every key the record declares, as a real ``advisor profile`` run writes it."""
    from tests.test_profile import FAST, TRAIN, _write, advisor, outputs

    d = tmp_path
    _write(d / "proj", "train.py", TRAIN, NUM_WORKERS=0)
    _write(d / "proj", "helper.py", "VALUE = 42\n")
    p = advisor(d, *FAST, "--phases", "train", "--out", "out", "proj/train.py")
    assert p.returncode == 0, p.stderr
    run, _ = outputs(d / "out")
    assert unread(run, RunInfo) == []
    info = runinfo.read(run)
    assert info is not None and info.dataloaders and info.optimizers and info.zero_grad
    assert info.backends.cudnn_benchmark is True and info.host.cpu_count
