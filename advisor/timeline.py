"""Interval arithmetic over the trace tables: GPU busy/idle, per-step splits, gaps.

All times are int64 nanoseconds. Functions are pure and vectorized (numpy).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from advisor.trace.model import Trace


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


def covered_ns(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> int:
    """Nanoseconds of [lo, hi) covered by disjoint sorted intervals."""
    if hi <= lo or len(starts) == 0:
        return 0
    s = np.clip(starts, lo, hi)
    e = np.clip(ends, lo, hi)
    return int(np.sum(np.maximum(e - s, 0)))


def subtract(starts: np.ndarray, ends: np.ndarray, cut_starts: np.ndarray,
             cut_ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """The parts of the disjoint sorted intervals [starts, ends) outside the disjoint sorted
    intervals [cut_starts, cut_ends)."""
    if not len(cut_starts) or not len(starts):
        return np.asarray(starts, np.int64), np.asarray(ends, np.int64)
    # boundaries of both sets; a piece between consecutive boundaries is kept when it lies in
    # an interval and outside every cut
    pts = np.unique(np.concatenate([starts, ends, cut_starts, cut_ends]).astype(np.int64))
    lo, hi = pts[:-1], pts[1:]
    i = np.searchsorted(starts, lo, side="right") - 1
    inside = (i >= 0) & (lo < np.asarray(ends)[np.clip(i, 0, None)])
    j = np.searchsorted(cut_starts, lo, side="right") - 1
    cut = (j >= 0) & (lo < np.asarray(cut_ends)[np.clip(j, 0, None)])
    keep = inside & ~cut
    return union(lo[keep], hi[keep])


def gaps(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """The idle gaps of [lo, hi) not covered by disjoint sorted intervals."""
    if hi <= lo:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    s = np.clip(starts, lo, hi)
    e = np.clip(ends, lo, hi)
    keep = e > s
    s, e = s[keep], e[keep]
    gs = np.r_[lo, e]
    ge = np.r_[s, hi]
    ok = ge > gs
    return gs[ok].astype(np.int64), ge[ok].astype(np.int64)


@dataclass(frozen=True)
class DeviceBusy:
    device: int
    span_start_ns: int
    span_end_ns: int
    busy_ns: int  # union of kernels, copies, memsets
    compute_ns: int  # union of non-communication kernels
    comm_ns: int  # union of communication kernels
    memcpy_ns: int  # union of copies
    memset_ns: int  # union of memsets
    busy_starts: np.ndarray
    busy_ends: np.ndarray

    @property
    def span_ns(self) -> int:
        return self.span_end_ns - self.span_start_ns

    @property
    def idle_ns(self) -> int:
        return self.span_ns - self.busy_ns

    @property
    def busy_pct(self) -> float:
        return 100.0 * self.busy_ns / self.span_ns if self.span_ns > 0 else 0.0

    @property
    def idle_pct(self) -> float:
        return 100.0 - self.busy_pct if self.span_ns > 0 else 0.0


def hta_window(trace: Trace, act: pd.DataFrame) -> pd.DataFrame:
    """The GPU activity HTA counts: without work launched before the trace began (its launch
    call is not in the trace) and, with two or more ProfilerSteps, without the last step (often
    cut short by the profiler's stop)."""
    keep = np.ones(len(act), dtype=bool)
    if len(trace.runtime):
        keep &= act["launch_idx"].to_numpy() >= 0
    steps = trace.steps
    if len(steps) >= 2 and not trace.meta.synthetic_steps:
        keep &= act["step"].to_numpy() != int(steps["step"].iloc[-1])
    return act[keep] if keep.any() else act


def device_busy(trace: Trace, hta: bool = True) -> list[DeviceBusy]:
    """Busy/idle per device over its span (first to last GPU activity: HTA's definition).

    With ``hta`` (the default) the activity is first restricted by :func:`hta_window`, so the
    figures agree with Holistic Trace Analysis' temporal breakdown.
    """
    done = trace.memo(f"device_busy_{hta}", lambda: _device_busy(trace, hta))
    return list(done)


def _device_busy(trace: Trace, hta: bool) -> list[DeviceBusy]:
    act = trace.gpu_activity()
    out: list[DeviceBusy] = []
    if not len(act):
        return out
    if hta:
        act = hta_window(trace, act)
    for dev, g in act.groupby("device", sort=True):
        s = g["ts_ns"].to_numpy()
        e = g["end_ns"].to_numpy()
        bs, be = union(s, e)
        lo, hi = int(s.min()), int(e.max())
        parts = {}
        for kind in ("kernel", "comm", "memcpy", "memset"):
            m = (g["kind"] == kind).to_numpy()
            us, ue = union(s[m], e[m])
            parts[kind] = int(np.sum(ue - us))
        bs.setflags(write=False)  # shared by every caller of the cached result
        be.setflags(write=False)
        out.append(DeviceBusy(int(dev), lo, hi, int(np.sum(be - bs)), parts["kernel"],
                              parts["comm"], parts["memcpy"], parts["memset"], bs, be))  # fmt: skip
    return out


def main_device(trace: Trace, hta: bool = True) -> DeviceBusy | None:
    """The device with the most busy time (single-GPU traces: the GPU); ``hta`` as in
    :func:`device_busy` (False: every GPU activity, for figures measured inside the steps)."""
    devs = device_busy(trace, hta)
    return max(devs, key=lambda d: d.busy_ns) if devs else None


def step_busy(trace: Trace, dev: DeviceBusy | None = None) -> pd.DataFrame:
    """Per step (CPU ProfilerStep range): dur_ns, gpu busy_ns and idle_ns inside the range."""
    steps = trace.steps
    dev = dev if dev is not None else main_device(trace)
    rows = []
    for st in steps.itertuples(index=False):
        lo, hi = int(st.ts_ns), int(st.end_ns)
        busy = covered_ns(dev.busy_starts, dev.busy_ends, lo, hi) if dev else 0
        rows.append((int(st.step), hi - lo, busy, (hi - lo) - busy))
    return pd.DataFrame(rows, columns=["step", "dur_ns", "busy_ns", "idle_ns"])
