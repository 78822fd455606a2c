"""Which host calls wait for the device, read from evidence.

A host call *waits* for a GPU activity when it returns only once that activity is done; the
time it spent waiting is the GPU's, not the host's. Two kinds of evidence say so:

- **The API's rules.** An explicit synchronize (``cuda/hip{Device,Stream,Event,Ctx,Thread}
  Synchronize``) waits for the GPU work issued before it: of that work, the activity that ended
  last before the call returned (a device-wide synchronize: every stream's last one too). A
  device-to-host copy into pageable memory (it returns when the copy is done) and a synchronous
  copy call (``cudaMemcpy``, ``hipMemcpyWithStream``, ...) wait for their own copy. (An
  asynchronous host-to-device copy from pageable memory returns once the driver has staged it:
  it waits only when the staging buffers are full, which its timing shows.)
- **Timing, for a call of any name.** A call that lasts far longer than its own cost
  elsewhere in the trace (the ``OWN_QUANTILE``th percentile of the calls of the same name: at
  least ``WAIT_X`` times it and ``WAIT_MIN_NS`` more) and that returns within ``WAIT_TOL_NS``
  after a GPU activity it could be waiting for ended, waited for that activity:

  - **its own work**: it returned while the copy or kernel it launched ran, which had been
    running for longer than ``WAIT_TOL_NS`` (a copy staged chunk by chunk returns as its last
    chunk is staged, shortly before the last transfer ends), or right after it ended;
  - **a stream's queue**: the last activity issued before it started on a stream it touches
    (the stream of the work it launches; every stream, for a call that launches nothing such as
    ``cudaFree``) ended right before it returned;
  - **a slot in a full launch queue**: the work it launched started long after it returned (the
    queue was deep) and it returned right after an earlier activity of that stream ended.

An activity was *issued before* a call when its launch call started before the call; one whose
launch is not in the trace (queued before the trace's host events begin, a lost launch) when it
started before the call returned.

A waiting call's **own cost** is what it lasts with nothing to wait for: for an explicit
synchronize or a copy waiting by the API's rules, its return time after the awaited work ended;
for a wait found by timing, at least its name's cost elsewhere. The replay
(:mod:`advisor.replay.model`) ends it at the later of its start plus its own cost and the end of
the activity it waited for plus its measured return time. Waits whose end no recorded GPU work
explains are :mod:`advisor.derive.untraced`'s.

GPU activities are indexed as :func:`activities` lists them: ``trace.kernels`` rows, then
``trace.memcpy`` rows.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np
import pandas as pd

from advisor.derive.runtime import CLOCK_TOL_NS, DEVICE_SYNC_RE, SYNC_CALL_RE, SYNC_COPY_RE
from advisor.derive.timeline import union
from advisor.trace.model import Trace
from advisor.trace.names import name_flags, name_mask

WAIT_TOL_NS = 50_000  # a wait returns within this long after the work it waited for ended
WAIT_MIN_NS = 50_000  # a call waited by timing when it lasted this much more than its own cost
WAIT_X = 4.0  # ...and this many times its own cost
OWN_QUANTILE = 25  # a call's own cost: this percentile of the calls of its name in the trace
SYNC_LOOKBACK = 4000  # a synchronize looks for what it waits for among the activities issued last
NEG = -(1 << 62)


class How(enum.IntEnum):
    """Why a call waits."""

    NONE = 0
    SYNC = 1  # an explicit synchronize
    COPY = 2  # a copy that waits for itself by the API's rules (pageable memory, cudaMemcpy)
    OWN = 3  # by timing: returned as its own GPU work ran or ended
    DRAIN = 4  # by timing: returned as a stream it touches drained
    SLOT = 5  # by timing: a launch into a full queue, returned as a slot freed


@dataclass(frozen=True, eq=False)
class Activities:
    """The GPU activities: ``trace.kernels`` rows, then ``trace.memcpy`` rows."""

    ts_ns: np.ndarray
    end_ns: np.ndarray
    stream: np.ndarray  # device * 2**32 + stream
    launch_rt: np.ndarray  # the runtime row that launched it, -1
    is_copy: np.ndarray  # bool: a memcpy (not a memset, not a kernel)
    to_pageable: np.ndarray  # bool: a device-to-host copy into pageable (or unknown) memory
    issued_ns: np.ndarray  # its launch call's start; its own start without a launch in the trace
    n_kernels: int


def activities(trace: Trace) -> Activities:
    """The trace's GPU activities in one index space (see the module doc), once per trace."""
    return trace.memo("waits.activities", lambda: _activities(trace))  # type: ignore[no-any-return]


