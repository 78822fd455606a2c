"""attention-materialized through a causal mask built inline between Q.K^T and softmax
(new_ones, tril, to, bitwise_not, slice, masked_fill: each op with the ops it calls), and the
reason it gives when it does not apply."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from advisor.trace.model import Trace
from tests.detector_helpers import analyze, finding, skip_reason
from tests.kineto2021 import load_2021
from tests.tracebuilder import TraceBuilder

ID = "attention-materialized"
F32 = ["float", "float"]
LOADERS: dict[str, Callable[[TraceBuilder], Trace]] = {
    "current": lambda b: b.load(),
    "kineto-2021": load_2021,
}
Q = [8, 8, 256, 64]
KT = [8, 8, 64, 256]
SCORES = [8, 8, 256, 256]
V = [8, 8, 256, 64]

# (name, input dims, kernel us or 0, children): one attention with its mask built inline, as a
# Hugging Face eager attention records it
Op = tuple[str, list[Any] | None, float, list[Any]]


def _matmul(a: list[int], b: list[int]) -> Op:
    bm = [a[0] * a[1], *a[2:]]
    return (
        "aten::matmul",
        [a, b],
        0,
        [
            ("aten::expand", [a, []], 0, [("aten::as_strided", [a, [], []], 0, [])]),
            (
                "aten::reshape",
                [a, []],
                0,
                [("aten::clone", [a, []], 0, [("aten::empty_like", [a], 0, [])])],
            ),
            ("aten::expand", [b, []], 0, [("aten::as_strided", [b, [], []], 0, [])]),
            ("aten::_unsafe_view", [a, []], 0, []),
            ("aten::bmm", [bm, [bm[0], bm[2], b[-1]]], 300.0, []),
            ("aten::_unsafe_view", [bm, []], 0, []),
        ],
    )


def _mask_chain(mask: bool = True, v: list[int] = V) -> list[Op]:
    ops: list[Op] = [_matmul(Q, KT), ("aten::mul", [SCORES, []], 100.0, [])]
    if mask:
        ops += [
            (
                "aten::new_ones",
                [SCORES, []],
                0,
                [("aten::new_empty", [SCORES], 0, [("aten::empty", [[]], 0, [])]),
                 ("aten::fill_", [[256, 256], []], 20.0, [])],
            ),
            ("aten::tril", [[256, 256], []], 20.0, []),
            (
                "aten::to",
                [[256, 256], []],
                0,
                [("aten::_to_copy", [[256, 256]], 0, [("aten::empty_strided", [[]], 0, []),
                                                     ("aten::copy_", [[256, 256]] * 2, 20.0, [])])],
            ),
            ("aten::bitwise_not", [[256, 256]], 20.0, []),
            ("aten::slice", [[256, 256], []], 0, [("aten::as_strided", [[256, 256]], 0, [])]),
            ("aten::slice", [[256, 256], []], 0, [("aten::as_strided", [[256, 256]], 0, [])]),
            ("aten::view", [[256, 256], []], 0, []),
            (
                "aten::masked_fill",
                [SCORES, [1, 1, 256, 256], []],
                0,
                [("aten::expand", [SCORES, []], 0, [("aten::as_strided", [SCORES], 0, [])]),
                 ("aten::clone", [SCORES, []], 0, [("aten::empty_like", [SCORES], 0, []),
                                                   ("aten::copy_", [SCORES, SCORES], 100.0, [])]),
                 ("aten::masked_fill_", [SCORES, [1, 1, 256, 256], []], 100.0, [])],
            ),
        ]  # fmt: skip
    ops += [
        ("aten::softmax", [SCORES, [], []], 0, [("aten::_softmax", [SCORES, [], []], 150.0, [])]),
        _matmul(SCORES, v),
    ]
    return ops


def _trace(ops: list[Op], steps: int = 3) -> TraceBuilder:
    b = TraceBuilder()
    t0 = 0.0
    for s in range(steps):
        clock = [t0 + 10.0]
        gpu = [t0 + 2000.0]

        def emit(op: Op, clock: list[float] = clock, gpu: list[float] = gpu) -> None:
            name, dims, kus, children = op
            start = clock[0]
            clock[0] += 1
            for c in children:
                emit(c)
            if kus:
                clock[0] += 1
            end = clock[0] + 1
            o = b.op(name, start, end - start, dims=dims, types=F32 if dims else None)
            if kus:
                b.launch(o, "cudaLaunchKernel", end - 2, 0.5, kernel=f"{name}_kernel",
                         gpu_ts=gpu[0], gpu_dur=kus)  # fmt: skip
                gpu[0] += kus
            clock[0] = end + 1

        for op in ops:
            emit(op)
        b.runtime("cudaDeviceSynchronize", clock[0], gpu[0] + 5 - clock[0])
        span = gpu[0] + 20 - t0
        b.step(s + 1, t0, span)
        t0 += span
    return b


@pytest.mark.parametrize("fmt", LOADERS)
def test_a_causal_mask_built_inline_is_read_through(fmt: str) -> None:
    f = finding(analyze(LOADERS[fmt](_trace(_mask_chain())), ID), ID)
    assert f is not None
    assert "1 attention call(s) per step write their score matrix" in f.summary
    assert "64 heads x 256 x 256 scores, head dim 64" in f.summary
    # every kernel from the first matmul to the second is claimed, the mask's too: the two
    # GEMMs, the scale, fill, tril, the cast's copy, bitwise_not, clone, masked_fill, softmax
    assert "1.13 ms per call in 10 kernels" in f.evidence[0].what


@pytest.mark.parametrize("fmt", LOADERS)
def test_skipped_with_the_reason(fmt: str) -> None:
    # the matmul after the softmax does not take the scores ([.., 256, 256] @ [.., 128, 64]):
    # no chain, said so
    rep = analyze(LOADERS[fmt](_trace(_mask_chain(v=[8, 8, 128, 64]))), ID)
    assert finding(rep, ID) is None
    assert skip_reason(rep, ID) == (
        "3 softmax op(s) over score matrices, but no matmul making those scores before them "
        "and another taking them after, among the nearest scale, mask, cast and layout ops"
    )
    b = TraceBuilder()
    b.step(1, 0, 100)
    o = b.op("aten::mm", 10, 20, dims=[[64, 64], [64, 64]], types=F32)
    b.launch(o, "cudaLaunchKernel", 12, 5, kernel="gemm", gpu_ts=40, gpu_dur=30)
    rep = analyze(LOADERS[fmt](b), ID)
    assert skip_reason(rep, ID) == (
        "no softmax op in this trace (no attention, or it runs in fused kernels)"
    )
