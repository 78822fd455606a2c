"""dataloader-stall: time in DataLoader.__next__, exposed share, run.json settings."""

from __future__ import annotations

import pytest

from tests.detector_helpers import analyze, finding, skip_reason
from tests.tracebuilder import TraceBuilder

SINGLE = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
MULTI = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"


def _loop(
    dl_us: float,
    name: str = SINGLE,
    gpu: bool = True,
    gpu_overlap_us: float = 0,
    as_op: bool = False,
) -> TraceBuilder:
    """3 steps of 1 ms, each starting with ``dl_us`` in ``__next__``; the GPU works from
    ``dl_us + 10`` to 990 us (and during the first ``gpu_overlap_us`` of the fetch)."""
    b = TraceBuilder(cc=(8, 0) if gpu else None)
    for s in range(3):
        t = s * 1000.0
        b.step(s + 1, t, 1000)
        b.frame("train.py", 55, "main", t, 999)
        if as_op:  # 2020-21 traces record the range as an operator
            b.op(name, t + 1, dl_us - 1)
        else:
            b.annotation(name, t + 1, dl_us - 1)
        if gpu:
            if gpu_overlap_us:
                b.kernel("prev_step_tail", t + 1, gpu_overlap_us)
            o = b.op("aten::mm", t + dl_us + 1, 5)
            b.launch(
                o,
                "cudaLaunchKernel",
                t + dl_us + 2,
                5,
                kernel="k",
                gpu_ts=t + dl_us + 10,
                gpu_dur=980 - dl_us,
            )
        else:
            b.op("aten::mm", t + dl_us + 1, 900 - dl_us)
    return b


def test_single_process_loader_stall_on_gpu() -> None:
    f = finding(analyze(_loop(301).load(), "dataloader-stall"), "dataloader-stall")
    assert f is not None
    assert f.est_savings_ms == pytest.approx(0.3, abs=0.002)
    assert "30% of the step" in f.summary and "num_workers=0" in f.summary
    assert "num_workers=4" in f.recommendation and "pin_memory=True" in f.recommendation
    assert f.locations[0].file == "train.py" and f.severity == "high"


def test_exposed_time_excludes_gpu_overlap() -> None:
    f = finding(
        analyze(_loop(301, gpu_overlap_us=200).load(), "dataloader-stall"), "dataloader-stall"
    )
    # replayed without the fetch, each step is held by its GPU work (about 0.88 ms of 1 ms), but
    # the last: nothing a next step queued runs at its start (0.68 ms of GPU work, 0.7 of host);
    # the saving is the mean over the 3 steps: (0.11 + 0.11 + 0.3) / 3
    assert f is not None and f.est_savings_ms == pytest.approx(0.173, abs=0.01)
    assert any(a.startswith("Replayed:") for a in f.assumptions)


def test_run_json_settings_and_cpu_bound() -> None:
    ctx = {
        "cpu_count": 3,
        "dataloaders": [
            {
                "num_workers": 0,
                "pin_memory": False,
                "batch_size": 32,
                "persistent_workers": False,
                "prefetch_factor": None,
                "dataset_len": 1000,
                "file": "train.py",
                "line": 12,
            }
        ],
    }
    f = finding(analyze(_loop(301).load(), "dataloader-stall", ctx), "dataloader-stall")
    assert f is not None
    assert "num_workers=2" in f.recommendation and "3 CPUs" in f.recommendation
    assert "batch_size=32" in f.recommendation and "batch_size=32" in f.snippet
    assert f.locations[0].line == 12 and f.locations[0].function == "DataLoader(...)"


def test_cpu_only_and_legacy_operator_ranges_count_fully() -> None:
    f = finding(
        analyze(_loop(201, gpu=False, as_op=True).load(), "dataloader-stall"), "dataloader-stall"
    )
    assert f is not None and f.est_savings_ms == pytest.approx(0.2, abs=0.002)
    assert "20% of the step" in f.summary and "pin_memory" not in f.recommendation


def test_short_fetches_with_workers_do_not_fire() -> None:
    assert (
        finding(analyze(_loop(31, name=MULTI).load(), "dataloader-stall"), "dataloader-stall")
        is None
    )
    # a slow multi-process loader does fire, and asks for more workers
    f = finding(
        analyze(
            _loop(301, name=MULTI).load(), "dataloader-stall", {"dataloaders": [{"num_workers": 2}]}
        ),
        "dataloader-stall",
    )
    assert f is not None and "raise `num_workers` to 4" in f.recommendation


def test_missing_data() -> None:
    b = TraceBuilder(cc=None)
    b.step(1, 0, 100)
    b.op("aten::add", 1, 10)
    assert finding(analyze(b.load(), "dataloader-stall"), "dataloader-stall") is None
    empty = TraceBuilder()
    empty.step(1, 0, 100)
    empty.kernel("k", 1, 10)
    assert "CPU operator" in (
        skip_reason(analyze(empty.load(), "dataloader-stall"), "dataloader-stall") or ""
    )
