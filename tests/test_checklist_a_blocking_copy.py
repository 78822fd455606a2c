"""blocking-copy: synchronous copies that serialize the host and the GPU."""

from __future__ import annotations

import pytest

from tests.checklist_a_helpers import analyze, found, htod, kernel_op, one, skip_reason
from tests.tracebuilder import TraceBuilder

ID = "blocking-copy"
MB8 = 8_000_000


def _steps(b: TraceBuilder, n: int = 3) -> None:
    for i in range(n):
        b.step(i + 1, i * 10_000.0, 10_000)


def test_copy_plus_stream_sync_fires_with_window_and_range() -> None:
    b = TraceBuilder()
    _steps(b)
    for i in range(3):
        htod(b, i * 10_000.0 + 100, MB8, 1000.0, src="Pinned", call_dur=20)
    f = one(analyze(b.load(), ID), ID)
    # window: call at +102 .. end of the wait at +102+20+1+5 = 26 us; the copy runs
    # 1000 us on the GPU from +104 but the host only waited 26 us: the GPU ran no kernel
    assert f.est_savings_ms == pytest.approx(0.026, abs=0.001)
    assert "cudaMemcpyAsync + cudaStreamSynchronize" in f.evidence[0].what
    assert f.evidence[0].count == 3


def test_pageable_copy_blocks_the_call_range_low_end_is_beyond_the_transfer() -> None:
    b = TraceBuilder()
    _steps(b)
    for i in range(3):
        htod(b, i * 10_000.0 + 100, MB8, 1000.0)  # call lasts 1002 us, + 5 us wait after 1 us
    f = one(analyze(b.load(), ID), ID)
    assert f.est_savings_ms == pytest.approx(1.008, abs=0.002)
    lo, hi = f.est_savings_range_ms or (0, 0)
    assert lo == pytest.approx(0.008, abs=0.002) and hi == pytest.approx(1.008, abs=0.002)
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
    # window 102..1566 (1464 us) minus 948 us of kernel -> 516 us; beyond the copy: 16 us
    assert f.est_savings_ms == pytest.approx(0.516, abs=0.002)
    lo, _ = f.est_savings_range_ms or (0, 0)
    assert lo == pytest.approx(0.016, abs=0.002)
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
    # counted from the copy's start on the GPU (+5102) to the end of the wait (+6109)
    assert f.est_savings_ms == pytest.approx(1.007, abs=0.002)


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
    b.launch(to, "cudaMemcpyAsync", 110, 10, memcpy=("Memcpy HtoD (Pinned -> Device)", MB8),
             gpu_ts=125, gpu_dur=1000)  # fmt: skip
    b.runtime("cudaStreamIsCapturing", 122, 1, to)
    b.runtime("cudaStreamSynchronize", 125, 1005, to)
    f = one(analyze(b.load(), ID), ID)
    assert "cudaMemcpyAsync + cudaStreamSynchronize" in f.evidence[0].what
    # counted from the copy's start (the first GPU activity in the trace) to the wait's end
    assert f.est_savings_ms == pytest.approx(1.005, abs=0.002)
