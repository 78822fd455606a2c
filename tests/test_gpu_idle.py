"""gpu-idle: idle time inside steps, split by what the GPU waited on."""

from __future__ import annotations

import pytest

from tests.flagship_util import finding, run, skipped
from tests.tracebuilder import TraceBuilder

DL = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _steps(dl_us: float = 0, late_launch_us: float = 600, sync: bool = False) -> TraceBuilder:
    """3 steps of 1 ms: [DataLoader], kernel A (300 us), kernel B launched late at
    ``late_launch_us`` and running to +900 us; the last 100 us of each step are idle."""
    b = TraceBuilder()
    for s in range(3):
        t = s * 1000.0
        b.step(s + 1, t, 1000)
        if dl_us:
            b.annotation(DL, t, dl_us)
        a = b.op("aten::mm", t + dl_us + 1, 10)
        b.launch(a, "cudaLaunchKernel", t + dl_us + 2, 5, kernel="k_a", gpu_ts=t + dl_us + 10,
                 gpu_dur=300)  # fmt: skip
        if sync:  # the host waits for kernel A, then takes a while to launch B
            it = b.op("aten::_local_scalar_dense", t + dl_us + 20, 292)
            b.launch(it, "cudaMemcpyAsync", t + dl_us + 21, 290,
                     memcpy=("Memcpy DtoH (Device -> Pageable)", 4), gpu_ts=t + dl_us + 310,
                     gpu_dur=1)  # fmt: skip
        bo = b.op("aten::add", t + late_launch_us - 1, 10)
        b.launch(bo, "cudaLaunchKernel", t + late_launch_us, 5, kernel="k_b",
                 gpu_ts=t + late_launch_us + 10, gpu_dur=900 - late_launch_us - 10)  # fmt: skip
    return b


def test_host_bound_idle_is_split_and_half_claimed() -> None:
    f = finding(run(_steps().load(), "gpu-idle"), "gpu-idle")
    assert f is not None
    # per step: idle 0-10 (launch of A), 310-610 (B launched late), 900-1000 -> 410 us, host
    assert "idle 41%" in f.summary and "41% host launch" in f.summary
    # half of it is claimed, except the last 100 us after the trace's last kernel
    assert f.est_savings_ms == pytest.approx(0.5 * (3 * 0.41 - 0.1) / 3, abs=1e-3)  # rounded
    assert f.evidence[0].what.startswith("waiting for the host")


def test_dataloader_share_names_dataloader_stall() -> None:
    f = finding(run(_steps(dl_us=400, late_launch_us=720).load(), "gpu-idle"), "gpu-idle")
    assert f is not None and "see dataloader-stall" in f.summary
    assert "40% dataloader" in f.summary
    assert "num_workers" in f.recommendation


def test_sync_share_names_sync_point() -> None:
    f = finding(run(_steps(sync=True, late_launch_us=650).load(), "gpu-idle"), "gpu-idle")
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
    assert finding(run(b.load(), "gpu-idle"), "gpu-idle") is None
    # with the threshold lowered below the 4% idle it fires
    assert finding(run(b.load(), "gpu-idle", gpu_idle__min_idle_pct=3), "gpu-idle") is not None


def test_cpu_only_is_skipped() -> None:
    b = TraceBuilder(cc=None)
    b.step(1, 0, 100)
    b.op("aten::add", 1, 10)
    assert skipped(run(b.load(), "gpu-idle"), "gpu-idle") == "no GPU activity in this trace"
