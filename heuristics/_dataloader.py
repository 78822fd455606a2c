"""``DataLoader.__next__`` ranges in a trace (shared by dataloader-stall and gpu-idle).

torch.profiler wraps each batch fetch in a ``enumerate(DataLoader)#<Iter>.__next__`` range: a
CPU ``user_annotation`` in current traces, an operator in 2020-21 (legacy) traces.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from advisor.trace.model import Trace
from heuristics._gpu_timeline import cached, in_steps

DL_RE = re.compile(r"^enumerate\(DataLoader\)#(\w+)\.__next__$")
SINGLE = "_SingleProcessDataLoaderIter"
MULTI = "_MultiProcessingDataLoaderIter"


def dataloader_calls(trace: Trace) -> pd.DataFrame:
    """One row per ``__next__`` call inside the steps: ts_ns, end_ns, dur_ns, tid, step, it
    (the iterator class), op_idx (cpu_ops row for legacy traces, else -1); outermost calls only
    (nested duplicates dropped)."""
    return cached(trace, "dataloader_calls", lambda: _build(trace))


def _build(trace: Trace) -> pd.DataFrame:
    cols = ["ts_ns", "end_ns", "dur_ns", "tid", "step", "it", "op_idx"]
    parts = []
    for df in (trace.annotations, trace.cpu_ops):
        if not len(df):
            continue
        names = df["name"].astype(str)
        m = names.str.match(DL_RE.pattern).to_numpy()
        if "on_gpu" in df:
            m = m & ~df["on_gpu"].to_numpy(dtype=bool)
        if m.any():
            sel = df[m]
            it = names[m].str.extract(DL_RE.pattern, expand=False)
            op_idx = np.flatnonzero(m) if df is trace.cpu_ops else np.full(len(sel), -1)
            parts.append(sel[["ts_ns", "end_ns", "dur_ns", "tid", "step"]]
                         .assign(it=it.to_numpy(), op_idx=op_idx))  # fmt: skip
    if not parts:
        return pd.DataFrame({c: pd.Series([], dtype=object) for c in cols})
    df = pd.concat(parts, ignore_index=True).sort_values(["tid", "ts_ns", "dur_ns"],
                                                         ascending=[True, True, False])  # fmt: skip
    # drop calls nested in another one on the same thread (the same call seen twice)
    prev_end = df.groupby("tid")["end_ns"].cummax().groupby(df["tid"]).shift(1)
    df = df[~(prev_end.fillna(-1).to_numpy() >= df["end_ns"].to_numpy())]
    df = df[in_steps(trace, df["ts_ns"].to_numpy())]
    return df[cols].sort_values("ts_ns", kind="stable").reset_index(drop=True)


def intervals(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    from advisor.timeline import union

    return union(df["ts_ns"].to_numpy(dtype=np.int64), df["end_ns"].to_numpy(dtype=np.int64))
