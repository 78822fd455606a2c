"""Launch-overhead advice in a window that also captures CUDA graphs (advisor.analysis.captured):
information, no saving, on a run that is recording graphs."""

from __future__ import annotations

from advisor.analysis.pipeline import Options, analyze_trace
from advisor.derive.kind import captured_launches, trace_kind
from tests.detector_helpers import finding
from tests.tracebuilder import TraceBuilder


def launch_bound(capture: bool) -> TraceBuilder:
    """3 steps of 1 ms, each launching 50 kernels of 3 us 15 us apart (launch-bound: the GPU
    idles most of the step); with ``capture``, the last step also records 20 launches into a
    graph (stream capture: no kernel runs)."""
    b = TraceBuilder()
    for s in range(3):
        t = s * 1000.0
        b.step(s + 1, t, 1000)
        b.frame("train.py", 30, "train", t + 6, 50 * 15 + 8)
        for i in range(50):
            lt = t + 10 + i * 15
            op = b.op("aten::add_", lt - 1, 10)
            b.launch(op, "cudaLaunchKernel", lt, 8, kernel="elementwise", gpu_ts=lt + 10, gpu_dur=3)
        if capture and s == 2:
            b.runtime("cudaStreamBeginCapture", t + 800, 2)
            for i in range(20):
                op = b.op("aten::mul", t + 805 + i * 8, 6)
                b.runtime("cudaLaunchKernel", t + 806 + i * 8, 4, op)
            b.runtime("cudaStreamEndCapture", t + 970, 2)
    return b


def test_launch_overhead_is_information_where_graphs_are_captured() -> None:
    t = launch_bound(capture=True).load()
    assert captured_launches(t) == (20, 170)
    assert trace_kind(t).kind == "mixed"
    rep = analyze_trace(t, None, Options())
    for det in ("gpu-idle", "tiny-kernels"):
        f = finding(rep, det)
        assert f is not None, det
        assert f.severity == "info" and f.est_savings_ms == 0.0, det
        assert any("(1 stream-capture range(s), 20 of 170 launch calls" in a for a in f.assumptions)
    # other findings keep their figures (the same steps as the step time)
    assert rep.run.steps_profiled == 3


def test_without_capture_launch_overhead_is_claimed() -> None:
    # launch-bound: the whole step in CUDA graphs is gpu-idle's row, tiny-kernels listed in it
    rep = analyze_trace(launch_bound(capture=False).load(), None, Options())
    f = finding(rep, "gpu-idle")
    assert f is not None and f.est_savings_ms > 0 and f.severity != "info"
    assert "tiny-kernels" in [r.id for r in f.related]


def test_cudagraph_mwe_capture_without_recorded_launches() -> None:
    # the capture range of cudagraph_mwe records no launch call (CUPTI left them out), yet the
    # run captures a graph and replays it 20 times: no launch-overhead claim
    from advisor.trace import load_trace
    from tests.conftest import shared_trace

    t = load_trace(shared_trace("gpupuzzlers/launch_queue/cudagraph_mwe.json.gz"))
    assert captured_launches(t)[0] == 0
    rep = analyze_trace(t, None, Options())
    f = finding(rep, "tiny-kernels")
    assert f is not None and f.severity == "info" and f.est_savings_ms == 0.0
    assert any("their launch calls not recorded" in a for a in f.assumptions)
