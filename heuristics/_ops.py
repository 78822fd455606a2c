"""CPU ops: their names, their nesting, which op issued a runtime call or launched GPU work,
their input shapes and named CPU ranges. Shared by the detectors; not a detector (the leading
underscore keeps the registry from importing it as one).

Per-trace results are kept with the trace (:meth:`~advisor.trace.model.Trace.memo`, keys
``ops.*``).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pandas as pd

from advisor.trace.model import Trace
from advisor.trace.names import name_flags, name_mask

# backward work: the engine's wrappers, autograd nodes (``MulBackward0``, a Python Function's
# ``ScatterBackward``) and gradient accumulation
BACKWARD_RE = re.compile(
    r"^autograd::engine::evaluate_function|Backward\d*$|^torch::autograd::AccumulateGrad$"
    r"|^torch::autograd::GraphRoot$"
)


def op_names(trace: Trace) -> np.ndarray:
    """cpu_ops names as a plain string array."""
    return trace.memo("ops.names", lambda: trace.cpu_ops["name"].astype(str).to_numpy())


# ---------------------------------------------------------------- nesting


def _parents(trace: Trace) -> np.ndarray:
    return trace.memo("ops.parent", lambda: trace.cpu_ops["parent_idx"].to_numpy(np.int64))


def op_chain(trace: Trace, op_idx: int, limit: int = 32) -> list[int]:
    """cpu_ops rows from ``op_idx`` up through its parents (innermost first)."""
    out: list[int] = []
    # a list, fetched once per trace: this runs for every launch (thousands of calls)
    parent = trace.memo("ops.parent_list", lambda: trace.cpu_ops["parent_idx"].tolist())
    i = int(op_idx)
    while 0 <= i < len(parent) and len(out) < limit:
        out.append(i)
        i = int(parent[i])
    return out


def chain_match(
    trace: Trace, rows: np.ndarray, hit: np.ndarray, outermost: bool = False, limit: int = 32
) -> np.ndarray:
    """For each cpu_ops row in ``rows``: the row of the innermost (or ``outermost``) op of its
    :func:`op_chain` whose ``hit`` flag is set, or -1 when none is (or the row is -1).

    Vectorized ``op_chain``: the same walk up ``parent_idx`` (self first, at most ``limit``
    ops, stopping at the first row outside the table), one numpy step per level for all rows
    at once. ``hit`` is a bool per cpu_ops row (e.g. from :func:`name_flags`)."""
    parent = _parents(trace)
    n = len(parent)
    cur = np.asarray(rows, dtype=np.int64).copy()
    found = np.full(len(cur), -1, dtype=np.int64)
    for _ in range(limit):
        ok = (cur >= 0) & (cur < n)
        if not ok.any():
            break
        safe = np.where(ok, cur, 0)
        match = ok & hit[safe]
        if not outermost:
            match &= found < 0
        found[match] = cur[match]
        cur = np.where(ok, parent[safe], -1)
    return found


def inherit(trace: Trace, own: np.ndarray) -> np.ndarray:
    """``own`` (a bool per cpu_ops row) spread to descendants: True where the op or any op
    enclosing it is True."""
    ops = trace.cpu_ops
    out = np.array(own, dtype=bool, copy=True)
    if not len(ops):
        return out
    parent = _parents(trace)
    depth = ops["depth"].to_numpy()
    order = np.argsort(depth, kind="stable")
    d_sorted = depth[order]
    for d in range(1, int(depth.max()) + 1):
        lo, hi = np.searchsorted(d_sorted, [d, d + 1])
        rows = order[lo:hi]
        rows = rows[parent[rows] >= 0]
        out[rows] |= out[parent[rows]]
    return out


def parent_has(flag: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Per op: whether its parent op has ``flag`` (a bool per row; ``parent``: each row's parent
    row, -1 for an outermost op, which has no flagged parent). ``flag & ~parent_has(flag,
    parent)`` are the outermost flagged ops: a flagged call counted once, not again for the
    flagged calls it makes."""
    return np.where(parent >= 0, flag[np.clip(parent, 0, None)], False)


def ancestor_match(trace: Trace, pred: Callable[[str], bool]) -> np.ndarray:
    """Per cpu_ops row: the op or one of its ancestors has a name for which ``pred`` holds."""
    return inherit(trace, name_flags(trace.cpu_ops["name"], pred))


def in_backward(trace: Trace) -> np.ndarray:
    """Per cpu_ops row: the op is backward work (an autograd node, or runs inside one)."""
    return trace.memo(
        "ops.in_backward", lambda: inherit(trace, name_mask(trace.cpu_ops["name"], BACKWARD_RE))
    )


