"""Only savings a fix can realise: a read of the call's result is kept (valued at the overlap
it allows), the harness's syncs are left out (docs/savings.md)."""

from __future__ import annotations

from advisor.detectors._sync_roles import sync_roles

from advisor.analysis.pipeline import Options, analyze_trace
from tests.detector_helpers import analyze, finding
from tests.tracebuilder import TraceBuilder

DTOH = ("Memcpy DtoH (Device -> Pageable)", 4 << 20)


def _inference(n: int, backward: bool = False, post_us: float = 300.0) -> TraceBuilder:
    """Per 4 ms step: 40 launches, 3 ms of GPU work, the output read back with `.cpu()` (a
    pageable device-to-host copy that waits for the GPU), then ``post_us`` of host work on the
    result. ``backward``: the step also runs backward work (a training step)."""
    b = TraceBuilder()
    for s in range(n):
        t = s * 4000.0
        b.step(s + 1, t, 4000)
        for i in range(40):
            op = b.op("aten::mm" if not backward or i < 20 else "MmBackward0", t + 10 + i * 8, 6)
            b.launch(op, "cudaLaunchKernel", t + 11 + i * 8, 4, "k", t + 20 + i * 75, 75)
        to = b.op("aten::to", t + 400, 3100)
        cp = b.op("aten::copy_", t + 401, 3098)
        b.launch(cp, "cudaMemcpyAsync", t + 402, 3095, memcpy=DTOH, gpu_ts=t + 3020, gpu_dur=470)
        assert to
        b.op("aten::argmax", t + 3600, post_us)  # host work on the result
    return b


def test_final_read_of_the_result_is_kept_and_valued_at_the_overlap() -> None:
    rep = analyze_trace(_inference(3).load(), None, Options())
    sync = finding(rep, "sync-point")
    assert sync is not None
    # the read waits ~3 ms each step; only the host time after it to the step's end
    # (503 us, the argmax on the result included) could overlap the next call
    assert 0.49 <= sync.est_savings_ms <= 0.51
    assert "necessary" in sync.summary
    assert not any(f.id == "blocking-copy" for f in rep.findings)


def test_one_call_in_the_window_claims_nothing_for_the_overlap() -> None:
    sync = finding(analyze(_inference(1).load(), "sync-point"), "sync-point")
    assert sync is not None and sync.severity == "info" and sync.est_savings_ms == 0
    assert "cannot tell whether it recurs" in sync.summary


def test_a_read_in_a_training_step_is_removable() -> None:
    trace = _inference(3, backward=True).load()
    roles = sync_roles(trace)
    assert set(roles["role"]) == {"remove"}


def test_profiler_stop_sync_gives_no_finding_above_info() -> None:
    b = TraceBuilder()
    for s in range(3):
        t = s * 2000.0
        b.step(s + 1, t, 2000)
        for i in range(10):
            op = b.op("aten::mm", t + 10 + i * 8, 6)
            b.launch(op, "cudaLaunchKernel", t + 11 + i * 8, 4, "k", t + 20 + i * 150, 150)
    # a synchronize in the middle step, then 400 us of host work and more GPU work
    b.runtime("cudaDeviceSynchronize", 2210, 1300)
    for i in range(5):
        op = b.op("aten::add", 3900 + i * 8, 6)
        b.launch(op, "cudaLaunchKernel", 3901 + i * 8, 4, "k", 3910 + i * 20, 20)
    assert list(sync_roles(b.load())["role"]) == ["remove"]
    # the same call made by torch.profiler (a server stopping the profiler from its loop)
    b.frame("torch/profiler/profiler.py", 823, "stop", 2200, 1400)
    assert list(sync_roles(b.load())["role"]) == ["harness"]
    rep = analyze_trace(b.load(), None, Options())
    assert all(f.severity == "info" for f in rep.findings if f.id == "sync-point")
    assert any("harness" in q.what for q in rep.run.trace_quality)


def test_a_range_always_contains_its_estimate() -> None:
    from advisor.analysis.ranking import finalize
    from advisor.detect.draft import Draft
    from advisor.detect.thresholds import Thresholds

    d = Draft("fp32-matmul", "t", 29.39, "medium", "s", "r", "", est_savings_range_ms=(0, 0))
    f = finalize(d, 95.5, Thresholds({}))
    assert f.est_savings_range_ms == (0.0, 29.39)
    d = Draft("fp32-matmul", "t", 5.0, "medium", "s", "r", "", est_savings_range_ms=(9, 7))
    assert finalize(d, 95.5, Thresholds({})).est_savings_range_ms == (5.0, 9.0)