def _activities(trace: Trace) -> Activities:
    k, mc = trace.kernels, trace.memcpy
    cols = ["ts_ns", "end_ns", "device", "stream", "launch_idx"]
    g = pd.concat([p[cols] for p in (k, mc) if len(p)] or [k[cols]], ignore_index=True)
    dev = g["device"].fillna(-1).to_numpy(np.int64)
    strm = pd.to_numeric(g["stream"], errors="coerce").fillna(-1).to_numpy(np.int64)
    n_k = len(k)
    is_copy = np.zeros(len(g), dtype=bool)
    to_pageable = np.zeros(len(g), dtype=bool)
    if len(mc):
        kind = mc["kind"].astype(str).to_numpy()
        is_copy[n_k:] = kind != "Memset"
        to_pageable[n_k:] = (kind == "DtoH") & (mc["dst"].astype(str).to_numpy() != "Pinned")
    launch_rt = g["launch_idx"].to_numpy(np.int64)
    ts = g["ts_ns"].to_numpy(np.int64)
    rt_ts = trace.runtime["ts_ns"].to_numpy(np.int64)
    ok = (launch_rt >= 0) & (launch_rt < len(rt_ts))
    issued = (
        np.where(ok, rt_ts[np.clip(launch_rt, 0, max(len(rt_ts) - 1, 0))], ts)
        if len(rt_ts)
        else ts.copy()
    )
    return Activities(
        ts_ns=ts,
        end_ns=g["end_ns"].to_numpy(np.int64),
        stream=dev * (1 << 32) + strm,
        launch_rt=np.where(ok, launch_rt, -1),
        is_copy=is_copy,
        to_pageable=to_pageable,
        issued_ns=issued,
        n_kernels=n_k,
    )


@dataclass(frozen=True, eq=False)
class Waits:
    """The calls that wait for the device (rows of ``trace.runtime``, sorted) and what for."""

    rows: np.ndarray
    how: np.ndarray  # How
    awaited: np.ndarray  # the activity waited for (see activities), -1: none recorded ended
    more: dict[int, list[int]]  # per position in ``rows``: a device sync's other streams' last
    return_ns: np.ndarray  # its return after the awaited activity ended (negative: before)
    own_ns: np.ndarray  # what it lasts with nothing to wait for
    cost_ns: np.ndarray  # its name's cost elsewhere in the trace (OWN_QUANTILE)


def waits(trace: Trace) -> Waits:
    """The :class:`Waits` of ``trace`` (see the module doc), once per trace."""
    return trace.memo("waits.waits", lambda: _waits(trace))  # type: ignore[no-any-return]


def _name_cost(trace: Trace, free: np.ndarray) -> np.ndarray:
    """Per ``trace.runtime`` row: the OWN_QUANTILE-th percentile of the durations of the calls
    of its name in the trace that are ``free`` (returned as nothing they could wait for ended):
    what such a call costs when it does not wait; -1 where no call of its name is free."""
    rt = trace.runtime
    if not len(rt):
        return np.zeros(0, dtype=np.int64)
    codes = pd.factorize(rt["name"].astype(str).to_numpy())[0]
    dur = rt["dur_ns"].to_numpy(np.int64)
    q = pd.Series(dur[free]).groupby(codes[free]).quantile(OWN_QUANTILE / 100.0)
    return q.reindex(codes).fillna(-1).to_numpy(np.float64).astype(np.int64)