def has_backward(trace: Trace) -> bool:
    """The trace trains: backward work (:func:`in_backward`) or an optimizer step ran in it.
    Advice that speaks of loss scaling, gradients or backward passes needs this."""

    def build() -> bool:
        ops = trace.cpu_ops
        if len(ops) and in_backward(trace).any():
            return True
        return any(
            len(df) and bool(name_flags(df["name"], lambda n: n.startswith("Optimizer.step")).any())
            for df in (trace.annotations, ops)
        )

    return trace.memo("ops.has_backward", build)


def outermost(trace: Trace, row: int, names: frozenset[str]) -> int:
    """Walk up from cpu_ops ``row`` while the parent's name is in ``names``."""
    parent = _parents(trace)
    name = op_names(trace)
    cur = row
    for _ in range(64):
        p = int(parent[cur])
        if p < 0 or name[p] not in names:
            break
        cur = p
    return cur


# ---------------------------------------------------------------- who issued what


def runtime_op(trace: Trace) -> np.ndarray:
    """Per runtime row, the cpu_ops row that issued it, or -1: the loader's ``op_idx`` (matched
    by External id when that op encloses the call, else the innermost op enclosing it)."""
    return trace.runtime["op_idx"].to_numpy(dtype=np.int64)


def launching_op(trace: Trace, gpu_rows: pd.DataFrame) -> np.ndarray:
    """Per row of a GPU table (kernels, memcpy, or a selection of their rows): the cpu_ops row
    whose runtime call launched it, or -1."""
    li = gpu_rows["launch_idx"].to_numpy()
    rop = runtime_op(trace)
    if not len(rop):  # GPU work but no launch calls in the trace (e.g. a cut trace)
        return np.full(len(li), -1, dtype=np.int64)
    return np.where(li >= 0, rop[np.clip(li, 0, len(rop) - 1)], -1).astype(np.int64)


def kernel_op(trace: Trace) -> np.ndarray:
    """:func:`launching_op` of every kernels row."""
    return trace.memo("ops.kernel_op", lambda: launching_op(trace, trace.kernels))


def gpu_rows_from(trace: Trace, gpu_rows: pd.DataFrame, op_mask: np.ndarray) -> np.ndarray:
    """Mask over GPU table rows launched by an op for which ``op_mask`` holds."""
    if not len(gpu_rows) or not len(op_mask):
        return np.zeros(len(gpu_rows), dtype=bool)
    op = launching_op(trace, gpu_rows)
    return (op >= 0) & op_mask[np.clip(op, 0, None)]


def launched_below(trace: Trace) -> np.ndarray:
    """Per cpu_ops row: the op or one of its descendants issued a runtime (CUDA/HIP) call."""
    ops = trace.cpu_ops
    out = np.zeros(len(ops), dtype=bool)
    issuers = runtime_op(trace)
    issuers = issuers[issuers >= 0]
    if not len(issuers):
        return out
    out[issuers] = True
    parent = _parents(trace)
    depth = ops["depth"].to_numpy()
    order = np.argsort(-depth, kind="stable")  # deepest first: children before parents
    for d in range(int(depth.max()), 0, -1):
        rows = order[depth[order] == d]
        rows = rows[out[rows] & (parent[rows] >= 0)]
        out[parent[rows]] = True
    return out


# ---------------------------------------------------------------- inputs and ranges


def arg_dims(row_dims: object, i: int) -> list | None:
    """The i-th entry of an op's Input Dims (a list), or None."""
    if not isinstance(row_dims, list) or i >= len(row_dims):
        return None
    x = row_dims[i]
    return x if isinstance(x, list) else None


def ranges(trace: Trace, pattern: re.Pattern[str]) -> pd.DataFrame:
    """CPU ranges whose name matches: user annotations and (legacy traces) operators."""
    parts = []
    an = trace.annotations
    if len(an):
        a = an[~an["on_gpu"].to_numpy(dtype=bool)]
        parts.append(a[name_mask(a["name"], pattern)])
    ops = trace.cpu_ops
    if len(ops):
        parts.append(ops[name_mask(ops["name"], pattern)])
    cols = ["name", "ts_ns", "end_ns", "tid", "step"]
    parts = [p[cols].assign(name=p["name"].astype(str)) for p in parts if len(p)]
    if not parts:
        return pd.DataFrame(columns=cols)
    out = pd.concat(parts, ignore_index=True).drop_duplicates(["name", "ts_ns", "tid"])
    return out.sort_values("ts_ns", kind="stable").reset_index(drop=True)
