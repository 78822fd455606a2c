"""Attention computed as separate ops: ``Q @ K^T`` -> (scale, mask) -> softmax -> ``P @ V``.
Found here once per trace for ``attention-materialized`` (which claims these kernels) and
``kernel-efficiency`` (which leaves them alone). Not a detector.

A chain is read from the ops on one thread, in order, each op with the ops it calls taken as
one (the matmul's own ``expand``/``clone``/``bmm``, a mask's ``empty``/``fill_`` are not looked
at on their own), at most ``SEARCH`` of them on each side of the softmax:

- a **softmax** (``aten::softmax``, ``aten::_softmax``, ``aten::_safe_softmax``) over scores
  ``[..., L, S]`` with ``L`` and ``S`` at least ``attention_materialized.min_seq``;
- the nearest **matmul** before it (``aten::matmul``, ``bmm``, ``baddbmm``, ``einsum``) whose
  result has the scores' last two dims and element count (``[..., L, E] @ [..., E, S]``), with
  only scale, mask, cast and layout ops between (``mul``, ``div``, ``add``, ``masked_fill``,
  ``where``, ``to``, ``view``...), a mask built inline among them (``new_ones``, ``tril``,
  ``bitwise_not``, ``slice``, comparisons...);
- the nearest **matmul** after it (dropout, casts and views between) that takes a tensor of the
  scores' shape and ``[..., S, Ev]``.

The chain's kernels are every kernel launched by the ops from the first matmul's start to the
second's end on that thread: the two GEMMs, the softmax and what ran between them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from advisor.arrays import unique_ints
from advisor.detect.thresholds import register
from advisor.trace.model import Trace
from advisor.trace.names import name_flags

from ._dataflow import matmul_out, tensor_dims
from ._matmul import op_dtype
from ._ops import inherit, kernel_op, parent_has

register(
    "attention_materialized.min_seq",
    128.0,
    "query and key lengths from which a materialized score matrix is reported",
)

SOFTMAX = frozenset({"aten::softmax", "aten::_softmax", "aten::_safe_softmax"})
MATMUL = frozenset(
    {"aten::matmul", "aten::bmm", "aten::baddbmm", "aten::einsum", "aten::mm", "aten::addmm"}
)
# ops that may sit between the matmuls and the softmax of one attention (scale, mask, dropout,
# casts, layout): anything else ends the search
BETWEEN = frozenset(
    f"aten::{n}"
    for n in (
        "mul",
        "mul_",
        "div",
        "div_",
        "add",
        "add_",
        "sub",
        "masked_fill",
        "masked_fill_",
        "where",
        "to",
        "_to_copy",
        "copy_",
        "type_as",
        "view",
        "reshape",
        "_reshape_alias",
        "_unsafe_view",
        "expand",
        "contiguous",
        "clone",
        "transpose",
        "permute",
        "as_strided",
        "empty",
        "empty_like",
        "empty_strided",
        "dropout",
        "native_dropout",
        "feature_dropout",
        "detach",
        "lift_fresh",
        "scalar_tensor",
        "resolve_conj",
        "resolve_neg",
        # a mask built inline: causal (tril/triu over ones), padding (comparisons, logical
        # ops), sliced to the scores' size
        "new_ones",
        "new_zeros",
        "new_full",
        "new_empty",
        "ones",
        "ones_like",
        "zeros",
        "zeros_like",
        "full",
        "full_like",
        "fill_",
        "arange",
        "tril",
        "triu",
        "bitwise_not",
        "logical_not",
        "bitwise_and",
        "bitwise_or",
        "logical_and",
        "logical_or",
        "eq",
        "ne",
        "lt",
        "le",
        "gt",
        "ge",
        "slice",
        "select",
        "unsqueeze",
        "squeeze",
        "alias",
    )
)
MATH_SDPA = "aten::_scaled_dot_product_attention_math"
SEARCH = 24  # ops looked at on each side of the softmax


@dataclass(frozen=True)
class Chain:
    """One materialized attention call: cpu_ops rows of its matmuls and softmax, its kernels
    (rows of ``trace.kernels``), the attention's sizes and dtype."""

    qk: int
    softmax: int
    pv: int
    kernels: np.ndarray
    bh: int  # batch x heads (every leading dim of the scores)
    L: int
    S: int
    E: int
    Ev: int
    dtype: str | None
    in_math_sdpa: bool  # inside SDPA's math backend (SDPA was called but fell back)

    @property
    def shape(self) -> str:
        return f"{self.bh}x{self.L}x{self.S}, head dim {self.E}"

    def flops(self) -> float:
        return 2.0 * self.bh * self.L * self.S * (self.E + self.Ev)

    def nbytes(self, elt: int) -> float:
        """Q, K, V read and O written once: what a fused kernel moves."""
        per_head = self.L * self.E + self.S * self.E + self.S * self.Ev + self.L * self.Ev
        return float(elt) * self.bh * per_head


def chains(trace: Trace, min_seq: int) -> list[Chain]:
    """The materialized attention calls of ``trace`` (memoized per ``min_seq``)."""
    return trace.memo(f"attention.chains.{min_seq}", lambda: _chains(trace, min_seq))


def score_softmaxes(trace: Trace, min_seq: int) -> tuple[int, int]:
    """(softmax ops, those over ``[..., L, S]`` scores with L and S at least ``min_seq``): what
    ``attention-materialized`` says when it finds no chain."""
    ops = trace.cpu_ops
    if not len(ops):
        return 0, 0
    rows = _outer(trace, name_flags(ops["name"], SOFTMAX.__contains__))
    dims = ops["input_dims"].to_numpy()
    big = 0
    for r in rows:
        x = tensor_dims(dims[r])
        big += bool(x) and len(x[0]) >= 3 and min(x[0][-2], x[0][-1]) >= min_seq
    return len(rows), big


