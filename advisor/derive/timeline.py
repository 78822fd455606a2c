"""The GPU timeline: interval arithmetic, busy time per device and the main GPU.

One home for "how much of [lo, hi) was the GPU busy" and "which GPU is the main one": views,
digest, the pipeline's run block and every detector read them from here. All times are int64
nanoseconds; functions are pure and vectorized (numpy); per-trace results are kept with the
trace (:meth:`~advisor.trace.model.Trace.memo`).

- :func:`union`, :func:`covered_by`, :func:`covered_before`, :func:`in_spans`: from :mod:`advisor.trace.intervals`
  (their home, below the loader), for the layers above it.
- :class:`Intervals`: disjoint sorted intervals with covered-time, gap and idle-window queries.
- :func:`busy_by_device`: per device, the union of its kernels, copies and memsets (:class:`Busy`).
- :func:`main_device`: the device with the most busy time (ties: the lowest id).
- :func:`device_busy` / :func:`main_device_busy`: busy/idle per device over its span, by
  default over the activity Holistic Trace Analysis counts (:func:`hta_window`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

# re-exported: the interval arithmetic every derive module reads from here
from advisor.arrays import unique_ints
from advisor.trace.intervals import covered_before as covered_before
from advisor.trace.intervals import covered_by as covered_by
from advisor.trace.intervals import in_spans as in_spans  # re-exported
from advisor.trace.intervals import union as union
from advisor.trace.model import Trace

_EMPTY = np.zeros(0, np.int64)


def covered_ns(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> int:
    """Nanoseconds of one [lo, hi) covered by disjoint sorted intervals."""
    if hi <= lo or len(starts) == 0:
        return 0
    return int(covered_by(starts, ends, np.array([lo]), np.array([hi]))[0])


def subtract(
    starts: np.ndarray, ends: np.ndarray, cut_starts: np.ndarray, cut_ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The parts of the disjoint sorted intervals [starts, ends) outside the disjoint sorted
    intervals [cut_starts, cut_ends)."""
    if not len(cut_starts) or not len(starts):
        return np.asarray(starts, np.int64), np.asarray(ends, np.int64)
    # boundaries of both sets; a piece between consecutive boundaries is kept when it lies in
    # an interval and outside every cut
    pts = unique_ints(np.concatenate([starts, ends, cut_starts, cut_ends]).astype(np.int64))
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
class Intervals:
    """Disjoint, sorted [start, end) intervals (build with :meth:`union_of` or :meth:`of`)."""

    starts: np.ndarray
    ends: np.ndarray

    @classmethod
    def union_of(cls, starts: np.ndarray, ends: np.ndarray) -> Intervals:
        s, e = union(np.asarray(starts, np.int64), np.asarray(ends, np.int64))
        return cls(s, e)

    @classmethod
    def of(cls, frames: Iterable[pd.DataFrame]) -> Intervals:
        """The union of the ``ts_ns``/``end_ns`` rows of some tables."""
        parts = [f for f in frames if len(f)]
        if not parts:
            return cls(_EMPTY, _EMPTY)
        return cls.union_of(
            np.concatenate([f["ts_ns"].to_numpy() for f in parts]),
            np.concatenate([f["end_ns"].to_numpy() for f in parts]),
        )

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def total_ns(self) -> int:
        return int(np.sum(self.ends - self.starts))

    @property
    def busy_ns(self) -> int:
        return self.total_ns

    def before(self, t: np.ndarray) -> np.ndarray:
        """Covered nanoseconds before each instant."""
        return covered_before(self.starts, self.ends, t)

    def covered(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Covered nanoseconds inside each [lo, hi) (vectorized over the query intervals)."""
        return covered_by(self.starts, self.ends, lo, hi)

    def covered_ns(self, lo: int, hi: int) -> int:
        """Covered nanoseconds inside one [lo, hi)."""
        return covered_ns(self.starts, self.ends, lo, hi)

    def idle_ns(self, lo: int, hi: int) -> int:
        """Nanoseconds of [lo, hi) not covered."""
        return max(0, (hi - lo) - self.covered_ns(lo, hi))

    def idle_in_spans(self, starts: np.ndarray, ends: np.ndarray) -> tuple[int, int]:
        """(span_ns, idle_ns): the length of the union of some (host) spans, and how much of
        it is not covered."""
        us, ue = union(np.asarray(starts, np.int64), np.asarray(ends, np.int64))
        span = int(np.sum(ue - us))
        return span, span - (int(np.sum(self.covered(us, ue))) if len(us) else 0)

    def gaps(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        return gaps(self.starts, self.ends, lo, hi)

    def idle_after(self, t: np.ndarray, tol_ns: int = 0) -> np.ndarray:
        """For each instant: the time until the next interval, or 0 if one covers the instant
        or nothing follows. An interval ending within ``tol_ns`` after the instant counts as
        already finished (CPU and GPU clocks may differ by a few microseconds)."""
        return self.idle_window(t, tol_ns)[1]

    def idle_window(self, t: np.ndarray, tol_ns: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """(start, length) of the gap that follows each instant (see :meth:`idle_after`)."""
        t = np.asarray(t, dtype=np.int64)
        if not len(self.starts):
            return t.copy(), np.zeros(len(t), dtype=np.int64)
        i = np.searchsorted(self.starts, t, side="right")
        j = np.clip(i - 1, 0, None)
        prev_end = np.where(i > 0, self.ends[j], np.iinfo(np.int64).min)
        busy_now = prev_end > t + tol_ns
        frm = np.maximum(t, prev_end)
        has_next = i < len(self.starts)
        nxt = self.starts[np.clip(i, 0, len(self.starts) - 1)]
        gap = np.where(busy_now | ~has_next, 0, nxt - frm).astype(np.int64)
        return frm.astype(np.int64), gap


@dataclass(frozen=True)
class Busy(Intervals):
    """The busy intervals of one device (union of its kernels, copies and memsets)."""

    device: int = -1


def activity(
    trace: Trace, device: int | None = None, kinds: Iterable[str] | None = None
) -> Intervals:
    """The union of a device's GPU activity (all devices when None), of some ``kinds`` only
    (kernel, comm, memcpy, memset; all when None), over the whole trace."""
    act = trace.gpu_activity()
    if device is not None:
        act = act[act["device"].to_numpy() == device]
    if kinds is not None:
        act = act[act["kind"].isin(list(kinds)).to_numpy()]
    return Intervals.union_of(act["ts_ns"].to_numpy(), act["end_ns"].to_numpy())


def busy_by_device(trace: Trace) -> dict[int, Busy]:
    """Busy intervals per device over the whole trace (all streams, no windowing)."""
    return trace.memo("timeline.busy_by_device", lambda: _busy_by_device(trace))


def _busy_by_device(trace: Trace) -> dict[int, Busy]:
    act = trace.gpu_activity()
    out: dict[int, Busy] = {}
    for dev, g in act.groupby("device", sort=True):
        s, e = union(g["ts_ns"].to_numpy(), g["end_ns"].to_numpy())
        s.setflags(write=False)  # shared by every reader of the cached result
        e.setflags(write=False)
        out[int(dev)] = Busy(s, e, int(dev))
    return out


def main_device(trace: Trace) -> int | None:
    """The main GPU: the device with the most busy time (union of its kernels, copies and
    memsets over the whole trace; ties: the lowest id); None without GPU activity."""
    busy = busy_by_device(trace)
    if not busy:
        return None
    return max(busy.values(), key=lambda b: (b.busy_ns, -b.device)).device


def main_busy(trace: Trace) -> Busy:
    """The busy intervals of the main GPU (empty without GPU activity)."""
    dev = main_device(trace)
    return busy_by_device(trace)[dev] if dev is not None else Busy(_EMPTY, _EMPTY, -1)


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
    done = trace.memo(f"timeline.device_busy.{hta}", lambda: _device_busy(trace, hta))
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
        out.append(
            DeviceBusy(
                int(dev),
                lo,
                hi,
                int(np.sum(be - bs)),
                parts["kernel"],
                parts["comm"],
                parts["memcpy"],
                parts["memset"],
                bs,
                be,
            )
        )
    return out


def main_device_busy(trace: Trace, hta: bool = True) -> DeviceBusy | None:
    """:func:`device_busy` of the :func:`main_device`; ``hta`` as in :func:`device_busy`
    (False: every GPU activity, for figures measured inside the steps)."""
    devs = device_busy(trace, hta)
    main = main_device(trace)
    return next((d for d in devs if d.device == main), None) or (
        max(devs, key=lambda d: d.busy_ns) if devs else None
    )


def step_busy(trace: Trace, dev: DeviceBusy | None = None) -> pd.DataFrame:
    """Per step (CPU ProfilerStep range): dur_ns, gpu busy_ns and idle_ns inside the range."""
    steps = trace.steps
    dev = dev if dev is not None else main_device_busy(trace)
    rows = []
    for st in steps.itertuples(index=False):
        lo, hi = int(st.ts_ns), int(st.end_ns)
        busy = covered_ns(dev.busy_starts, dev.busy_ends, lo, hi) if dev else 0
        rows.append((int(st.step), hi - lo, busy, (hi - lo) - busy))
    return pd.DataFrame(rows, columns=["step", "dur_ns", "busy_ns", "idle_ns"])
