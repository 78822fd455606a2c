"""A first call's host-only library set-up (advisor/derive/onetime.py ``first-call``): ~2 ms of
host time inside the first aten::mm with no long runtime call is one-time work, kept out of the
steady steps; in the current and 2021 Kineto categories."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from advisor.derive.onetime import one_time_events
from advisor.derive.steps import steady_steps
from advisor.trace.model import Trace
from tests.detector_helpers import analyze, finding
from tests.kineto2021 import load_2021
from tests.tracebuilder import TraceBuilder

LOADERS: dict[str, Callable[[TraceBuilder], Trace]] = {
    "current": lambda b: b.load(),
    "kineto-2021": load_2021,
}


def _mm(first_us: float = 2300.0, launch_us: float = 5.0, later_us: float = 30.0) -> TraceBuilder:
    """5 steps of one aten::mm each; the first call takes ``first_us`` on the host (a launch
    of ``launch_us`` inside), the later ones ``later_us``; the GPU kernel 100 us."""
    b = TraceBuilder()
    t0 = 0.0
    for s in range(5):
        host = first_us if s == 0 else later_us
        span = host + 300
        b.step(s + 1, t0, span)
        o = b.op("aten::mm", t0 + 10, host, dims=[[256, 256], [256, 256]], types=["float"] * 2)
        b.launch(o, "cudaLaunchKernel", t0 + 10 + host - launch_us - 2, launch_us,
                 kernel="ampere_sgemm_64x64_nn", gpu_ts=t0 + 20 + host, gpu_dur=100)  # fmt: skip
        b.runtime("cudaDeviceSynchronize", t0 + 15 + host, 110)
        t0 += span
    return b


@pytest.mark.parametrize("fmt", LOADERS)
def test_the_first_matmul_sets_the_library_up(fmt: str) -> None:
    trace = LOADERS[fmt](_mm())
    ev = one_time_events(trace)
    first = ev[ev["kind"] == "first-call"]
    assert list(first["name"]) == ["aten::mm"]
    assert int(first["dur_ns"].iloc[0]) == pytest.approx(2_270_000, abs=1000)  # 2.3 ms - 30 us
    # the step holding it is a warm-up step, out of the steady ones
    assert 1 not in set(steady_steps(trace).steps["step"])
    f = finding(analyze(trace, "one-time-init"), "one-time-init")
    assert f is not None
    assert any("first call's host-only library set-up" in e.what for e in f.evidence)


@pytest.mark.parametrize("fmt", LOADERS)
@pytest.mark.parametrize(
    "kw",
    [
        {"first_us": 2300.0, "launch_us": 2000.0},  # a long launch: module loading, not this
        {"first_us": 600.0},  # under 1 ms more
        {"first_us": 2300.0, "later_us": 400.0},  # under 10x its later calls
    ],
)
def test_not_a_first_call_set_up(fmt: str, kw: dict) -> None:
    ev = one_time_events(LOADERS[fmt](_mm(**kw)))
    assert "first-call" not in set(ev["kind"])
