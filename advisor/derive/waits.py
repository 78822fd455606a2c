"""Which host calls wait for the device, read from evidence.

A host call *waits* for a GPU activity when it returns only once that activity is done; the
time it spent waiting is the GPU's, not the host's. Two kinds of evidence say so:

- **The API's rules.** An explicit synchronize (``cuda/hip{Device,Stream,Event,Ctx,Thread}
  Synchronize``) waits for the GPU work issued before it: of that work, the activity that ended
  last before the call returned (a device-wide synchronize: every stream's last one too). A
  device-to-host copy into pageable memory (it returns when the copy is done) and a synchronous
  copy call (``cudaMemcpy``, ``hipMemcpyWithStream``, ...) wait for their own copy. An
  asynchronous host-to-device copy from pageable memory returns once the driver has staged it,
  chunk by chunk while the transfer runs: when its transfer started before it returned, it
  waits for its copy (the transfer paces it); one whose transfer runs later staged it at once.
- **Timing, for a call of any name.** A call that lasts far longer than its own cost
  elsewhere in the trace (the ``OWN_QUANTILE``th percentile of the calls of the same name: at
  least ``WAIT_X`` times it and ``WAIT_MIN_NS`` more) and that returns within ``WAIT_TOL_NS``
  after a GPU activity it could be waiting for ended, waited for that activity:

  - **its own work**: it returned while the copy it launched ran, which had been running for
    longer than ``WAIT_TOL_NS`` (a copy staged chunk by chunk returns as its last chunk is
    staged, shortly before the last transfer ends), or right after its copy or kernel ended,
    which started as the work it was queued behind ended;
  - **a stream's queue**: the last activity issued before it started on a stream it touches
    (the stream of the work it launches; every stream, for a call that launches nothing such as
    ``cudaFree``) ended right before it returned;
  - **a slot in a full launch queue**: the work it launched started long after it returned (the
    queue was deep) and it returned right after an earlier activity of that stream ended.

An activity was *issued before* a call when its launch call started before the call; one whose
launch is not in the trace (queued before the trace's host events begin, a lost launch) when it
started before the call returned.

**An operator whose children do not explain its time** (a trace that did not record the call
that waited: a read's synchronize missing under ``aten::_local_scalar_dense``) waits by the same
timing rules: its *tail*, from its last child's end to its own end, when the operator launched
GPU work itself and the tail lasts far longer than its name's tails elsewhere (:func:`op_tails`;
the replay holds such a tail as a host node of its own).

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

from dataclasses import dataclass

import numpy as np
import pandas as pd

from advisor.derive.runtime import DEVICE_SYNC_RE, SYNC_CALL_RE, SYNC_COPY_RE
from advisor.derive.timeline import union
from advisor.derive.waittiming import (
    OWN_QUANTILE,
    WAIT_MIN_NS,
    WAIT_TOL_NS,
    WAIT_X,
    Activities,
    How,
    activities,
    by_timing,
    own_activity,
    sync_waits,
)
from advisor.trace.model import Trace
from advisor.trace.names import name_flags, name_mask

__all__ = [
    "WAIT_MIN_NS",
    "WAIT_TOL_NS",
    "Activities",
    "How",
    "OpTails",
    "Waits",
    "activities",
    "op_tails",
    "own_activity",
    "waited_spans",
    "waits",
]


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
    return trace.memo("waits.waits", lambda: _waits(trace))


def _name_cost(names: pd.Series, dur: np.ndarray, free: np.ndarray) -> np.ndarray:
    """Per row: the OWN_QUANTILE-th percentile of the durations of the rows of its name that
    are ``free`` (returned as nothing they could wait for ended): what such a call costs when
    it does not wait; -1 where no row of its name is free."""
    if not len(dur):
        return np.zeros(0, dtype=np.int64)
    codes = pd.factorize(names.astype(str).to_numpy())[0]
    q = pd.Series(dur[free]).groupby(codes[free]).quantile(OWN_QUANTILE / 100.0)
    return q.reindex(codes).fillna(-1).to_numpy(np.float64).astype(np.int64)


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
    # a pageable host-to-device copy whose transfer ran while its call staged it chunk by chunk
    ruled |= (own >= 0) & a.from_pageable[oc] & (a.ts_ns[oc] < end)
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
    rel = np.asarray(by_timing(a, ts, end, own, cand), dtype=np.int64).reshape(-1, 2)
    near = np.zeros(len(rt), dtype=bool)
    near[cand[rel[:, 0] != How.NONE]] = True
    # ...and lasted far longer than the calls of their name that did not (their return time,
    # where every call of the name did)
    cost = _name_cost(rt["name"], dur, ~near)
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


def waited_spans(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """The time the host waited for the device (every waiting call beyond its own cost, on any
    thread), as disjoint sorted intervals: not the host's own work."""
    return trace.memo("waits.spans", lambda: _waited_spans(trace))


