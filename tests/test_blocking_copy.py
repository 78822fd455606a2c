"""blocking-copy: synchronous copies that serialize the host and the GPU."""

from __future__ import annotations

import pytest

from tests.detector_helpers import analyze, found, htod, kernel_op, one, skip_reason
from tests.tracebuilder import TraceBuilder

ID = "blocking-copy"
MB8 = 8_000_000


def _steps(b: TraceBuilder, n: int = 3) -> None:
    for i in range(n):
        b.step(i + 1, i * 10_000.0, 10_000)


def test_copy_plus_stream_sync_saves_the_wait_by_replay() -> None:
    b = TraceBuilder()
    _steps(b)
    for i in range(3):
        # the host waits in cudaStreamSynchronize until the 1000 us copy ends
        htod(b, i * 10_000.0 + 100, MB8, 1000.0, src="Pinned", call_dur=20, wait=1000)
    f = one(analyze(b.load(), ID), ID)
    # replayed without the wait, each step ends ~1 ms earlier; the host-idle steps leave the
    # GPU time to run the copy even in the stream (the low end); the 18 us of copy call are
    # host work that stays
    assert f.est_savings_ms == pytest.approx(0.981, abs=0.005)
    assert "cudaMemcpyAsync + cudaStreamSynchronize" in f.evidence[0].what
    assert f.evidence[0].count == 3
    assert any("Replayed:" in a for a in f.assumptions)


def test_wait_shorter_than_the_call_saves_nothing_and_is_latent() -> None:
    b = TraceBuilder()
    _steps(b)
    for i in range(3):
        htod(b, i * 10_000.0 + 100, MB8, 1000.0, src="Pinned", call_dur=20)
    f = one(analyze(b.load(), ID), ID)
    # the host held 26 us, 20 of them the call's own work: replayed, nothing is saved
    assert f.est_savings_ms == 0 and f.severity == "info"
    assert "saves nothing" in f.summary


def test_pageable_copy_blocks_the_call() -> None:
    b = TraceBuilder()
    _steps(b)
    for i in range(3):
        htod(b, i * 10_000.0 + 100, MB8, 1000.0)  # call lasts 1002 us, + 5 us wait after 1 us
    f = one(analyze(b.load(), ID), ID)
    # the step is host-idle after the copy: even in the stream the copy is off the host's path
    assert f.est_savings_ms == pytest.approx(1.002, abs=0.002)
    assert "1 host-to-device blocking copy" in f.summary


def test_pageable_copy_without_sync_still_blocks() -> None:
    b = TraceBuilder()
    _steps(b)
    for i in range(3):
        htod(b, i * 10_000.0 + 100, MB8, 1000.0, sync=False)
    f = one(analyze(b.load(), ID), ID)
    assert "pageable memory (blocks the call)" in f.evidence[0].what
    assert f.est_savings_ms == pytest.approx(1.002, abs=0.002)


def test_kernel_time_inside_the_window_is_not_counted() -> None:
    b = TraceBuilder()
    _steps(b, 1)
    # a kernel queued before the copy runs 50..1050; the copy waits for it (1060..1560) and the
    # host waits in cudaStreamSynchronize until 1565
    kernel_op(b, "aten::mm", 10, 20, "sgemm", gpu_ts=50, gpu_dur=1000)
    htod(b, 100, MB8, 500.0, src="Pinned", call_dur=10, gpu_delay=958, wait=1453)
    f = one(analyze(b.load(), ID), ID)
    # window 102..1566 (1464 us), 948 us of it the kernel the GPU must run anyway: replayed
    # with the copy off the stream the host waits for nothing; with non_blocking=True alone
    # the copy still runs after the kernel, which the step then waits for
    assert f.est_savings_ms == pytest.approx(0.5, abs=0.01)
    lo, _ = f.est_savings_range_ms or (0, 0)
    assert lo == pytest.approx(0.0, abs=0.002)
    assert (
        "1 host-to-device blocking copy (8.0 MB) per step holds the host for 1.46 ms" in f.summary
    )


def test_dtoh_large_copy_with_sync_fires_but_item_sized_does_not() -> None:
    b = TraceBuilder()
    _steps(b)
    for i in range(3):
        htod(b, i * 10_000.0 + 100, MB8, 800.0, src="Pageable", kind="DtoH")
        htod(b, i * 10_000.0 + 5000, 4, 2.0, src="Pageable", kind="DtoH")  # .item()
    f = one(analyze(b.load(), ID), ID)
    assert "1 device-to-host" in f.summary
    assert all("0.00 MB" not in e.what for e in f.evidence)


def test_non_blocking_pinned_copy_is_not_reported() -> None:
    b = TraceBuilder()
    _steps(b)
    for i in range(3):
        htod(b, i * 10_000.0 + 100, MB8, 1000.0, src="Pinned", call_dur=10, sync=False)
    assert not found(analyze(b.load(), ID), ID)


def test_window_before_first_recorded_gpu_activity_is_not_counted() -> None:
    b = TraceBuilder()
    _steps(b, 1)
    # the call waits 5 ms for work launched before the profiler started (not in the trace)
    htod(b, 100, MB8, 1000.0, call_dur=6000, gpu_delay=5000)
    f = one(analyze(b.load(), ID), ID)
    # the 5 ms the call waits with the GPU idle are a wait on work the trace does not show (an
    # untraced wait): no saving rests on them, the copy still follows that work; without the
    # host waiting, its other 4 ms of the 10 ms step overlap it: the step falls to those 5 ms
    assert f.est_savings_ms == pytest.approx(5.0, abs=0.01)
    assert any("does not show" in a for a in f.assumptions)
    assert "holds the host for 1.01 ms" in f.summary


def test_cpu_only_trace_is_skipped() -> None:
    b = TraceBuilder(cc=None)
    b.step(1, 0, 1000)
    b.op("aten::to", 10, 100)
    rep = analyze(b.load(), ID)
    assert skip_reason(rep, ID) == "no GPU activity in this trace"


def test_bookkeeping_calls_between_copy_and_wait_are_skipped() -> None:
    b = TraceBuilder()
    _steps(b, 1)
    to = b.op("aten::to", 100, 2000)
    b.launch(
        to,
        "cudaMemcpyAsync",
        110,
        10,
        memcpy=("Memcpy HtoD (Pinned -> Device)", MB8),
        gpu_ts=125,
        gpu_dur=1000,
    )
    b.runtime("cudaStreamIsCapturing", 122, 1, to)
    b.runtime("cudaStreamSynchronize", 125, 1005, to)
    f = one(analyze(b.load(), ID), ID)
    assert "cudaMemcpyAsync + cudaStreamSynchronize" in f.evidence[0].what
    # the wait (until the copy ends) is what the replay removes
    assert f.est_savings_ms == pytest.approx(1.0, abs=0.01)