def own_activity(trace: Trace) -> np.ndarray:
    """Per ``trace.runtime`` row: the activity it launched that ended last (-1: none)."""
    return trace.memo("waits.own", lambda: _own(trace))  # type: ignore[no-any-return]


def _own(trace: Trace) -> np.ndarray:
    a = activities(trace)
    out = np.full(len(trace.runtime), -1, dtype=np.int64)
    j = np.flatnonzero(a.launch_rt >= 0)
    if len(j):
        j = j[np.lexsort((a.end_ns[j], a.launch_rt[j]))]  # by call, then by end
        last = np.r_[a.launch_rt[j][1:] != a.launch_rt[j][:-1], True]
        out[a.launch_rt[j][last]] = j[last]
    return out


def _waits(trace: Trace) -> Waits:
    rt = trace.runtime
    a = activities(trace)
    empty = np.zeros(0, dtype=np.int64)
    if not len(rt) or not len(a.ts_ns):
        return Waits(empty, empty, empty, {}, empty, empty, empty)
    ts = rt["ts_ns"].to_numpy(np.int64)
    end = rt["end_ns"].to_numpy(np.int64)
    dur = end - ts
    own = own_activity(trace)
    is_sync = name_mask(rt["name"], SYNC_CALL_RE)
    device_sync = name_mask(rt["name"], DEVICE_SYNC_RE)
    sync_copy = name_flags(rt["name"], lambda n: SYNC_COPY_RE.match(n) is not None)
    oc = np.clip(own, 0, None)
    ruled = (own >= 0) & a.is_copy[oc] & (a.to_pageable[oc] | sync_copy)
    ruled &= a.end_ns[oc] > ts
    how = np.zeros(len(rt), dtype=np.int64)
    awaited = np.full(len(rt), -1, dtype=np.int64)
    how[ruled], awaited[ruled] = How.COPY, own[ruled]
    sync_rows = np.flatnonzero(is_sync)
    got, more = sync_waits(a, ts, end, sync_rows, device_sync[sync_rows])
    how[sync_rows] = How.SYNC
    awaited[sync_rows] = got
    # by timing: the long calls that returned as something they could wait for ended...
    cand = np.flatnonzero(~is_sync & ~ruled & (dur >= WAIT_MIN_NS))
    rel = np.asarray(_by_timing(a, ts, end, own, cand), dtype=np.int64).reshape(-1, 2)
    near = np.zeros(len(rt), dtype=bool)
    near[cand[rel[:, 0] != How.NONE]] = True
    # ...and lasted far longer than the calls of their name that did not (their return time,
    # where every call of the name did)
    cost = _name_cost(trace, ~near)
    for i, (h, w) in zip(cand.tolist(), rel.tolist(), strict=True):
        if h == How.NONE:
            continue
        c = int(cost[i]) if cost[i] >= 0 else max(int(end[i] - a.end_ns[w]), 0)
        if dur[i] >= c + WAIT_MIN_NS and dur[i] >= WAIT_X * max(c, 1):
            how[i], awaited[i] = h, w
    cost = np.maximum(cost, 0)
    rows = np.flatnonzero(how != How.NONE)
    aw = awaited[rows]
    aend = np.where(aw >= 0, a.end_ns[np.clip(aw, 0, None)], end[rows])
    ret = end[rows] - aend
    d = dur[rows]
    waited = (aw >= 0) & (aend > ts[rows])
    timed = how[rows] >= How.OWN
    own_ns = np.where(timed, np.maximum(ret, cost[rows]), ret)
    own_ns = np.where(waited, np.clip(own_ns, 0, d), d)
    pos = {int(r): p for p, r in enumerate(rows.tolist())}
    return Waits(
        rows=rows,
        how=how[rows],
        awaited=aw,
        more={pos[r]: m for r, m in more.items() if r in pos},
        return_ns=np.where(aw >= 0, ret, 0),
        own_ns=own_ns,
        cost_ns=cost[rows],
    )


