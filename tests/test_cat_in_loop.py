"""cat-in-loop on built traces: positive, negative and missing-data cases."""

from __future__ import annotations

from typing import Any

import pytest

from tests.detector_helpers import analyze, finding, skip_reason
from tests.tracebuilder import TraceBuilder

CAT = "cat-in-loop"


def cat_op(
    b: TraceBuilder, ts: float, dur: float, shapes: list[list[int]], name: str = "aten::cat"
) -> dict[str, Any]:
    return b.op(name, ts, dur, dims=[shapes, []], types=["TensorList", "Scalar"])


def test_growing_cat_chain_is_reported_with_quadratic_saving() -> None:
    b = TraceBuilder(cc=None)
    b.step(1, 0, 10_000)
    b.frame("collect.py", 21, "gather_preds", 1, 9_000)
    for i in range(10):
        cat_op(b, 10 + i * 100, 10 + i, [[i * 4, 8], [4, 8]])
    f = finding(analyze(b.load(), CAT), CAT)
    assert f is not None
    # costs 10..19 us: all calls minus the last one
    assert f.est_savings_ms == pytest.approx((sum(range(10, 20)) - 19) / 1000)
    assert f.locations[0].file == "collect.py" and f.locations[0].count == 10
    assert "32 -> 320 elements" in f.evidence[0].what


def test_restacking_a_growing_list_is_reported() -> None:
    b = TraceBuilder(cc=None)
    b.step(1, 0, 10_000)
    b.frame("loop.py", 7, "run", 1, 9_000)
    for i in range(1, 9):
        cat_op(b, 10 + i * 100, 5, [[16]] * i, name="aten::stack")
    f = finding(analyze(b.load(), CAT), CAT)
    assert f is not None and f.locations[0].line == 7


def test_interleaved_accumulators_on_one_line_are_followed_separately() -> None:
    b = TraceBuilder(cc=None)
    b.step(1, 0, 10_000)
    b.frame("kv.py", 3, "decode", 1, 9_000)
    t = 10.0
    for i in range(6):
        for _layer in range(2):  # a KV cache per layer, same shapes, same line
            cat_op(b, t, 4, [[1, 2, i * 3, 8], [1, 2, 3, 8]])
            t += 20
    f = finding(analyze(b.load(), CAT), CAT)
    assert f is not None
    assert "2 growing chain(s)" in f.evidence[0].what


def test_same_size_cats_and_short_chains_are_not_reported() -> None:
    b = TraceBuilder(cc=None)
    b.step(1, 0, 10_000)
    for i in range(20):  # fixed-size concatenation every iteration: linear, fine
        cat_op(b, 10 + i * 100, 5, [[32, 8], [32, 8]])
    for i in range(4):  # growing, but too short
        cat_op(b, 5000 + i * 100, 5, [[i * 4 + 1, 3], [4, 3]])
    assert finding(analyze(b.load(), CAT), CAT) is None


def test_cat_cost_on_gpu_comes_from_its_kernels() -> None:
    b = TraceBuilder()
    b.step(1, 0, 10_000)
    for i in range(6):
        op = cat_op(b, 10 + i * 100, 8, [[i * 4, 8], [4, 8]])
        b.launch(
            op,
            "cudaLaunchKernel",
            12 + i * 100,
            3,
            kernel="CatArrayBatchedCopy",
            gpu_ts=20 + 50 * i * (i + 1),
            gpu_dur=100 * (i + 1),
        )  # back to back
    b.runtime("cudaDeviceSynchronize", 650, 1475)  # waits for the queued copies (until 2120)
    f = finding(analyze(b.load(), CAT), CAT)
    assert f is not None
    # the first five copies (1.5 ms of kernels) go; replayed, the last one still starts after
    # its own launch at 512 us: the step ends 1.0 ms earlier (+ 40 us of host time)
    assert f.est_savings_ms == pytest.approx(1.04, abs=0.005)
    assert f.confidence == "medium"  # no stacks: grouped by thread


def test_stack_cost_on_gpu_comes_from_the_cat_inside_it() -> None:
    b = TraceBuilder()
    b.step(1, 0, 10_000)
    for i in range(1, 7):
        st = cat_op(b, 10 + i * 100, 8, [[16]] * i, name="aten::stack")
        inner = cat_op(b, 11 + i * 100, 6, [[16]] * i)
        b.launch(
            inner,
            "cudaLaunchKernel",
            12 + i * 100,
            3,
            kernel="CatArrayBatchedCopy",
            gpu_ts=120 + 25 * i * (i - 1),
            gpu_dur=50 * i,
        )  # back to back
        assert st["name"] == "aten::stack"
    b.runtime("cudaDeviceSynchronize", 750, 425)  # waits for the copies (until 1170)
    f = finding(analyze(b.load(), CAT), CAT)
    assert f is not None
    # 0.75 ms of kernels from the first five calls; the last starts after its launch (612 us)
    assert f.est_savings_ms == pytest.approx(0.29, abs=0.005)


def test_cat_without_tensorlist_shapes_is_skipped() -> None:
    b = TraceBuilder(cc=None)
    b.step(1, 0, 1000)
    b.op("aten::mm", 1, 5, dims=[[4, 4], [4, 4]])
    for i in range(8):
        b.op("aten::cat", 10 + i * 10, 5, dims=[[], []], types=["TensorList", "Scalar"])
    assert "TensorList" in (skip_reason(analyze(b.load(), CAT), CAT) or "")
    b2 = TraceBuilder(cc=None)
    b2.step(1, 0, 100)
    b2.op("aten::cat", 1, 5)
    assert "record_shapes" in (skip_reason(analyze(b2.load(), CAT), CAT) or "")
