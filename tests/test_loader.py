"""Loader: every quirk of the formats torch.profiler has written, on synthetic and real traces."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from advisor.errors import TraceError
from advisor.trace import find_traces, load_trace
from tests.conftest import SHARED, shared_trace
from tests.tracebuilder import TraceBuilder


def _simple() -> TraceBuilder:
    b = TraceBuilder()
    b.step(1, 0, 100)
    b.step(2, 100, 100)
    op = b.op("aten::mm", 10, 30, dims=[[8, 16], [16, 8]], types=["float", "float"])
    b.launch(op, "cudaLaunchKernel", 12, 5, kernel="volta_sgemm_128x64_nn", gpu_ts=150, gpu_dur=20)
    return b


def test_times_are_int64_ns_rebased_and_steps_assigned() -> None:
    t = _simple().load()
    assert t.kernels["ts_ns"].dtype == np.int64
    assert t.cpu_ops["ts_ns"].iloc[0] == 10_000
    assert list(t.steps["step"]) == [1, 2]
    assert t.steps["dur_ns"].tolist() == [100_000, 100_000]
    # the kernel runs during step 2 but was launched in step 1: it belongs to step 1
    assert t.kernels["step"].tolist() == [1]
    assert t.kernels["launch_idx"].tolist() == [0]
    assert t.runtime["op_idx"].tolist() == [0]
    assert t.cpu_ops["step"].tolist() == [1]


def test_gzip_and_plain_files_load_the_same(tmp_path: Path) -> None:
    b = _simple()
    a = load_trace(b.write(tmp_path / "a.json"))
    g = load_trace(b.write(tmp_path / "b.json.gz"))
    assert a.kernels.drop(columns=[]).equals(g.kernels)
    assert len(a.cpu_ops) == len(g.cpu_ops) == 1


def test_bare_array_string_tids_and_legacy_categories(tmp_path: Path) -> None:
    events = [
        {
            "ph": "X",
            "cat": "Operator",
            "name": "ProfilerStep#3",
            "pid": 7,
            "tid": "7",
            "ts": 1000,
            "dur": 500,
            "args": {},
        },
        {
            "ph": "X",
            "cat": "Operator",
            "name": "aten::conv2d",
            "pid": 7,
            "tid": "7",
            "ts": 1010,
            "dur": 40,
            "args": {"external id": 5, "Input dims": [[1, 3, 8, 8]]},
        },
        {
            "ph": "X",
            "cat": "Runtime",
            "name": "cudaLaunchKernel",
            "pid": 7,
            "tid": "7",
            "ts": 1020,
            "dur": 5,
            "args": {"correlation": 9, "external id": 5},
        },
        {
            "ph": "X",
            "cat": "Kernel",
            "name": "implicit_convolve_sgemm",
            "pid": 0,
            "tid": "stream 7",
            "ts": 1100,
            "dur": 30,
            "args": {"correlation": 9, "external id": 5, "device": 0, "stream": 7},
        },
        {
            "ph": "X",
            "cat": "Memcpy",
            "name": "Memcpy HtoD (Pageable -> Device)",
            "pid": 0,
            "tid": "stream 7",
            "ts": 1200,
            "dur": 10,
            "args": {"correlation": 10, "device": 0, "stream": 7, "bytes": 4096},
        },
        {"ph": "s", "id": 9, "pid": 7, "tid": 7, "ts": 1020, "cat": "async", "name": "launch"},
    ]
    p = tmp_path / "legacy.json"
    p.write_text(json.dumps(events))
    t = load_trace(p)
    assert t.meta.format == "legacy"
    # legacy traces record ProfilerStep#N as an operator too
    assert t.cpu_ops["tid"].tolist() == [7, 7]
    assert t.cpu_ops["input_dims"].iloc[1] == [[1, 3, 8, 8]]
    assert t.cpu_ops["external_id"].tolist() == [-1, 5]
    assert t.cpu_ops["parent_idx"].tolist() == [-1, 0]
    assert t.runtime["op_idx"].tolist() == [1]
    assert t.kernels["launch_idx"].tolist() == [0]
    assert t.memcpy["kind"].tolist() == ["HtoD"]
    assert t.memcpy["src"].tolist() == ["Pageable"]
    assert t.memcpy["bytes"].tolist() == [4096]
    assert list(t.steps["step"]) == [3]


def test_float_ns_timestamps_and_base_time(tmp_path: Path) -> None:
    b = TraceBuilder(base_ts=4458676522690.655)
    b.header["baseTimeNanoseconds"] = 1711964646000000000
    b.op("aten::add", 0.001, 0.002)
    b.op("aten::add", 1.5, 0.25)
    t = b.load()
    assert t.cpu_ops["ts_ns"].tolist() == [0, 1499]
    assert t.cpu_ops["dur_ns"].tolist() == [2, 250]
    assert t.meta.base_time_ns == 1711964646000000000


def test_no_step_markers_make_one_synthetic_step() -> None:
    b = TraceBuilder()
    b.op("aten::add", 0, 10)
    b.op("aten::mul", 40, 10)
    t = b.load()
    assert t.meta.synthetic_steps
    assert t.steps["dur_ns"].tolist() == [50_000]
    assert t.cpu_ops["step"].tolist() == [0, 0]


def test_cpu_only_trace_has_no_gpu() -> None:
    b = TraceBuilder(cc=None)
    b.step(1, 0, 100)
    b.op("aten::add", 1, 10)
    t = b.load()
    assert not t.has_gpu
    assert t.meta.platform == "cpu"
    assert t.meta.devices == ()


def test_compute_properties_and_rocm(tmp_path: Path) -> None:
    b = TraceBuilder(cc=None)
    b.header["computeProperties"] = [
        {"id": 0, "name": "Tesla V100", "major": 7, "minor": 0, "multiProcessorCount": 80}
    ]
    t = b.load()
    assert t.meta.devices[0].compute_capability == (7, 0)
    assert t.meta.devices[0].num_sms == 80
    r = TraceBuilder(cc=(9, 0), gpu_name="AMD Instinct MI250X")
    r.runtime("hipLaunchKernel", 0, 5)
    r.kernel("Cijk_Ailk_Bljk", 10, 5, stream=0)
    rt = r.load()
    assert rt.meta.platform == "rocm"


def test_python_frames_and_user_lines() -> None:
    b = TraceBuilder()
    top = b.frame("/home/me/train.py", 42, "train", 0, 100)
    lib = b.frame(
        "/usr/lib/python3.11/site-packages/torch/nn/modules/module.py",
        1500,
        "_call_impl",
        10,
        50,
        parent=top,
    )
    b.frame("/home/me/model.py", 7, "forward", 20, 20, parent=lib)
    t = b.load()
    assert t.python["is_user"].tolist() == [True, False, True]
    assert t.python["line"].tolist() == [42, 1500, 7]
    from advisor.derive.locate import Locator

    loc = Locator(t)
    assert loc.at(1000, 25_000).line == 7  # type: ignore[union-attr]
    assert loc.at(1000, 60_000).line == 42  # type: ignore[union-attr]
    assert loc.at(1000, 200_000) is None


def test_malformed_events_are_skipped_and_counted(tmp_path: Path) -> None:
    b = _simple()
    d = b.to_dict()
    d["traceEvents"] += [
        {"ph": "X", "cat": "cpu_op", "name": "neg", "pid": 1, "tid": 1, "ts": 5, "dur": -3},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": "soon", "dur": 1},
        {"ph": "X", "cat": "mystery_cat", "name": "m", "pid": 0, "tid": 7, "ts": 5, "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": "no_ts", "pid": 1, "tid": 1},
        42,
    ]
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(d))
    t = load_trace(p)
    assert len(t.cpu_ops) == 1 and len(t.kernels) == 1
    assert t.meta.skipped_events == 4
    assert t.meta.unknown_categories == {"mystery_cat": 1}


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "empty file"),
        (b"hello", "not JSON"),
        (b'{"traceEvents": [{"ph": "X"', "truncated JSON"),
        (b"[1, 2, 3]", "not a profiler trace"),
        (b'{"foo": 1}', "no 'traceEvents'"),
        (b'{"traceEvents": 5}', "expected a list"),
        (b"\x1f\x8b\x08\x00garbage", "gzip"),
    ],
)
def test_bad_files_raise_one_line_trace_errors(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    p = tmp_path / "t.json"
    p.write_bytes(content)
    with pytest.raises(TraceError) as ei:
        load_trace(p)
    msg = str(ei.value)
    assert str(p) in msg and problem in msg and "\n" not in msg


def test_truncated_gzip(tmp_path: Path) -> None:
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(json.dumps(_simple().to_dict()).encode())[:-20])
    with pytest.raises(TraceError, match="truncated gzip"):
        load_trace(p)


def test_directory_discovery(tmp_path: Path) -> None:
    b = _simple()
    b.write(tmp_path / "host_1.1700000000.pt.trace.json.gz")
    (tmp_path / "notes.txt").write_text("x")
    assert [f.name for f in find_traces(tmp_path)] == ["host_1.1700000000.pt.trace.json.gz"]
    assert len(load_trace(tmp_path).kernels) == 1
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TraceError, match="no trace files"):
        find_traces(empty)
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for r in (1, 0, 10):
        b.write(ranks / f"trace.rank{r}.json.gz")
    (ranks / "run.json").write_text("{}")
    assert [f.name for f in find_traces(ranks)] == [
        "trace.rank0.json.gz",
        "trace.rank1.json.gz",
        "trace.rank10.json.gz",
    ]


ALL_SHARED = (
    sorted(p.relative_to(SHARED).as_posix() for p in SHARED.rglob("*.json*"))
    if SHARED.exists()
    else []
)


@pytest.mark.shared
@pytest.mark.parametrize("rel", ALL_SHARED or ["(none)"])
def test_every_shared_trace_loads(rel: str) -> None:
    """Every real trace in ../shared/traces loads (or is refused with one clean line)."""
    path = shared_trace(rel)
    try:
        t = load_trace(path)
    except TraceError as err:
        assert "\n" not in str(err)
        return
    assert len(t.steps) >= 1
    for df in (t.kernels, t.memcpy, t.runtime, t.cpu_ops):
        assert (df["dur_ns"] >= 0).all()
        assert df["ts_ns"].dtype == np.int64


@pytest.mark.shared
def test_real_trace_quirks() -> None:
    legacy = load_trace(
        shared_trace("kineto/resnet50_legacy_2020_num_workers_0/worker0.pt.trace.json.gz")
    )
    assert legacy.meta.format == "legacy"  # no deviceProperties: the device is inferred
    assert [d.source.startswith("inferred") for d in legacy.meta.devices] == [True]
    assert list(legacy.steps["step"]) == [5, 6, 7, 8, 9, 10]
    # kernels queued before the capture began have no launch call in the file; all others do
    later = legacy.kernels[legacy.kernels["ts_ns"] > 50_000_000]
    assert (later["launch_idx"] >= 0).mean() > 0.999
    v100 = load_trace(
        shared_trace("kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz")
    )
    assert v100.meta.devices[0].compute_capability == (7, 0)
    assert v100.has_shapes
    pageable = v100.memcpy[(v100.memcpy["kind"] == "HtoD") & (v100.memcpy["src"] == "Pageable")]
    assert (pageable["bytes"] == 19_267_584).sum() == 6
    assert len(v100.memory) > 10_000
    amd = load_trace(shared_trace("hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"))
    assert amd.meta.platform == "rocm"
    cupti = load_trace(
        shared_trace("hta/cupti_profiler/benchmark_result_924719_1679055439_trace.json.gz")
    )
    assert not cupti.has_gpu and cupti.meta.profiler_ranges > 0
    nccl = load_trace(shared_trace("hta/nccl_parser_config/nccl_data.json.gz"))
    assert nccl.meta.rank == 0 and nccl.meta.world_size == 2
    comm = nccl.kernels[nccl.kernels["is_comm"]]["name"].astype(str)
    assert len(comm) == 21 and comm.str.startswith("nccl").all()
    tpu = load_trace(shared_trace("kineto/tb_plugin_test/gpu_metrics_input.json"))
    assert tpu.meta.devices[0].compute_capability == (7, 0)


def test_locator_finds_the_enclosing_line_after_many_finished_frames() -> None:
    b = TraceBuilder()
    loop = b.frame("/home/me/train.py", 10, "train", 0, 10_000)
    for i in range(300):  # a loop calling a library function many times
        b.frame("torch/nn/functional.py", 99, "relu", 1 + i * 30, 20, parent=loop)
    t = b.load()
    from advisor.derive.locate import Locator

    assert Locator(t).at(1000, 9_500_000).line == 10  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("file", "user"),
    [
        ("/home/me/train.py", True),
        ("examples/train.py", True),
        ("train.py", True),
        ("torch/nn/modules/conv.py", False),
        ("typing.py", False),
        ("transformers/models/bert.py", False),
        ("/usr/lib/python3.11/site-packages/numpy/core.py", False),
        ("<built-in method item>", False),
        ("test.py", True),
        ("trace.py", True),
        ("/work/venv/bin/advisor", False),
    ],
)
def test_user_files(file: str, user: bool) -> None:
    from advisor.trace.build import is_user_file

    assert is_user_file(file) is user


def test_gpu_activity_is_built_once_and_callers_cannot_change_it() -> None:
    t = _simple().load()
    first = t.gpu_activity()
    assert first["kind"].tolist() == ["kernel"] and first["ts_ns"].tolist() == [150_000]
    first["kind"] = "changed"  # a caller adding or setting columns on its copy
    first.loc[first.index[0], "ts_ns"] = -1
    again = t.gpu_activity()
    assert again["kind"].tolist() == ["kernel"] and again["ts_ns"].tolist() == [150_000]
    assert t.gpu_activity().equals(again)