def sync_waits(
    a: Activities,
    ts: np.ndarray,
    end: np.ndarray,
    rows: np.ndarray,
    device_wide: np.ndarray,
) -> tuple[np.ndarray, dict[int, list[int]]]:
    """Explicit synchronizes (runtime ``rows``): for each, the activity issued before it that
    ended last before it returned (-1: none ended after it started); a device-wide one
    (``device_wide``) also waits for the last such activity of every other stream (keyed by
    runtime row)."""
    awaited = np.full(len(rows), -1, dtype=np.int64)
    more: dict[int, list[int]] = {}
    if not len(rows) or not len(a.ts_ns):
        return awaited, more
    has = a.launch_rt >= 0
    by_issue = np.flatnonzero(has)[np.argsort(a.issued_ns[has], kind="stable")]
    issued_sorted = a.issued_ns[by_issue]
    by_start = np.flatnonzero(~has)[np.argsort(a.ts_ns[~has], kind="stable")]
    start_sorted = a.ts_ns[by_start]
    for p, i in enumerate(rows.tolist()):
        n = np.searchsorted(issued_sorted, ts[i], side="left")
        cand = by_issue[max(0, n - SYNC_LOOKBACK) : n]
        n = np.searchsorted(start_sorted, end[i], side="left")
        if n:
            cand = np.concatenate([cand, by_start[max(0, n - SYNC_LOOKBACK) : n]])
            cand = cand[np.argsort(a.issued_ns[cand], kind="stable")]
        e = a.end_ns[cand]
        e = np.where(e <= end[i] + CLOCK_TOL_NS, e, NEG)
        if len(e) and e.max() > ts[i]:
            awaited[p] = cand[int(np.argmax(e))]
            if device_wide[p]:  # every stream's last activity launched before it
                last = pd.Series(np.arange(len(cand))).groupby(a.stream[cand]).last().to_numpy()
                w = [int(cand[x]) for x in last if cand[x] != awaited[p] and e[x] > NEG]
                if w:
                    more[int(i)] = w
    return awaited, more


def _by_timing(
    a: Activities, ts: np.ndarray, end: np.ndarray, own: np.ndarray, cand: np.ndarray
) -> list[tuple[int, int]]:
    """(How, awaited activity) of each candidate call, by timing (see the module doc); (NONE,
    -1) where nothing it could wait for ended as it returned. The awaited work ended at least
    WAIT_MIN_NS after the call started (the call was there, waiting)."""
    out: list[tuple[int, int]] = []
    if not len(cand):
        return out
    per_stream = _stream_index(a)
    all_streams = list(per_stream)
    by_end = np.argsort(a.end_ns, kind="stable")
    for i in cand.tolist():
        s, e = int(ts[i]), int(end[i])
        o = int(own[i])
        streams = _touched(a, o, by_end) if o >= 0 else all_streams
        queue = [_last_before(a, per_stream[st], s) for st in streams]  # each stream's queue
        if o >= 0 and _waited_for_own(a, o, s, e, queue):
            out.append((How.OWN, o))
            continue
        drained = [j for j in queue if j >= 0 and _returned_after(a, j, s, e)]
        if drained:
            out.append((How.DRAIN, max(drained, key=lambda j: int(a.end_ns[j]))))
            continue
        if o >= 0 and a.ts_ns[o] - e >= WAIT_MIN_NS:  # launched into a deep queue
            idx, issued = per_stream[int(a.stream[o])]
            before = idx[: int(np.searchsorted(issued, s, side="left"))]
            ends = a.end_ns[before]
            ok = (e - ends >= -CLOCK_TOL_NS) & (e - ends <= WAIT_TOL_NS)
            ok &= ends - s >= WAIT_MIN_NS
            if ok.any():
                out.append((How.SLOT, int(before[ok][np.argmax(ends[ok])])))
                continue
        out.append((How.NONE, -1))
    return out