def claimed_kernels(trace: Trace, min_seq: int) -> np.ndarray:
    """Rows of ``trace.kernels`` that belong to a materialized attention chain."""
    cs = chains(trace, min_seq)
    if not cs:
        return np.zeros(0, dtype=np.int64)
    return unique_ints(np.concatenate([c.kernels for c in cs]))


def _outer(trace: Trace, flags: np.ndarray) -> np.ndarray:
    """Rows with ``flags`` whose parent does not have it (``aten::softmax`` over its
    ``aten::_softmax``; ``aten::matmul`` over its ``aten::bmm``)."""
    parent = trace.cpu_ops["parent_idx"].to_numpy(np.int64)
    inner = parent_has(flags, parent)
    return np.flatnonzero(flags & ~inner)


def _chains(trace: Trace, min_seq: int) -> list[Chain]:
    ops = trace.cpu_ops
    if not len(ops) or not len(trace.kernels):
        return []
    names = ops["name"]
    is_sm = name_flags(names, SOFTMAX.__contains__)
    is_mm = name_flags(names, MATMUL.__contains__)
    is_between = name_flags(names, BETWEEN.__contains__)
    is_math = name_flags(names, MATH_SDPA.__eq__)
    if not is_sm.any() or not is_mm.any():
        return []
    # the ops a chain is read from, per thread in start order: outermost matmuls and
    # softmaxes, and the ops allowed between them
    parent = ops["parent_idx"].to_numpy(np.int64)
    top_mm = np.zeros(len(ops), dtype=bool)
    top_mm[_outer(trace, is_mm)] = True
    top_sm = np.zeros(len(ops), dtype=bool)
    top_sm[_outer(trace, is_sm)] = True
    # ops nested in a matmul, softmax or an op allowed between are not looked at on their own
    anc = inherit(trace, is_mm | is_sm | is_between)
    inside = parent_has(anc, parent)
    seq_ops = np.flatnonzero((top_mm | top_sm | is_between) & ~inside)
    if not len(seq_ops):
        return []
    tid = ops["tid"].to_numpy()
    ts = ops["ts_ns"].to_numpy()
    end = ops["end_ns"].to_numpy()
    dims = ops["input_dims"].to_numpy()
    types = ops["input_types"].to_numpy()
    order = seq_ops[np.lexsort((ts[seq_ops], tid[seq_ops]))]
    pos = {int(r): i for i, r in enumerate(order)}
    kop = kernel_op(trace)
    has_op = kop >= 0
    k_op = kop[has_op]
    k_rows = np.flatnonzero(has_op)
    k_ts, k_tid = ts[k_op], tid[k_op]
    math_anc = inherit(trace, is_math)
    out: list[Chain] = []
    for s in np.flatnonzero(top_sm):
        x = tensor_dims(dims[s])
        if not x or len(x[0]) < 3:
            continue
        scores = x[0]
        L, S = scores[-2], scores[-1]
        if min(L, S) < min_seq or int(s) not in pos:
            continue
        i = pos[int(s)]
        qk = _find(order, i, -1, tid, top_mm, is_between, lambda m, sc=scores: _makes(dims[m], sc))
        pv = _find(order, i, +1, tid, top_mm, is_between, lambda m, sc=scores: _takes(dims[m], sc))
        if qk is None or pv is None:
            continue
        a, b = tensor_dims(dims[qk]), tensor_dims(dims[pv])
        E, Ev = a[0][-1], b[1][-1]
        sel = (k_tid == tid[s]) & (k_ts >= ts[qk]) & (k_ts <= end[pv])
        kernels = k_rows[sel]
        if not len(kernels):
            continue
        out.append(
            Chain(
                qk=qk,
                softmax=int(s),
                pv=pv,
                kernels=kernels,
                bh=math.prod(scores[:-2]),
                L=L,
                S=S,
                E=E,
                Ev=Ev,
                dtype=op_dtype(types[qk]) or op_dtype(types[s]),
                in_math_sdpa=bool(math_anc[s]),
            )
        )
    return out


def _find(order, i, step, tid, top_mm, is_between, good):
    """Walk ``order`` from position ``i`` in direction ``step`` on the same thread, through ops
    allowed between, to the first outermost matmul; it if ``good`` holds, else None."""
    t = tid[order[i]]
    j = i + step
    for _ in range(SEARCH):
        if j < 0 or j >= len(order) or tid[order[j]] != t:
            return None
        r = int(order[j])
        if top_mm[r]:
            return r if good(r) else None
        if not is_between[r]:
            return None
        j += step
    return None


def _makes(raw: object, scores: tuple[int, ...]) -> bool:
    """A matmul whose result is the scores (same last two dims and element count)."""
    t = tensor_dims(raw)
    if len(t) < 2:
        return False
    a, b = t[-2], t[-1]  # addmm/baddbmm: the bias comes first
    out = matmul_out(a, b)
    return out is not None and out[-2:] == scores[-2:] and math.prod(out) == math.prod(scores)


def _takes(raw: object, scores: tuple[int, ...]) -> bool:
    """A matmul whose left operand is the scores (probabilities) and right one [..., S, Ev]."""
    t = tensor_dims(raw)
    if len(t) < 2:
        return False
    p, v = t[0], t[1]
    return (
        len(p) >= 2
        and p[-2:] == scores[-2:]
        and math.prod(p) == math.prod(scores)
        and len(v) >= 2
        and v[-2] == scores[-1]
    )
