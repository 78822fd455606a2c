"""python-loop on built traces: positive, negative and missing-data cases."""

from __future__ import annotations

from typing import Any

import pytest

from tests.detector_helpers import analyze, finding, skip_reason
from tests.tracebuilder import PID, TID, TraceBuilder

PL = "python-loop"


def builtin_frame(
    b: TraceBuilder, name: str, ts: float, dur: float, parent: dict[str, Any]
) -> None:
    """A C call as torch's Python tracer names it (no file and line)."""
    b._pyid += 1
    b.events.append(
        {
            "ph": "X",
            "cat": "python_function",
            "name": name,
            "pid": PID,
            "tid": TID,
            "ts": b.base + ts,
            "dur": dur,
            "args": {
                "Python id": b._pyid,
                "Python thread": 0,
                "Python parent id": parent["args"]["Python id"],
            },
        }
    )


def loop_trace(
    per_step: int = 250, file: str = "train.py", steps: int = 2, gpu_busy: bool = False
) -> TraceBuilder:
    b = TraceBuilder(cc=(8, 0) if gpu_busy else None)
    for s in range(steps):
        t0 = s * 10_000.0
        b.step(s + 1, t0, 10_000)
        outer = b.frame("train.py", 80, "main", t0 + 1, 9_990)
        body = b.frame(file, 30, "loss_fn", t0 + 2, 9_900, parent=outer)
        t = t0 + 5
        for _ in range(per_step):
            b.op("aten::select", t, 2, dims=[[64], [], []], types=["float", "Scalar", "Scalar"])
            builtin_frame(b, "<built-in method item of Tensor object at 0x7f>", t + 3, 4, body)
            b.op("aten::item", t + 4, 3, dims=[[]], types=["float"])
            b.op("aten::_local_scalar_dense", t + 4.5, 2, dims=[[]], types=["float"])
            t += 12
        if gpu_busy:
            op = b.op("aten::mm", t0 + 9_995, 1)
            b.launch(op, "cudaLaunchKernel", t0 + 9_995, 1, kernel="gemm", gpu_ts=t0, gpu_dur=9_990)
    return b


def test_python_loop_reports_the_line_and_measured_cpu_time() -> None:
    f = finding(analyze(loop_trace().load(), PL), PL)
    assert f is not None
    assert f.locations[0].file == "train.py" and f.locations[0].line == 30
    assert f.locations[0].count == 1000  # 250 select + 250 item per step, 2 steps
    # vectorizing removes the loop's wall time, not only its ops: per step, the span from the
    # first op to the last (249 iterations of 12 us, then the last one's 6.5 us), minus the
    # longest op (3 us), which a vectorized version still runs
    assert f.est_savings_ms == pytest.approx(2.9915, abs=0.001)
    assert "measured CPU time" in " ".join(f.assumptions)
    assert "select x500" in f.evidence[0].what and "item x500" in f.evidence[0].what


def test_python_loop_inside_library_code_is_not_reported() -> None:
    for lib in (
        "torch/nn/functional.py",
        "/opt/venv/lib/python3.11/site-packages/torchrec/x.py",
        "torchrec/sparse/jagged_tensor.py",
    ):
        assert finding(analyze(loop_trace(file=lib).load(), PL), PL) is None


def test_python_loop_below_threshold_is_not_reported() -> None:
    t = loop_trace(per_step=90).load()  # 180 per-element ops per step
    assert finding(analyze(t, PL), PL) is None
    assert finding(analyze(t, PL, **{"python_loop.min_ops_per_step": 150}), PL) is not None


def test_python_loop_counts_scalar_arithmetic_on_0dim_tensors_only() -> None:
    b = TraceBuilder(cc=None)
    b.step(1, 0, 10_000)
    b.frame("train.py", 44, "score", 1, 9_000)
    for i in range(300):
        b.op("aten::mul", 5 + i * 20, 2, dims=[[], []], types=["float", "float"])
        b.op("aten::add", 15 + i * 20, 2, dims=[[64], []], types=["float", "Scalar"])
    f = finding(analyze(b.load(), PL), PL)
    assert f is not None and f.locations[0].count == 300  # the 0-dim muls only


def test_python_loop_saving_is_capped_by_gpu_idle_time() -> None:
    f = finding(analyze(loop_trace(gpu_busy=True).load(), PL), PL)
    assert f is not None
    # the loop runs 5..3005 us; the GPU is busy 0..9990 us of each 10 ms step: the step cannot
    # get shorter than its GPU work, whatever the host saves
    assert f.est_savings_ms < 0.02


def test_python_loop_needs_stacks() -> None:
    b = TraceBuilder(cc=None)
    b.step(1, 0, 1000)
    for i in range(300):
        b.op("aten::select", i * 2, 1, dims=[[8], [], []])
    assert "with_stack" in (skip_reason(analyze(b.load(), PL), PL) or "")