def _touched(a: Activities, o: int, by_end: np.ndarray) -> list[int]:
    """The streams a call that launched ``o`` touches: ``o``'s, and those of its device whose
    activity ended right before ``o`` started (``o`` waited for it: an event, the legacy
    default stream)."""
    t = int(a.ts_ns[o])
    ends = a.end_ns[by_end]
    near = by_end[np.searchsorted(ends, t - WAIT_TOL_NS) : np.searchsorted(ends, t, "right")]
    dev = int(a.stream[o]) >> 32
    other = {int(x) for x in a.stream[near] if int(x) >> 32 == dev} - {int(a.stream[o])}
    return [int(a.stream[o]), *sorted(other)]


def _last_before(a: Activities, stream: tuple[np.ndarray, np.ndarray], t: int) -> int:
    """The last activity of a stream issued before ``t`` (-1: none)."""
    idx, issued = stream
    n = int(np.searchsorted(issued, t, side="left"))
    return int(idx[n - 1]) if n else -1


def _returned_after(a: Activities, j: int, s: int, e: int) -> bool:
    """A call [s, e) returned within WAIT_TOL_NS after activity ``j`` ended, which ended at least
    WAIT_MIN_NS after the call started."""
    je = int(a.end_ns[j])
    return -CLOCK_TOL_NS <= e - je <= WAIT_TOL_NS and je - s >= WAIT_MIN_NS


def _waited_for_own(a: Activities, o: int, s: int, e: int, queued: list[int]) -> bool:
    """A call [s, e) waited for its own work ``o``: it returned while that work ran, which had
    been running for longer than WAIT_TOL_NS (a copy staged chunk by chunk returns as its last
    chunk is staged); or right after that work ended, which started as earlier work it was
    queued behind (``queued``: the last activity issued before the call on each stream it
    touches) ended, during the call. (A launch that returns just as its kernel starts, such as
    one that first loads the kernel's module, posted its work as it returned: not a wait.)"""
    ots, oend = int(a.ts_ns[o]), int(a.end_ns[o])
    if ots < e - WAIT_TOL_NS and e <= oend + WAIT_TOL_NS and oend - s >= WAIT_MIN_NS:
        return True
    if not (-CLOCK_TOL_NS <= e - oend <= WAIT_TOL_NS):
        return False
    qe = [int(a.end_ns[q]) for q in queued if q >= 0]
    return any(0 <= ots - x <= WAIT_TOL_NS and x - s >= WAIT_MIN_NS for x in qe)


def _stream_index(a: Activities) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per stream: its activities by issue time, and those times."""
    out = {}
    o = np.lexsort((a.issued_ns, a.stream))
    s = a.stream[o]
    cuts = np.flatnonzero(np.r_[True, s[1:] != s[:-1], True])
    for lo, hi in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True):
        idx = o[lo:hi]
        out[int(s[lo])] = (idx, a.issued_ns[idx])
    return out


def waited_spans(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """The time the host waited for the device (every waiting call beyond its own cost, on any
    thread), as disjoint sorted intervals: not the host's own work."""
    return trace.memo("waits.spans", lambda: _waited_spans(trace))  # type: ignore[no-any-return]


def _waited_spans(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    w = waits(trace)
    rt = trace.runtime
    if not len(w.rows):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    lo = rt["ts_ns"].to_numpy(np.int64)[w.rows] + w.own_ns
    hi = rt["end_ns"].to_numpy(np.int64)[w.rows]
    keep = hi > lo
    return union(lo[keep], hi[keep])
