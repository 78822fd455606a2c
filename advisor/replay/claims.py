"""What a fix claims: the trace's own events its change touches, so that two findings can be
told to claim the same time (``advisor.analysis.merge``: one cause, one row).

A :class:`Claims` names GPU work by row (``trace.kernels``, ``trace.memcpy``) and host time as
disjoint intervals per thread id (``ANY_TID``: every thread, as a :class:`ShrinkHost` without
thread ids). What each fix claims:

- :class:`ScaleGpu`, :class:`HideComm`: their kernels and copies;
- :class:`ShrinkHost`: the host time of its ranges;
- :class:`DropSyncs`: the host time of its calls;
- :class:`AsyncCopies`: their copies and the host time of the calls that launch them;
- :class:`GraphLaunch` (and :class:`StepGraph`, the whole step's): the host time of the calls
  that launch its kernels and copies and, where it shrinks the host time between those calls,
  that time (less the ranges it keeps); no GPU work: a graph changes when the GPU work starts,
  never how long it runs, so a fix that makes those kernels faster is another cause;
- :class:`Combined`: the union of its fixes'.

:func:`without` gives a fix with claimed evidence taken out (the rows, or the host time), so a
finding that shares part of its evidence with a more specific one can be valued on the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from advisor.arrays import as_rows, intersect_ints, setdiff_ints, union_ints, unique_ints
from advisor.derive.timeline import covered_by, union
from advisor.replay.fixes import (
    AsyncCopies,
    Combined,
    DropSyncs,
    Fix,
    GraphLaunch,
    HideComm,
    ScaleGpu,
    ShrinkHost,
)
from advisor.replay.graphfix import StepGraph
from advisor.replay.graphruns import graph_runs
from advisor.replay.model import graph
from advisor.trace.model import Trace

ANY_TID = -1
Spans = dict[int, tuple[np.ndarray, np.ndarray]]
_EMPTY = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class Claims:
    """GPU rows and host intervals a fix changes (see the module doc)."""

    kernels: np.ndarray = field(default_factory=lambda: _EMPTY)
    memcpy: np.ndarray = field(default_factory=lambda: _EMPTY)
    host: Spans = field(default_factory=dict)
    # the whole step's host path (a :class:`StepGraph`): a narrower cause whose claim lies
    # inside it is part of it (advisor.analysis.merge)
    whole: bool = False

    def __or__(self, other: Claims) -> Claims:
        host = dict(self.host)
        for t, (s, e) in other.host.items():
            if t in host:
                host[t] = union(np.r_[host[t][0], s], np.r_[host[t][1], e])
            else:
                host[t] = (s, e)
        return Claims(
            union_ints(self.kernels, other.kernels),
            union_ints(self.memcpy, other.memcpy),
            host,
            self.whole or other.whole,
        )

    def size_ns(self, trace: Trace) -> tuple[int, int]:
        """(GPU time, host time) claimed."""
        host = sum(int(np.sum(e - s)) for s, e in self.host.values())
        return _gpu_ns(trace, self.kernels, self.memcpy), host

    def shared_ns(self, trace: Trace, other: Claims) -> tuple[int, int]:
        """(GPU time, host time) of this claim that ``other`` claims too."""
        k = intersect_ints(self.kernels, other.kernels)
        m = intersect_ints(self.memcpy, other.memcpy)
        host = 0
        for t, (s, e) in self.host.items():
            os_, oe = _host_of(other, t)
            if len(os_) and len(s):
                host += int(covered_by(os_, oe, s, e).sum())
        return _gpu_ns(trace, k, m), host

    def empty(self) -> bool:
        return not (len(self.kernels) or len(self.memcpy) or self.host)


def _gpu_ns(trace: Trace, kernels: np.ndarray, memcpy: np.ndarray) -> int:
    out = 0
    if len(kernels):
        out += int(trace.kernels["dur_ns"].to_numpy()[kernels].sum())
    if len(memcpy):
        out += int(trace.memcpy["dur_ns"].to_numpy()[memcpy].sum())
    return out


def _host_of(c: Claims, tid: int) -> tuple[np.ndarray, np.ndarray]:
    """``c``'s host intervals that cover thread ``tid`` (ANY_TID: those of every thread)."""
    parts = [c.host[t] for t in c.host if tid == ANY_TID or t in (tid, ANY_TID)]
    if not parts:
        return _EMPTY, _EMPTY
    return union(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))


def _calls(trace: Trace, rows: np.ndarray) -> Spans:
    """The host intervals of runtime calls, per thread."""
    rt = trace.runtime
    rows = rows[(rows >= 0) & (rows < len(rt))]
    if not len(rows):
        return {}
    ts, end, tid = (rt[c].to_numpy()[rows] for c in ("ts_ns", "end_ns", "tid"))
    return {int(t): union(ts[tid == t], end[tid == t]) for t in unique_ints(tid)}


