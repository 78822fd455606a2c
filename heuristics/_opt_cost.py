"""What a foreach/fused optimizer step would leave of an optimizer range's host time, measured
from the operators recorded inside it. Shared by optimizer-host-time; not a detector.

Inside an ``Optimizer.step`` range the host runs Python (parameter-group loops, state lookups)
and operators: the update math (``_foreach_*`` ops, per-parameter ops) and the per-tensor
dispatch they do (a ``_foreach_*`` op dispatches small ops such as ``aten::result_type`` once per
tensor). A fused step (``fused=True``, or a compiled step) runs the update as one operator call
per parameter group, whatever the number of tensors. So, per range:

- ``op_ns``: host time of the outermost operators inside it (what the fused step replaces);
- ``call_ns``: what one operator call costs on this host, the median host time of the
  innermost operators inside the range (this host's dispatch cost, profiler included);
- ``kept_ns``: what the fused step keeps of the operators: one call per range;
- ``tensors``: parameter tensors per operator, the median number of operators each outermost
  one runs inside it (0 when they run none);
- ``python_ns``: the rest of the range (Python), which the fused step leaves and a compiled
  step removes.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from advisor.trace.model import Trace

COLUMNS = ["op_ns", "call_ns", "kept_ns", "tensors", "python_ns"]


def fused_cost(trace: Trace, rng: pd.DataFrame) -> pd.DataFrame:
    """Per row of ``rng`` (columns tid, ts_ns, dur_ns): the figures of the module doc."""
    ops = trace.cpu_ops
    if not len(ops):
        python = rng["dur_ns"].to_numpy()
        return pd.DataFrame(
            {c: python if c == "python_ns" else 0 for c in COLUMNS}, index=rng.index
        )
    rows = []
    ts, end, tid = (ops[c].to_numpy() for c in ("ts_ns", "end_ns", "tid"))
    parent = ops["parent_idx"].to_numpy()
    for w in rng.itertuples(index=False):
        lo, hi = int(w.ts_ns), int(w.ts_ns) + int(w.dur_ns)
        inside = np.flatnonzero((tid == w.tid) & (ts >= lo) & (end <= hi))
        if not len(inside):
            rows.append((0, 0, 0, 0, hi - lo))
            continue
        mine = np.zeros(len(ops), dtype=bool)
        mine[inside] = True
        par = parent[inside]
        outer = inside[~((par >= 0) & mine[np.clip(par, 0, None)])]
        has_child = np.zeros(len(ops), dtype=bool)
        has_child[par[par >= 0]] = True
        leaves = inside[~has_child[inside]]
        op_ns = int((end[outer] - ts[outer]).sum())
        call_ns = int(np.median(end[leaves] - ts[leaves])) if len(leaves) else 0
        # operators each outermost one runs directly inside it
        kids = np.bincount(
            np.searchsorted(np.sort(outer), par[np.isin(par, outer)]), minlength=len(outer)
        )
        tensors = int(np.median(kids)) if len(outer) else 0
        kept = min(op_ns, call_ns)
        rows.append((op_ns, call_ns, kept, tensors, max(0, hi - lo - op_ns)))
    return pd.DataFrame(rows, columns=COLUMNS, index=rng.index)
