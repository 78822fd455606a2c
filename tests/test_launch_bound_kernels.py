"""Launch-bound kernels of any length: the gap before each kernel read against the host time of
the operator that launched it (tiny-kernels, heuristics/_launch.py), in the current and the 2021
Kineto categories."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from advisor.analysis.pipeline import Options, analyze_trace
from advisor.trace import load_trace
from advisor.trace.model import Trace
from tests.conftest import shared_trace
from tests.detector_helpers import analyze, finding, one
from tests.kineto2021 import load_2021
from tests.tracebuilder import TraceBuilder

ID = "tiny-kernels"
LOADERS: dict[str, Callable[[TraceBuilder], Trace]] = {
    "current": lambda b: b.load(),
    "2021": load_2021,
}


def gemms(
    n: int = 40,
    kernel_us: float = 10.0,
    period_us: float = 25.0,
    big_us: float = 0.0,
    copy_first: bool = False,
    name: str = "ampere_sgemm_32x32_sliced1x4_nn",
    steps: int = 3,
) -> TraceBuilder:
    """``steps`` steps of ``n`` aten::mm calls ``period_us`` apart (20 us on the host each, the
    kernel launched 14 us in, ``kernel_us`` long), queued behind one ``big_us`` GEMM when given;
    ``copy_first``: a blocking device-to-host copy (``.cpu()``) first, which drains the queue."""
    b = TraceBuilder()
    span = 200 + big_us + n * period_us + 500
    for s in range(steps):
        t0 = s * span
        b.step(s + 1, t0, span)
        t = t0 + 20
        gpu_free = t
        if copy_first:
            to = b.op("aten::to", t, 60)
            cp = b.op("aten::copy_", t + 2, 56)
            b.launch(
                cp,
                "cudaMemcpyAsync",
                t + 5,
                50,
                memcpy=("Memcpy DtoH (Device -> Pageable)", 1 << 16),
                gpu_ts=t + 8,
                gpu_dur=40,
            )
            assert to
            t += 80
            gpu_free = t
        if big_us:
            op = b.op("aten::mm", t, 20)
            b.launch(op, "cudaLaunchKernel", t + 14, 5, kernel=name, gpu_ts=t + 21, gpu_dur=big_us)
            gpu_free = t + 21 + big_us
            t += period_us
        for _ in range(n):
            op = b.op("aten::mm", t, 20)
            start = max(t + 21, gpu_free)
            b.launch(
                op, "cudaLaunchKernel", t + 14, 5, kernel=name, gpu_ts=start, gpu_dur=kernel_us
            )
            gpu_free = start + kernel_us
            t += period_us
    return b


@pytest.mark.parametrize("fmt", list(LOADERS))
def test_ten_us_gemms_issued_by_twenty_us_operators_are_launch_bound(fmt: str) -> None:
    f = finding(analyze(LOADERS[fmt](gemms()), ID), ID)
    assert f is not None
    # 39 of 40 per step: the GPU empties 15 us into each 20 us operator (the first follows
    # the step's start)
    assert f.summary.startswith("39 launch-bound kernels per step (0 of them tiny; median 10.0")
    assert f.evidence[0].what.startswith("aten::mm: 39 kernels/step")
    assert f.est_savings_ms > 0


@pytest.mark.parametrize("fmt", list(LOADERS))
def test_gemms_queued_behind_a_large_one_wait_only_once_the_queue_empties(fmt: str) -> None:
    # 60 GEMMs of 10 us issued 25 us apart behind a 500 us one: the queue drains 15 us per
    # launch, so the first 32 run back to back and the last 28 wait for their launches
    lg = finding(analyze(LOADERS[fmt](gemms(n=60, big_us=500.0)), ID), ID)
    assert lg is not None
    assert lg.summary.startswith("28 launch-bound kernels per step")


@pytest.mark.parametrize("fmt", list(LOADERS))
def test_four_us_sgemms_with_seventeen_us_gaps_in_a_step_of_few_kernels(fmt: str) -> None:
    # 12 sgemms per step, 11 of them waiting 17 us for their launch: fewer than
    # tiny_kernels.min_per_step, but most of the step's kernels
    f = finding(analyze(LOADERS[fmt](gemms(n=12, kernel_us=4.0, period_us=21.0)), ID), ID)
    assert f is not None
    assert f.summary.startswith("11 tiny kernels per step (median 4.0 us")


@pytest.mark.parametrize("fmt", list(LOADERS))
def test_a_blocking_copy_drains_the_queue_before_launch_bound_kernels(fmt: str) -> None:
    f = finding(analyze(LOADERS[fmt](gemms(n=30, copy_first=True)), ID), ID)
    assert f is not None
    drained = [e for e in f.evidence if "drained the queue" in e.what]
    assert len(drained) == 1
    assert drained[0].what.startswith("after aten::to (cudaMemcpyAsync) waited for the GPU")
    # every GEMM after it but the first (its operator began after the copy had ended on the
    # GPU: the gap before it is the copy's, not a launch's)
    assert "29 kernels/step ran launch-bound" in drained[0].what


@pytest.mark.parametrize("fmt", list(LOADERS))
def test_kernels_that_keep_the_gpu_busy_are_not_launch_bound(fmt: str) -> None:
    # 30 us GEMMs issued 25 us apart: each is queued before the previous one ends
    assert finding(analyze(LOADERS[fmt](gemms(kernel_us=30.0)), ID), ID) is None


@pytest.mark.shared
def test_cuda_queue_puzzler_reports_the_launch_bound_small_gemms_at_their_line() -> None:
    rel = "gpupuzzlers/launch_queue/n1600_cuda_queue_puzzlers.trace.json.gz"
    rep = analyze_trace(load_trace(shared_trace(rel)), None, Options(only=frozenset({ID})))
    f = one(rep, ID)
    # 10 us GEMMs 25 us apart: the 8 small ones of the first burst and the large one after
    # them, the 8 after the blocking copy drained the queue, and a cumsum kernel
    assert f.summary.startswith("18 launch-bound kernels per step (1 of them tiny; median 10.0")
    assert f.evidence[0].what.startswith("aten::matmul: 17 kernels/step")
    assert any("after aten::to (cudaMemcpyAsync)" in e.what for e in f.evidence)
    assert (f.locations[0].file, f.locations[0].line) == ("cuda_launch_queue.py", 28)