def _launches(trace: Trace, table: str, rows: np.ndarray) -> np.ndarray:
    df = getattr(trace, table)
    if not len(rows) or "launch_idx" not in df:
        return _EMPTY
    li = df["launch_idx"].to_numpy()[rows]
    return unique_ints(li[li >= 0]).astype(np.int64)


def claims_of(trace: Trace, fix: object) -> Claims:
    """What ``fix`` claims (empty for a fix this module does not know)."""
    if isinstance(fix, Combined):
        out = Claims()
        for f in fix.fixes:
            out = out | claims_of(trace, f)
        return out
    if isinstance(fix, ScaleGpu):
        return Claims(unique_ints(as_rows(fix.kernels)), unique_ints(as_rows(fix.memcpy)))
    if isinstance(fix, HideComm):
        return Claims(kernels=unique_ints(as_rows(fix.kernels)))
    if isinstance(fix, ShrinkHost):
        st = np.asarray(fix.starts, dtype=np.int64).ravel()
        en = np.asarray(fix.ends, dtype=np.int64).ravel()
        if fix.tids is None:
            return Claims(host={ANY_TID: union(st, en)} if len(st) else {})
        tids = np.asarray(fix.tids).ravel()
        return Claims(host={int(t): union(st[tids == t], en[tids == t]) for t in unique_ints(tids)})
    if isinstance(fix, DropSyncs):
        return Claims(host=_calls(trace, as_rows(fix.runtime)))
    if isinstance(fix, AsyncCopies):
        m = unique_ints(as_rows(fix.memcpy))
        return Claims(memcpy=m, host=_calls(trace, _launches(trace, "memcpy", m)))
    if isinstance(fix, GraphLaunch):
        return _graph_claims(trace, fix)
    return Claims()


def _graph_claims(trace: Trace, fix: GraphLaunch) -> Claims:
    """A :class:`GraphLaunch`'s claim (see the module doc)."""
    k = unique_ints(as_rows(fix.kernels))
    m = unique_ints(as_rows(fix.memcpy))
    rows = union_ints(_launches(trace, "kernels", k), _launches(trace, "memcpy", m))
    host = _calls(trace, rows)
    keeps = [x for x in (fix.host_keep, fix.low, fix.high) if x is not None]
    if min(keeps) < 1.0:  # the host time between launches it shrinks
        gr = graph(trace)
        _, inner, handed = graph_runs(trace, fix, gr)
        h = gr.host
        lo = np.r_[h.end_ns[h.prev[inner]], h.end_ns[h.handoff[handed]]]
        hi = np.r_[h.ts_ns[inner], h.ts_ns[handed]]
        tid = np.r_[h.trace_tid[inner], h.trace_tid[handed]]
        ok = hi > lo
        lo, hi, tid = lo[ok], hi[ok], tid[ok]
        spans = _spans(lo, hi, tid)
        if fix.keep_starts is not None and len(lo):
            ks, ke = union(
                np.asarray(fix.keep_starts, dtype=np.int64).ravel(),
                np.asarray(fix.keep_ends, dtype=np.int64).ravel(),
            )
            spans = {t: _subtract(s, e, ks, ke) for t, (s, e) in spans.items()}
        host = (Claims(host=host) | Claims(host=spans)).host
    return Claims(host=host, whole=isinstance(fix, StepGraph))


def _spans(lo: np.ndarray, hi: np.ndarray, tid: np.ndarray) -> Spans:
    """Intervals [lo, hi) per thread id, each thread's as disjoint sorted intervals."""
    return {int(t): union(lo[tid == t], hi[tid == t]) for t in unique_ints(tid)}