def _waited_spans(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    w, t = waits(trace), op_tails(trace)
    rt = trace.runtime
    lo = np.r_[rt["ts_ns"].to_numpy(np.int64)[w.rows] + w.own_ns, t.ts_ns + t.own_ns]
    hi = np.r_[rt["end_ns"].to_numpy(np.int64)[w.rows], t.end_ns]
    keep = hi > lo
    return union(lo[keep].astype(np.int64), hi[keep].astype(np.int64))


@dataclass(frozen=True, eq=False)
class OpTails:
    """Operators whose children do not explain their time: each one's tail (from its last
    child's end to its own end) that waited for the device, by timing (as a runtime call of any
    name: see the module doc), for a trace that did not record the call that waited."""

    op: np.ndarray  # row of trace.cpu_ops
    tid: np.ndarray  # its thread
    pid: np.ndarray
    ts_ns: np.ndarray  # the tail's start (its last child's end)
    end_ns: np.ndarray  # the operator's end
    how: np.ndarray  # How (OWN, DRAIN, SLOT)
    awaited: np.ndarray  # the activity waited for
    return_ns: np.ndarray
    own_ns: np.ndarray


def op_tails(trace: Trace) -> OpTails:
    """The :class:`OpTails` of ``trace``, once per trace: operators that launched GPU work
    themselves (through a runtime call of theirs) and whose tail lasts far longer than their
    name's tails elsewhere, ending as work they could wait for ends."""
    return trace.memo("waits.op_tails", lambda: _op_tails(trace))


def _op_tails(trace: Trace) -> OpTails:
    ops, rt = trace.cpu_ops, trace.runtime
    a = activities(trace)
    z = np.zeros(0, dtype=np.int64)
    if not len(ops) or not len(rt) or not len(a.ts_ns):
        return OpTails(z, z, z, z, z, z, z, z, z)
    ts, end = ops["ts_ns"].to_numpy(np.int64), ops["end_ns"].to_numpy(np.int64)
    last = ts.copy()  # its last child's end (operators and runtime calls)
    par = ops["parent_idx"].to_numpy()
    np.maximum.at(last, par[par >= 0], end[par >= 0])
    oi = rt["op_idx"].to_numpy()
    rt_end = rt["end_ns"].to_numpy(np.int64)
    np.maximum.at(last, oi[oi >= 0], rt_end[oi >= 0])
    # the work it launched itself (the last to end), through its own runtime calls
    own_rt = own_activity(trace)
    own = np.full(len(ops), -1, dtype=np.int64)
    lr = np.flatnonzero((oi >= 0) & (own_rt >= 0))
    lr = lr[np.argsort(a.end_ns[own_rt[lr]], kind="stable")]
    own[oi[lr]] = own_rt[lr]  # (the last write, the latest end, wins)
    tail = end - last
    cand = np.flatnonzero((own >= 0) & (tail >= WAIT_MIN_NS))
    rel = np.asarray(by_timing(a, last, end, own, cand), dtype=np.int64).reshape(-1, 2)
    near = np.zeros(len(ops), dtype=bool)
    near[cand[rel[:, 0] != How.NONE]] = True
    cost = _name_cost(ops["name"], tail, ~near)
    keep: list[tuple[int, int, int]] = []
    for j, (h, w) in zip(cand.tolist(), rel.tolist(), strict=True):
        if h == How.NONE:
            continue
        c = int(cost[j]) if cost[j] >= 0 else max(int(end[j] - a.end_ns[w]), 0)
        if tail[j] >= c + WAIT_MIN_NS and tail[j] >= WAIT_X * max(c, 1):
            keep.append((j, h, w))
    k = np.asarray(keep, dtype=np.int64).reshape(-1, 3)
    i, aw = k[:, 0], k[:, 2]
    ret = end[i] - a.end_ns[aw]
    own_ns = np.clip(np.maximum(ret, np.maximum(cost[i], 0)), 0, tail[i])
    return OpTails(
        op=i,
        tid=ops["tid"].to_numpy()[i].astype(np.int64),
        pid=ops["pid"].to_numpy()[i].astype(np.int64),
        ts_ns=last[i],
        end_ns=end[i],
        how=k[:, 1],
        awaited=aw,
        return_ns=ret,
        own_ns=own_ns,
    )
