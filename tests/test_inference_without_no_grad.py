"""inference-without-no-grad on built traces: positive, negative and missing-data cases (real
traces: test_optimizer_and_python_checks_real.py).
"""

from __future__ import annotations

import pytest

from tests.detector_helpers import analyze, finding, skip_reason
from tests.tracebuilder import TID, TraceBuilder

BW_TID = TID + 1


def backward(b: TraceBuilder, ts: float) -> None:
    b.op("autograd::engine::evaluate_function: AddmmBackward0", ts, 20, tid=BW_TID, seq=3)
    b.op("AddmmBackward0", ts + 1, 18, tid=BW_TID, seq=3)


INF = "inference-without-no-grad"


def inference_trace(
    n_steps: int = 3,
    nodes: int = 30,
    grad: bool = True,
    bw: bool = False,
    cc: tuple[int, int] | None = None,
) -> TraceBuilder:
    b = TraceBuilder(cc=cc)
    seq = 100
    for s in range(n_steps):
        t0 = s * 1000.0
        b.step(s + 1, t0, 1000)
        b.frame("infer.py", 12, "evaluate", t0 + 5, 900)
        for i in range(nodes):
            b.op("aten::linear", t0 + 10 + i * 20, 15, seq=seq if grad else None)
            seq += 1
        if bw:
            backward(b, t0 + 800)
    return b


def test_inference_with_grad_is_reported_with_nodes_and_line() -> None:
    rep = analyze(inference_trace().load(), INF)
    f = finding(rep, INF)
    assert f is not None
    # 30 nodes per step -> 29 counted (distinct sequence numbers minus one), 1 us each
    assert f.est_savings_ms == pytest.approx(0.029)
    assert f.confidence == "medium"
    assert "29 autograd nodes" in f.summary
    assert f.locations[0].file == "infer.py" and f.locations[0].line == 12
    assert "inference_mode" in f.snippet


def test_inference_with_run_json_modules_is_high_confidence() -> None:
    rows = [{"module": "ResNet", "file": "infer.py", "line": 40, "function": "evaluate"}]
    f = finding(analyze(inference_trace().load(), INF, {"forward": {"eval_with_grad": rows}}), INF)
    assert f is not None and f.confidence == "high"
    assert f.locations[0].function == "evaluate" and f.locations[0].line == 40
    assert any("ResNet" in e.what for e in f.evidence)


def test_inference_saving_is_capped_by_gpu_idle_time() -> None:
    b = inference_trace(n_steps=1, cc=(8, 0))
    op = b.op("aten::mm", 2, 3)
    b.launch(op, "cudaLaunchKernel", 3, 1, kernel="gemm", gpu_ts=0, gpu_dur=1000)
    f = finding(analyze(b.load(), INF), INF)
    assert f is not None
    assert f.est_savings_ms == 0.0  # the GPU is busy all step: host overhead is hidden
    assert "the GPU limits them" in f.summary


def test_inference_saving_on_a_host_bound_gpu_trace_is_replayed() -> None:
    b = inference_trace(cc=(8, 0))
    for s in range(3):  # a short kernel the host waits for after its forward
        t0 = s * 1000.0
        op = b.op("aten::mm", t0 + 700, 10)
        b.launch(op, "cudaLaunchKernel", t0 + 701, 5, kernel="gemm", gpu_ts=t0 + 710, gpu_dur=50)
        b.runtime("cudaDeviceSynchronize", t0 + 712, 50)
    f = finding(analyze(b.load(), INF), INF)
    assert f is not None
    # 29 us of autograd recording on the host's critical path; range 0.7x-1.2x per node
    assert f.est_savings_ms == pytest.approx(0.029, abs=0.001)
    lo, hi = f.est_savings_range_ms or (0, 0)
    assert lo == pytest.approx(0.0203, abs=0.001) and hi == pytest.approx(0.0348, abs=0.001)
    assert any("Replayed:" in a for a in f.assumptions)


def test_training_steps_and_no_grad_inference_are_not_reported() -> None:
    assert finding(analyze(inference_trace(bw=True).load(), INF), INF) is None
    assert finding(analyze(inference_trace(grad=False).load(), INF), INF) is None


def test_grad_mode_without_nodes_is_not_reported() -> None:
    b = TraceBuilder(cc=None)
    b.step(1, 0, 1000)
    for i in range(50):  # grad mode on, nothing requires grad: the number never advances
        b.op("aten::select", 10 + i * 10, 5, seq=7)
    assert finding(analyze(b.load(), INF), INF) is None


def test_eval_step_between_training_steps_is_low_confidence() -> None:
    b = TraceBuilder(cc=None)
    seq = 0
    for s, train in enumerate((True, False, True, False)):  # the last one may be cut short
        t0 = s * 1000.0
        b.step(s + 1, t0, 1000)
        for i in range(30):
            b.op("aten::linear", t0 + 10 + i * 20, 15, seq=seq)
            seq += 1
        if train:
            backward(b, t0 + 800)
    f = finding(analyze(b.load(), INF), INF)
    assert f is not None and f.confidence == "low"
    assert f.summary.startswith("1 step(s)")  # step 2 only: the final step is not judged
    assert f.est_savings_ms == pytest.approx(0.029 / 4, abs=0.001)  # rounded to us


def test_inference_below_threshold_is_not_reported() -> None:
    t = inference_trace(nodes=10).load()
    assert finding(analyze(t, INF), INF) is None
    assert finding(analyze(t, INF, **{"inference_without_no_grad.min_nodes_per_step": 5}), INF)


def test_inference_without_ops_or_run_json_is_skipped() -> None:
    b = TraceBuilder()
    b.step(1, 0, 100)
    rep = analyze(b.load(), INF)
    assert "no CPU operator events" in (skip_reason(rep, INF) or "")


def test_eval_with_grad_during_training_is_low_confidence_information() -> None:
    run = {"forward": {"eval_with_grad": [{"module": "Teacher", "file": "kd.py", "line": 9}]}}
    f = finding(analyze(inference_trace(bw=True).load(), INF, run), INF)
    assert f is not None
    assert f.severity == "info" and f.est_savings_ms == 0.0 and f.confidence == "low"
    assert "Teacher" in f.summary
