"""Optimizer updates written as a Python loop over the parameters, outside any
``Optimizer.step`` range: ``for p in model.parameters(): p.data.add_(p.grad, alpha=-lr)``.

The evidence: after a step's last backward op (the autograd engine's work, on the same thread),
a run of consecutive top-level in-place elementwise ops (``aten::add_``, ``mul_``, ``addcdiv_``,
... the in-place ones of the per-parameter ops in :mod:`._opt_ranges`), each reading a second tensor
of its own shape (a parameter and its gradient, or its momentum buffer), on at least two
different shapes (many tensors, not one buffer updated again and again), and nothing else
top-level between them. Such a run is the per-parameter update a single-tensor optimizer runs,
one op (one kernel launch on a GPU) per parameter, without an optimizer to set ``foreach`` on.
Without recorded shapes nothing is found (the shapes are what tells parameters from a counter).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from advisor.trace.model import Trace
from advisor.trace.names import name_in, name_mask

from ._ops import BACKWARD_RE

UPDATE_OPS = frozenset(
    f"aten::{n}_"
    for n in "add sub mul div addcdiv addcmul lerp sqrt maximum neg sign pow clamp copy".split()
)
COLUMNS = ["step", "tid", "ts_ns", "end_ns", "ops", "shapes", "first_op"]


def _same_shape_pair(dims: object) -> tuple[int, ...] | None:
    """The shape of an update op whose first two inputs share it (``p.add_(g)``), else None."""
    if not isinstance(dims, list | tuple) or len(dims) < 2:
        return None
    a, b = dims[0], dims[1]
    if not isinstance(a, list | tuple) or list(a) != list(b) or not a:
        return None
    return tuple(int(x) for x in a)


def manual_loops(trace: Trace, outside: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per step and thread, the longest run of per-parameter updates after its backward (see the
    module doc); ``outside``: ranges (tid, ts_ns, end_ns) whose ops are not counted (the
    optimizers' own ``Optimizer.step`` ranges). Columns :data:`COLUMNS`."""
    ops = trace.cpu_ops
    if not len(ops) or "input_dims" not in ops:
        return pd.DataFrame(columns=COLUMNS)
    top = (ops["parent_idx"].to_numpy() < 0) & (ops["step"].to_numpy() >= 0)
    backward = name_mask(ops["name"], BACKWARD_RE)
    update = name_in(ops["name"], UPDATE_OPS)
    rows = []
    frame = ops[top].sort_values(["tid", "ts_ns"])
    for (step, tid), g in frame.groupby(["step", "tid"], sort=True):
        idx = g.index.to_numpy()
        done = np.flatnonzero(backward[idx])
        if not len(done):
            continue
        after = idx[done[-1] + 1 :]
        best: list[int] = []
        run: list[int] = []
        for i in after:
            shape = _same_shape_pair(ops["input_dims"].iat[i]) if update[i] else None
            if shape is not None and not _inside(ops, i, outside):
                run.append(int(i))
                continue
            best = run if len(run) > len(best) else best
            run = []
        best = run if len(run) > len(best) else best
        if not best:
            continue
        shapes = {_same_shape_pair(ops["input_dims"].iat[i]) for i in best}
        rows.append(
            (
                int(step),
                int(tid),
                int(ops["ts_ns"].iat[best[0]]),
                int(ops["end_ns"].iat[best[-1]]),
                len(best),
                len(shapes),
                best[0],
            )
        )
    return pd.DataFrame(rows, columns=COLUMNS)


def _inside(ops: pd.DataFrame, i: int, ranges: pd.DataFrame | None) -> bool:
    if ranges is None or not len(ranges):
        return False
    ts, tid = int(ops["ts_ns"].iat[i]), int(ops["tid"].iat[i])
    hit = (
        (ranges["tid"].to_numpy() == tid)
        & (ranges["ts_ns"].to_numpy() <= ts)
        & (ranges["end_ns"].to_numpy() >= ts)
    )
    return bool(hit.any())
