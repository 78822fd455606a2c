"""Interval arithmetic on int64 nanoseconds: the one home of union and covered time, used by
the loader (:mod:`advisor.trace.commroles`: a stream's overlap with the others) and re-exported
by :mod:`advisor.derive.timeline` for everything above it."""

from __future__ import annotations

import numpy as np


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals into disjoint sorted [start, end) intervals."""
    if len(starts) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.argsort(starts, kind="stable")
    s = np.asarray(starts, dtype=np.int64)[order]
    e = np.asarray(ends, dtype=np.int64)[order]
    run_max = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > run_max[:-1]
    idx = np.flatnonzero(new)
    out_s = s[idx]
    # a group's end is the running max of the ends at its last member
    out_e = run_max[np.r_[idx[1:] - 1, len(s) - 1]]
    return out_s, out_e


def covered_before(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For disjoint sorted intervals: nanoseconds covered in (-inf, t) for each t."""
    t = np.asarray(t, dtype=np.int64)
    if len(starts) == 0:
        return np.zeros(t.shape, dtype=np.int64)
    cum = np.r_[0, np.cumsum(ends - starts)]
    i = np.searchsorted(starts, t, side="right")  # intervals starting at or before t
    last_end = ends[np.clip(i - 1, 0, None)]
    over = np.where(i > 0, np.maximum(last_end - t, 0), 0)
    return (cum[i] - over).astype(np.int64)


def covered_by(starts: np.ndarray, ends: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Nanoseconds of each [lo, hi) covered by the disjoint sorted intervals (vectorized)."""
    hi = np.asarray(hi, dtype=np.int64)
    lo = np.asarray(lo, dtype=np.int64)
    return np.maximum(covered_before(starts, ends, hi) - covered_before(starts, ends, lo), 0)


def in_spans(
    spans: dict[int, tuple[np.ndarray, np.ndarray]], tid: np.ndarray, ts_ns: np.ndarray
) -> np.ndarray:
    """Whether each moment (thread id, time) falls inside one of its thread's disjoint sorted
    spans (``spans``: per thread id, the spans' starts and ends)."""
    tid, ts_ns = np.asarray(tid), np.asarray(ts_ns, dtype=np.int64)
    out = np.zeros(len(ts_ns), dtype=bool)
    for t, (lo, hi) in spans.items():
        m = tid == t
        if m.any():
            i = np.searchsorted(lo, ts_ns[m], side="right") - 1
            out[m] = (i >= 0) & (ts_ns[m] < hi[np.clip(i, 0, None)])
    return out
