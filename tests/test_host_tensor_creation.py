"""host-tensor-creation: tensors made on the CPU and copied to the GPU every step."""

from __future__ import annotations

from typing import Any

import pytest

from tests.detector_helpers import analyze, found, htod, kernel_op, one, skip_reason
from tests.tracebuilder import TraceBuilder

ID = "host-tensor-creation"
SHAPE = [256, 1024]
NBYTES = 256 * 1024 * 4


def _randn(
    b: TraceBuilder, ts: float, shape: list[int] | None, dur: float = 400.0, shapes: bool = True
) -> dict[str, Any]:
    """A CPU torch.randn: aten::randn > aten::empty + aten::normal_ (no GPU launch)."""
    op = b.op("aten::randn", ts, dur, dims=[[], [], [], [], []] if shapes else None)
    b.op("aten::empty", ts + 1, 5, dims=[[], [], [], [], [], []] if shapes else None)
    b.op("aten::normal_", ts + 10, dur - 20, dims=[shape, [], [], []] if shapes else None)
    return op


def _trace(
    steps: int = 3, copied_shape: list[int] | None = None, every: int = 1, shapes: bool = True
) -> TraceBuilder:
    b = TraceBuilder()
    for i in range(steps):
        t0 = i * 10_000.0
        b.step(i + 1, t0, 10_000)
        if i % every == 0:
            _randn(b, t0 + 100, SHAPE, shapes=shapes)
            htod(b, t0 + 600, NBYTES, 100.0, shape=(copied_shape or SHAPE) if shapes else None)
        kernel_op(b, "aten::mm", t0 + 900, 20, "sgemm", gpu_ts=t0 + 950, gpu_dur=2000)
    return b


def test_cpu_randn_then_copy_every_step_fires() -> None:
    f = one(analyze(_trace().load(), ID), ID)
    assert f.confidence == "medium"
    assert "1 tensor per step made on the CPU (randn x3" in f.summary
    assert f.evidence[0].what.startswith("aten::randn [256, 1024] on the host, then Memcpy HtoD")
    assert f.evidence[0].count == 3
    # replayed without randn (400 us of host time) and the copy op (116 us, the copy itself
    # 100 us on the GPU): the host-bound step loses both (creating it on the GPU, ~7 us, is not
    # counted)
    assert f.est_savings_ms == pytest.approx((400 + 116) / 1000, abs=0.002)
    assert any(a.startswith("Replayed without the creation ops") for a in f.assumptions)


def test_matched_by_source_line_when_shapes_are_missing() -> None:
    b = _trace(shapes=False)
    for i in range(3):  # the user's line encloses both ops
        b.frame("train.py", 42, "step", i * 10_000.0 + 50, 1000)
    f = one(analyze(b.load(), ID), ID)
    assert f.confidence == "low"
    assert (f.locations[0].file, f.locations[0].line) == ("train.py", 42)


def test_different_shape_is_not_matched() -> None:
    assert not found(analyze(_trace(copied_shape=[32, 3, 224, 224]).load(), ID), ID)


def test_creation_on_the_gpu_is_not_reported() -> None:
    b = TraceBuilder()
    for i in range(3):
        t0 = i * 10_000.0
        b.step(i + 1, t0, 10_000)
        b.op("aten::randn", t0 + 100, 50, dims=[[], [], [], [], []])
        n = b.op("aten::normal_", t0 + 110, 30, dims=[SHAPE, [], [], []])
        b.launch(
            n, "cudaLaunchKernel", t0 + 115, 5, kernel="normal_kernel", gpu_ts=t0 + 130, gpu_dur=10
        )
        htod(b, t0 + 600, NBYTES, 100.0, shape=SHAPE)  # an unrelated copy of the same shape
    assert not found(analyze(b.load(), ID), ID)


def test_pattern_in_too_few_steps_is_not_reported() -> None:
    assert not found(analyze(_trace(steps=4, every=4).load(), ID), ID)


def test_missing_shapes_and_stacks_skips() -> None:
    rep = analyze(_trace(shapes=False).load(), ID)
    assert "record_shapes=True or with_stack=True" in (skip_reason(rep, ID) or "")


def test_cpu_only_trace_is_skipped() -> None:
    b = TraceBuilder(cc=None)
    b.step(1, 0, 1000)
    _randn(b, 10, SHAPE)
    rep = analyze(b.load(), ID)
    assert skip_reason(rep, ID) == "no GPU activity in this trace"


def test_kernel_launched_between_creation_and_copy_breaks_the_link() -> None:
    b = TraceBuilder()
    for i in range(3):
        t0 = i * 10_000.0
        b.step(i + 1, t0, 10_000)
        _randn(b, t0 + 100, SHAPE)
        kernel_op(b, "aten::mul", t0 + 520, 20, "mul_kernel", gpu_ts=t0 + 530, gpu_dur=5)
        htod(b, t0 + 600, NBYTES, 100.0, shape=SHAPE)
    assert not found(analyze(b.load(), ID), ID)


def test_python_data_staged_through_pinned_memory_is_not_reported() -> None:
    b = TraceBuilder()
    for i in range(3):
        t0 = i * 10_000.0
        b.step(i + 1, t0, 10_000)
        b.op("aten::lift_fresh", t0 + 100, 5, dims=[[16]])  # torch.tensor(list)
        htod(b, t0 + 200, 64, 2.0, src="Pinned", shape=[16])
    assert not found(analyze(b.load(), ID), ID)
    b2 = TraceBuilder()
    for i in range(3):
        t0 = i * 10_000.0
        b2.step(i + 1, t0, 10_000)
        b2.op("aten::lift_fresh", t0 + 100, 5, dims=[[16]])
        htod(b2, t0 + 200, 64, 2.0, src="Pageable", shape=[16])
    f = one(analyze(b2.load(), ID), ID)
    assert "(tensor x3" in f.summary
