"""Timeline helpers shared by the GPU detectors (sync-point, gpu-idle, tiny-kernels, ...).

Not a detector (the leading underscore keeps the registry from importing it as one).
All times are int64 nanoseconds, as in the trace tables.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from advisor.timeline import union
from advisor.trace.model import Trace

T = TypeVar("T")

# runtime calls that put work on a GPU queue (kernel launches, async copies, memsets, graphs)
LAUNCH_RE = re.compile(
    r"^(?:cuda|hip)(?:LaunchKernel|LaunchKernelExC|LaunchKernelEx|LaunchCooperativeKernel|"
    r"GraphLaunch|ExtModuleLaunchKernel|ModuleLaunchKernel|ExtLaunchKernel|MemcpyAsync|"
    r"MemsetAsync|Memcpy2DAsync|MemcpyPeerAsync)(?:_v\d+|_ptsz)?$"
    r"|^cu(?:LaunchKernel|LaunchKernelEx|LaunchCooperativeKernel|GraphLaunch)(?:_v\d+)?$"
)

_CACHE: dict[tuple[int, str], tuple[weakref.ref[Trace], Any]] = {}


def cached(trace: Trace, key: str, fn: Callable[[], T]) -> T:
    """Compute ``fn()`` once per trace object (detectors share expensive derived tables)."""
    k = (id(trace), key)
    hit = _CACHE.get(k)
    if hit is not None and hit[0]() is trace:
        return hit[1]  # type: ignore[no-any-return]
    value = fn()
    for stale in [s for s, (ref, _) in _CACHE.items() if ref() is None]:
        del _CACHE[stale]
    _CACHE[k] = (weakref.ref(trace), value)
    return value


def release(trace: Trace) -> None:
    """Drop what :func:`cached` holds for ``trace`` (the detectors are done with it): its
    derived tables would otherwise live as long as the trace, through the report writing."""
    for k in [k for k, (ref, _) in _CACHE.items() if ref() is trace or ref() is None]:
        del _CACHE[k]


@dataclass(frozen=True)
class Busy:
    """Disjoint, sorted busy intervals of one device (union of kernels, copies, memsets)."""

    device: int
    starts: np.ndarray
    ends: np.ndarray

    @property
    def busy_ns(self) -> int:
        return int(np.sum(self.ends - self.starts))

    def covered(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Busy nanoseconds inside each [lo, hi) (vectorized over the query intervals)."""
        lo = np.asarray(lo, dtype=np.int64)
        hi = np.asarray(hi, dtype=np.int64)
        if not len(self.starts):
            return np.zeros(len(lo), dtype=np.int64)
        # prefix sums of busy time up to any instant t
        cum = np.r_[0, np.cumsum(self.ends - self.starts)]

        def upto(t: np.ndarray) -> np.ndarray:
            i = np.searchsorted(self.starts, t, side="right")  # intervals starting <= t
            prev = cum[i]
            j = np.clip(i - 1, 0, None)
            partial = np.where(i > 0, np.clip(t - self.ends[j], None, 0), 0)
            return np.asarray(prev + partial, dtype=np.int64)

        return np.maximum(upto(hi) - upto(lo), 0)

    def idle_after(self, t: np.ndarray, tol_ns: int = 0) -> np.ndarray:
        """For each instant: the time until the device's next activity, or 0 if it is busy
        then or nothing follows in the trace. Work ending within ``tol_ns`` after the instant
        counts as already finished (CPU and GPU clocks may differ by a few microseconds)."""
        return self.idle_window(t, tol_ns)[1]

    def idle_window(self, t: np.ndarray, tol_ns: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """(start, length) of the idle gap that follows each instant (see ``idle_after``)."""
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


def busy_by_device(trace: Trace) -> dict[int, Busy]:
    """Busy intervals per device over the whole trace (all streams, no windowing)."""

    def build() -> dict[int, Busy]:
        act = trace.gpu_activity()
        out: dict[int, Busy] = {}
        if not len(act):
            return out
        for dev, g in act.groupby("device", sort=True):
            s, e = union(g["ts_ns"].to_numpy(), g["end_ns"].to_numpy())
            out[int(dev)] = Busy(int(dev), s, e)
        return out

    return cached(trace, "busy_by_device", build)


def main_device(trace: Trace) -> int | None:
    """The device with the most busy time."""
    busy = busy_by_device(trace)
    if not busy:
        return None
    return max(busy.values(), key=lambda b: (b.busy_ns, -b.device)).device


def n_steps(trace: Trace) -> int:
    """The per-step divisor: every step in the trace (1 for a trace without step markers)."""
    return max(1, len(trace.steps))


def ms(ns: float) -> float:
    """Nanoseconds as milliseconds, rounded to the microsecond (evidence rows)."""
    return round(float(ns) / 1e6, 3)


def per_step_ms(trace: Trace, total_ns: float) -> float:
    """A trace total (ns) as milliseconds per step."""
    return float(total_ns) / 1e6 / n_steps(trace)


def in_steps(trace: Trace, ts_ns: np.ndarray) -> np.ndarray:
    """Whether each instant falls inside a step range (always true for a synthetic step)."""
    st = trace.steps
    ts_ns = np.asarray(ts_ns, dtype=np.int64)
    if trace.meta.synthetic_steps or not len(st):
        return np.ones(len(ts_ns), dtype=bool)
    starts = st["ts_ns"].to_numpy()
    ends = st["end_ns"].to_numpy()
    i = np.searchsorted(starts, ts_ns, side="right") - 1
    return (i >= 0) & (ts_ns < ends[np.clip(i, 0, None)])


def op_chain(trace: Trace, op_idx: int, limit: int = 32) -> list[int]:
    """cpu_ops rows from ``op_idx`` up through its parents (innermost first)."""
    out: list[int] = []
    # a list, fetched once per trace: this runs for every launch (thousands of calls)
    parent = cached(trace, "parent_list", lambda: trace.cpu_ops["parent_idx"].tolist())
    i = int(op_idx)
    while 0 <= i < len(parent) and len(out) < limit:
        out.append(i)
        i = int(parent[i])
    return out


def chain_match(
    trace: Trace, rows: np.ndarray, hit: np.ndarray, outermost: bool = False, limit: int = 32
) -> np.ndarray:
    """For each cpu_ops row in ``rows``: the row of the innermost (or ``outermost``) op of its
    ``op_chain`` whose ``hit`` flag is set, or -1 when none is.

    Vectorized ``op_chain``: the same walk up ``parent_idx`` (self first, at most ``limit``
    ops, stopping at the first row outside the table), one numpy step per level for all rows
    at once. ``hit`` is a bool per cpu_ops row (e.g. from ``name_flags``)."""
    parent = cached(trace, "parent_arr", lambda: trace.cpu_ops["parent_idx"].to_numpy(np.int64))
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


def name_flags(names: Any, pred: Callable[[str], bool], missing: bool = False) -> np.ndarray:
    """``pred(name)`` for each row of a name column (a Series, a Categorical or any sequence),
    evaluated once per distinct name (on the categories of a categorical, else on the factorized
    values); a missing name gives ``missing``."""
    if isinstance(getattr(names, "dtype", None), pd.CategoricalDtype):
        cat = names.array if isinstance(names, pd.Series) else names
        codes, uniq = cat.codes, cat.categories
    else:
        arr = np.asarray(names, dtype=object)
        if not len(arr):
            return np.zeros(0, dtype=bool)
        codes, uniq = pd.factorize(arr)  # hashing, not sorting fixed-width strings
    hits = np.fromiter((bool(pred(str(u))) for u in uniq), bool, len(uniq))
    return np.append(hits, missing)[np.asarray(codes)]  # code -1: the missing flag at the end


def op_names(trace: Trace) -> np.ndarray:
    """cpu_ops names as a plain string array (cached)."""
    return cached(trace, "op_names", lambda: trace.cpu_ops["name"].astype(str).to_numpy())


def fmt_ms(ms: float) -> str:
    """Milliseconds for sentences: 3 significant figures, never scientific."""
    if ms >= 100:
        return f"{ms:.0f} ms"
    if ms >= 10:
        return f"{ms:.1f} ms"
    if ms >= 1:
        return f"{ms:.2f} ms"
    return f"{ms * 1000:.0f} us" if ms >= 0.001 else f"{ms * 1000:.2f} us"
