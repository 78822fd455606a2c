"""DataLoader fetches: the ``enumerate(DataLoader)#<Iter>.__next__`` ranges torch.profiler
records around each batch fetch (a CPU ``user_annotation`` in current traces, an operator in
2020-21 legacy traces).

The one definition of "time in the DataLoader": the step finder (:mod:`advisor.derive.steps`),
the report's per-step breakdown (:mod:`advisor.analysis.views`), ``advisor diff``'s categories
(:mod:`advisor.analysis.digest`), dataloader-stall and gpu-idle all read :func:`fetches`.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from advisor.derive.timeline import Intervals
from advisor.trace.model import Trace

FETCH_RE = re.compile(r"^enumerate\(DataLoader\)#(\w+)\.__next__$")
SINGLE = "_SingleProcessDataLoaderIter"
MULTI = "_MultiProcessingDataLoaderIter"
COLUMNS = ["ts_ns", "end_ns", "dur_ns", "tid", "step", "it", "op_idx"]


def is_fetch(name: str) -> bool:
    """The name of a DataLoader fetch range."""
    return FETCH_RE.match(name) is not None


WORKERS_PER_GPU = 4  # a common start for num_workers


def recommended_workers(cpus: int | None, current: int, per_gpu: int = WORKERS_PER_GPU) -> int:
    """The ``num_workers`` to recommend (dataloader-stall's advice, and what ``advisor try``'s
    dataloader-stall fix applies): ``per_gpu`` bounded by the CPUs less one for the training
    process, at least 1; a loader with ``current`` workers gets up to twice as many."""
    rec = per_gpu
    if cpus:
        rec = max(1, min(rec, cpus - 1))
    if current > 0:
        rec = max(rec, 2 * current) if not cpus else max(current, min(2 * current, cpus - 1))
    return rec


def fetches(trace: Trace) -> pd.DataFrame:
    """One row per ``__next__`` call, by start: ts_ns, end_ns, dur_ns, tid, step, it (the
    iterator class), op_idx (cpu_ops row for legacy traces, else -1); outermost calls only (a
    call nested in another on the same thread is the same fetch seen twice)."""
    return trace.memo("dataloader.fetches", lambda: _build(trace))


def fetch_intervals(trace: Trace) -> Intervals:
    """The union of the fetches (disjoint, sorted)."""
    df = fetches(trace)
    return Intervals.union_of(df["ts_ns"].to_numpy(np.int64), df["end_ns"].to_numpy(np.int64))


def _build(trace: Trace) -> pd.DataFrame:
    parts = []
    for df in (trace.annotations, trace.cpu_ops):
        if not len(df):
            continue
        names = df["name"]  # categorical: .str works per distinct name, not per row
        m = names.str.match(FETCH_RE.pattern).to_numpy(dtype=bool)
        if "on_gpu" in df:
            m = m & ~df["on_gpu"].to_numpy(dtype=bool)
        if m.any():
            sel = df[m]
            it = names[m].str.extract(FETCH_RE.pattern, expand=False)
            op_idx = np.flatnonzero(m) if df is trace.cpu_ops else np.full(len(sel), -1)
            parts.append(
                sel[["ts_ns", "end_ns", "dur_ns", "tid", "step"]].assign(
                    it=it.to_numpy(), op_idx=op_idx
                )
            )
    if not parts:
        return pd.DataFrame({c: pd.Series([], dtype=object) for c in COLUMNS})
    df = pd.concat(parts, ignore_index=True).sort_values(
        ["tid", "ts_ns", "dur_ns"], ascending=[True, True, False]
    )
    prev_end = df.groupby("tid")["end_ns"].cummax().groupby(df["tid"]).shift(1)
    df = df[~(prev_end.fillna(-1).to_numpy() >= df["end_ns"].to_numpy())]
    return df[COLUMNS].sort_values("ts_ns", kind="stable").reset_index(drop=True)
