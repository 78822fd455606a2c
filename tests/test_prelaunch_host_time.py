"""Host time before a step's first launch, outside any operator (gpu-idle's *prelaunch* share):
valued at the GPU idle it causes, with the Python frames that ran, and advice that fits a step
whose work already runs as a graph; in the current and the 2021 Kineto categories."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from advisor.analysis.pipeline import Options, analyze_trace
from advisor.trace.model import Trace
from tests.detector_helpers import one
from tests.kineto2021 import load_2021
from tests.tracebuilder import TraceBuilder

LOADERS: dict[str, Callable[[TraceBuilder], Trace]] = {
    "current": lambda b: b.load(),
    "2021": load_2021,
}


def decode_steps(python_ms: float = 20.0, gpu_ms: float = 20.0, steps: int = 4) -> TraceBuilder:
    """Serving decode steps: the scheduler's Python (``python_ms``, outside any operator: 200
    short per-request frames under the event loop), one graph launch replaying 200 kernels back
    to back (``gpu_ms``), then the host polls the step's event until the GPU is done."""
    b = TraceBuilder()
    span = (python_ms + gpu_ms) * 1000 + 300
    for s in range(steps):
        t0 = s * span
        b.step(s + 1, t0, span)
        loop = b.frame("scheduler.py", 300, "event_loop", t0 + 1, span - 2)
        per = python_ms * 1000 / 200
        for i in range(200):
            b.frame("schedule_batch.py", 88, "prepare_request", t0 + 5 + i * per, per - 1, loop)
        t = t0 + 10 + python_ms * 1000
        b.frame("cuda_graph_runner.py", 520, "replay", t - 3, 25, loop)
        rt = b.runtime("cudaGraphLaunch", t, 15)
        k_us = gpu_ms * 1000 / 200
        for i in range(200):
            b.kernel("decode_kernel", t + 20 + i * k_us, k_us, corr=rt["args"]["correlation"])
        poll = t + 40
        while poll < t + 20 + gpu_ms * 1000:
            b.frame("scheduler.py", 350, "poll_done", poll, 5, loop)
            b.runtime("cudaEventQuery", poll + 1, 2)
            poll += 100
    return b


@pytest.mark.parametrize("fmt", list(LOADERS))
def test_host_time_before_the_first_graph_launch_is_valued_at_the_idle_it_causes(
    fmt: str,
) -> None:
    rep = analyze_trace(LOADERS[fmt](decode_steps()), None, Options())
    f = one(rep, "gpu-idle")
    # the GPU idles the 20 ms of scheduler Python before each step's graph launch: removing
    # it from the step (overlapping it with the previous step's GPU work) saves about that
    assert f.est_savings_ms == pytest.approx(20.0, abs=0.5)
    assert rep.run.step_ms_median == pytest.approx(40.3, abs=0.1)
    assert "prelaunch" in f.summary and "before each step's first launch" in f.summary.lower()
    assert f.recommendation.startswith("The step's GPU work already runs as graphs")
    assert "previous step" in f.recommendation
    frames = [e.what for e in f.evidence if "first launch" in e.what[:40]]
    if fmt == "current":  # the frames that ran, the largest first
        assert "schedule_batch.py(88): prepare_request (19.8 ms per step)" in frames[0]
        assert f.locations and f.locations[0].file == "schedule_batch.py"
    else:  # 2021: no Python frames in the trace
        assert "no Python frames in the trace" in frames[0]


def test_a_short_host_gap_before_the_first_launch_is_not_claimed() -> None:
    # 0.1 ms of Python before a 20 ms graph: the GPU is busy; nothing to claim
    rep = analyze_trace(decode_steps(python_ms=0.1).load(), None, Options())
    assert not [f for f in rep.findings if f.id == "gpu-idle" and f.est_savings_ms > 0.2]
