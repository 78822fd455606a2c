"""A manual optimizer loop (``for p in model.parameters(): p.data.add_(p.grad, alpha=-lr)``, no
optimizer) is the per-parameter pattern ``single-tensor-optimizer`` reports: information on a CPU
trace, a replayed saving on a GPU trace; not a run of updates on one buffer, not fewer than
``single_tensor_optimizer.min_loop_ops``, not updates before the backward."""

from __future__ import annotations

from tests.detector_helpers import analyze, finding, one, skip_reason
from tests.tracebuilder import TraceBuilder

ID = "single-tensor-optimizer"
SHAPES = [[2001, 200], [800, 200], [800, 200], [800], [800], [200, 200], [200], [2001], [64, 64]]


def _trace(gpu: bool, shapes=SHAPES, backward_first: bool = True, steps: int = 3):
    b = TraceBuilder(cc=(8, 0) if gpu else None)
    for s in range(steps):
        t0 = s * 2000.0
        b.step(s + 1, t0, 2000)
        fwd = b.op("aten::linear", t0 + 10, 200, dims=[[32, 200], [200, 200], [200]])
        if gpu:
            b.launch(
                fwd, "cudaLaunchKernel", t0 + 20, 5, kernel="sgemm", gpu_ts=t0 + 30, gpu_dur=150
            )
        t = t0 + 300.0
        if backward_first:
            bw = b.op("autograd::engine::evaluate_function: AddmmBackward0", t, 300)
            if gpu:
                b.launch(
                    bw, "cudaLaunchKernel", t + 10, 5, kernel="sgemm", gpu_ts=t + 20, gpu_dur=250
                )
            t += 320
        for shape in shapes:
            op = b.op(
                "aten::add_", t, 40, dims=[shape, shape, []], types=["float", "float", "Scalar"]
            )
            if gpu:
                b.launch(
                    op,
                    "cudaLaunchKernel",
                    t + 5,
                    20,
                    kernel="vectorized_add",
                    gpu_ts=t + 30,
                    gpu_dur=3,
                )
            t += 45
        if not backward_first:
            b.op("autograd::engine::evaluate_function: AddmmBackward0", t, 300)
    return b.load()


def test_a_manual_loop_on_a_cpu_trace_is_information() -> None:
    f = one(analyze(_trace(gpu=False), ID), ID)
    assert f.severity == "info" and f.est_savings_ms == 0
    assert "one at a time" in f.summary and "9 in-place updates (aten::add_)" in f.summary
    assert "_foreach_add_" in f.snippet


def test_a_manual_loop_on_a_gpu_trace_is_replayed() -> None:
    f = one(analyze(_trace(gpu=True), ID), ID)
    assert f.est_savings_ms > 0 and f.severity != "info"
    assert "replayed" in f.summary


def test_not_one_buffer_not_too_few_not_before_backward() -> None:
    same = [[800, 200]] * 12  # one tensor updated again and again: not parameters
    assert finding(analyze(_trace(gpu=False, shapes=same), ID), ID) is None
    assert finding(analyze(_trace(gpu=False, shapes=SHAPES[:5]), ID), ID) is None
    rep = analyze(_trace(gpu=False, backward_first=False), ID)
    assert finding(rep, ID) is None and "manual update loop" in (skip_reason(rep, ID) or "")