def _subtract(
    s: np.ndarray, e: np.ndarray, ts: np.ndarray, te: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Intervals [s, e) less the disjoint sorted intervals [ts, te): each interval cut by the
    gaps between them, in order (all pieces at once)."""
    s, e = np.asarray(s, dtype=np.int64), np.asarray(e, dtype=np.int64)
    lo = np.iinfo(np.int64).min
    hi = np.iinfo(np.int64).max
    gs = np.r_[lo, np.asarray(te, dtype=np.int64)]  # the gaps between the taken intervals
    ge = np.r_[np.asarray(ts, dtype=np.int64), hi]
    first = np.searchsorted(ge, s, side="right")  # the first gap ending after the start
    last = np.searchsorted(gs, e, side="left")  # ...and the gaps starting before the end
    n = np.maximum(last - first, 0)
    which = np.repeat(np.arange(len(s)), n)
    gap = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n) + np.repeat(first, n)
    ps = np.maximum(s[which], gs[gap])
    pe = np.minimum(e[which], ge[gap])
    keep = ps < pe
    return ps[keep], pe[keep]


def _covered_calls(trace: Trace, rows: np.ndarray, taken: Claims) -> np.ndarray:
    """Per runtime row: more than half of the call lies in ``taken``'s host time (False for a
    row outside the table, e.g. -1)."""
    rt = trace.runtime
    ok = (rows >= 0) & (rows < len(rt))
    safe = np.where(ok, rows, 0)
    ts, end, tid = (rt[c].to_numpy()[safe] for c in ("ts_ns", "end_ns", "tid"))
    out = np.zeros(len(rows), dtype=bool)
    if not len(rt):
        return out
    for t in unique_ints(tid[ok]):
        m = ok & (tid == t)
        s, e = _host_of(taken, int(t))
        if len(s):
            cov = covered_by(s, e, ts[m], end[m])
            out[m] = 2 * cov > np.maximum(end[m] - ts[m], 1)
    return out


def without(trace: Trace, fix: Fix, taken: Claims) -> Fix | None:
    """``fix`` with the evidence ``taken`` claims left out; None when nothing is left."""
    if isinstance(fix, Combined):
        rest = [f for f in (without(trace, f, taken) for f in fix.fixes) if f is not None]
        return replace(fix, fixes=tuple(rest)) if rest else None
    if isinstance(fix, GraphLaunch):
        return _graph_without(trace, fix, taken)
    if isinstance(fix, ScaleGpu | HideComm):
        k = setdiff_ints(as_rows(fix.kernels), taken.kernels)
        if isinstance(fix, ScaleGpu):
            m = setdiff_ints(as_rows(fix.memcpy), taken.memcpy)
            return replace(fix, kernels=k, memcpy=m) if len(k) or len(m) else None
        return replace(fix, kernels=k) if len(k) else None
    if isinstance(fix, AsyncCopies):
        m = setdiff_ints(as_rows(fix.memcpy), taken.memcpy)
        if len(m):
            m = m[~_covered_calls(trace, trace.memcpy["launch_idx"].to_numpy()[m], taken)]
        return replace(fix, memcpy=m) if len(m) else None
    if isinstance(fix, DropSyncs):
        r = as_rows(fix.runtime)
        r = r[~_covered_calls(trace, r, taken)] if len(r) else r
        return replace(fix, runtime=r) if len(r) else None
    if isinstance(fix, ShrinkHost):
        mine = claims_of(trace, fix)
        st, en, td = [], [], []
        for t, (s, e) in mine.host.items():
            ts, te = _host_of(taken, t)
            s2, e2 = _subtract(s, e, ts, te) if len(ts) else (s, e)
            st.append(s2)
            en.append(e2)
            td.append(np.full(len(s2), t, dtype=np.int64))
        s_all = np.concatenate(st) if st else _EMPTY
        if not len(s_all):
            return None
        tids = None if fix.tids is None else np.concatenate(td)
        return replace(fix, starts=s_all, ends=np.concatenate(en), tids=tids)
    return fix


def _graph_without(trace: Trace, fix: GraphLaunch, taken: Claims) -> GraphLaunch | None:
    """A :class:`GraphLaunch` without ``taken``: the host time others claim stays (it joins the
    ranges the fix keeps); a :class:`GraphLaunch` also leaves out the kernels and copies whose
    launch call others mostly claim."""
    parts = list(taken.host.values())
    ks = np.concatenate([p[0] for p in parts]) if parts else _EMPTY
    ke = np.concatenate([p[1] for p in parts]) if parts else _EMPTY
    if fix.keep_starts is not None:
        ks = np.r_[np.asarray(fix.keep_starts, dtype=np.int64).ravel(), ks]
        ke = np.r_[np.asarray(fix.keep_ends, dtype=np.int64).ravel(), ke]
    ks, ke = union(ks, ke) if len(ks) else (_EMPTY, _EMPTY)
    if isinstance(fix, StepGraph):
        return replace(fix, keep_starts=ks, keep_ends=ke)
    k, m = as_rows(fix.kernels), as_rows(fix.memcpy)
    if len(k):
        k = k[~_covered_calls(trace, trace.kernels["launch_idx"].to_numpy()[k], taken)]
    if len(m):
        m = m[~_covered_calls(trace, trace.memcpy["launch_idx"].to_numpy()[m], taken)]
    if not (len(k) or len(m)):
        return None
    return replace(fix, kernels=k, memcpy=m, keep_starts=ks, keep_ends=ke)
