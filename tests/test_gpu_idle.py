"""gpu-idle: idle time inside steps, split by what the GPU waited on."""

from __future__ import annotations

import pytest

from tests.detector_helpers import analyze, finding, skip_reason
from tests.tracebuilder import TraceBuilder

DL = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _steps(
    dl_us: float = 0,
    late_launch_us: float = 600,
    sync: bool = False,
    add_from_us: float | None = None,
) -> TraceBuilder:
    """3 steps of 1 ms: [DataLoader], kernel A (300 us), kernel B launched late at
    ``late_launch_us`` (by an aten::add from ``add_from_us``, default 1 us before) and running
    to +900 us; the last 100 us of each step are idle."""
    b = TraceBuilder()
    for s in range(3):
        t = s * 1000.0
        b.step(s + 1, t, 1000)
        if dl_us:
            b.annotation(DL, t, dl_us)
        a = b.op("aten::mm", t + dl_us + 1, 10)
        b.launch(
            a,
            "cudaLaunchKernel",
            t + dl_us + 2,
            5,
            kernel="k_a",
            gpu_ts=t + dl_us + 10,
            gpu_dur=300,
        )
        if sync:  # the host waits for kernel A, then takes a while to launch B
            it = b.op("aten::_local_scalar_dense", t + dl_us + 20, 292)
            b.launch(
                it,
                "cudaMemcpyAsync",
                t + dl_us + 21,
                290,
                memcpy=("Memcpy DtoH (Device -> Pageable)", 4),
                gpu_ts=t + dl_us + 310,
                gpu_dur=1,
            )
        add_ts = late_launch_us - 1 if add_from_us is None else add_from_us
        bo = b.op("aten::add", t + add_ts, late_launch_us + 9 - add_ts)
        b.launch(
            bo,
            "cudaLaunchKernel",
            t + late_launch_us,
            5,
            kernel="k_b",
            gpu_ts=t + late_launch_us + 10,
            gpu_dur=900 - late_launch_us - 10,
        )
    return b


def test_host_bound_idle_is_split_and_half_claimed() -> None:
    f = finding(analyze(_steps().load(), "gpu-idle"), "gpu-idle")
    assert f is not None
    # per step: idle 0-10 (launch of A), 310-610 (B launched late), 900-1000 -> 410 us, host
    assert "idle 41%" in f.summary and "41% host launch" in f.summary
    # only the host time inside aten calls that launch is claimed (half of it): 9 us of
    # aten::mm before kernel A and 10 us of aten::add before B per step; the host's other
    # 290 us in the gap (Python, not launching) and the idle step ends are not
    assert f.est_savings_ms == pytest.approx(0.5 * (9 + 10) / 1000, abs=1e-3)


def test_host_gap_inside_a_slow_launching_call_is_half_claimed() -> None:
    # aten::add runs 300-609 us and launches B at 600: the 310-610 gap is dispatch cost
    f = finding(analyze(_steps(add_from_us=300).load(), "gpu-idle"), "gpu-idle")
    assert f is not None
    # replayed with half of the launching calls' host time in the idle gap gone (9 + 299 us):
    # the host limits these steps, so the step loses that half
    assert f.est_savings_ms == pytest.approx(0.5 * (9 + 299) / 1000, abs=1e-3)
    assert f.est_savings_range_ms is not None
    assert f.est_savings_range_ms[0] < f.est_savings_ms < f.est_savings_range_ms[1]
    assert f.evidence[0].what.startswith("waiting for the host")


def _with(trace, other: str):  # type: ignore[no-untyped-def]
    """gpu-idle run beside the check it points to (a pointer to a check that did not report is
    taken out: advisor/analysis/pointers.py)."""
    from advisor.analysis.pipeline import Options, analyze_trace

    return analyze_trace(trace, None, Options(only=frozenset({"gpu-idle", other})))


def test_dataloader_share_names_dataloader_stall() -> None:
    f = finding(_with(_steps(dl_us=400, late_launch_us=720).load(), "dataloader-stall"), "gpu-idle")
    assert f is not None and "see dataloader-stall" in f.summary
    assert "40% dataloader" in f.summary
    assert "num_workers" in f.recommendation


def test_sync_share_names_sync_point() -> None:
    f = finding(_with(_steps(sync=True, late_launch_us=650).load(), "sync-point"), "gpu-idle")
    assert f is not None and "see sync-point" in f.summary, f.summary
    # the sync returns at +311 us after waiting 290 us for kernel A; B starts at +660 us:
    # the sync share is min(349, ~290) us per step
    assert "29% sync" in f.summary


def test_busy_gpu_does_not_fire() -> None:
    b = TraceBuilder()
    for s in range(3):
        t = s * 1000.0
        b.step(s + 1, t, 1000)
        o = b.op("aten::mm", t + 1, 10)
        b.launch(o, "cudaLaunchKernel", t + 2, 5, kernel="k", gpu_ts=t + 10, gpu_dur=960)
    assert finding(analyze(b.load(), "gpu-idle"), "gpu-idle") is None
    # with the threshold lowered below the 4% idle it fires
    assert finding(analyze(b.load(), "gpu-idle", gpu_idle__min_idle_pct=3), "gpu-idle") is not None


def test_cpu_only_is_skipped() -> None:
    b = TraceBuilder(cc=None)
    b.step(1, 0, 100)
    b.op("aten::add", 1, 10)
    assert skip_reason(analyze(b.load(), "gpu-idle"), "gpu-idle") == "no GPU activity in this trace"
