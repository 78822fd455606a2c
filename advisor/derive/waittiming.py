"""How a wait is read off the timeline (:mod:`advisor.derive.waits` says what waits): the GPU
activities in one index space, and the relations between a host interval and the GPU work it
could be waiting for (an explicit synchronize's awaited work; by timing, its own work, a stream
it touches that drained, a slot in a full launch queue). See :mod:`advisor.derive.waits` for
the rules in words.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np
import pandas as pd

from advisor.derive.runtime import CLOCK_TOL_NS
from advisor.trace.model import Trace

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
    """The GPU activities (:meth:`~advisor.trace.model.Trace.gpu_activity`) in table order:
    ``trace.kernels`` rows, then ``trace.memcpy`` rows."""

    ts_ns: np.ndarray
    end_ns: np.ndarray
    stream: np.ndarray  # device * 2**32 + stream
    launch_rt: np.ndarray  # the runtime row that launched it, -1
    is_copy: np.ndarray  # bool: a memcpy (not a memset, not a kernel)
    to_pageable: np.ndarray  # bool: a device-to-host copy into pageable (or unknown) memory
    from_pageable: np.ndarray  # bool: a host-to-device copy from pageable memory
    issued_ns: np.ndarray  # its launch call's start; its own start without a launch in the trace
    n_kernels: int


def activities(trace: Trace) -> Activities:
    """The trace's GPU activities in one index space (see the module doc), once per trace."""
    return trace.memo("waittiming.activities", lambda: _activities(trace))


def _activities(trace: Trace) -> Activities:
    k, mc = trace.kernels, trace.memcpy
    # the trace's one table of GPU activity, back in table order (its index: kernels, then copies)
    g = trace.gpu_activity().sort_index()
    dev = g["device"].fillna(-1).to_numpy(np.int64)
    strm = pd.to_numeric(g["stream"], errors="coerce").fillna(-1).to_numpy(np.int64)
    n_k = len(k)
    is_copy = np.zeros(len(g), dtype=bool)
    to_pageable = np.zeros(len(g), dtype=bool)
    from_pageable = np.zeros(len(g), dtype=bool)
    if len(mc):
        kind = mc["kind"].astype(str).to_numpy()
        is_copy[n_k:] = kind != "Memset"
        to_pageable[n_k:] = (kind == "DtoH") & (mc["dst"].astype(str).to_numpy() != "Pinned")
        from_pageable[n_k:] = (kind == "HtoD") & (mc["src"].astype(str).to_numpy() == "Pageable")
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
        from_pageable=from_pageable,
        issued_ns=issued,
        n_kernels=n_k,
    )


def own_activity(trace: Trace) -> np.ndarray:
    """Per ``trace.runtime`` row: the activity it launched that ended last (-1: none)."""
    return trace.memo("waittiming.own", lambda: _own(trace))


def _own(trace: Trace) -> np.ndarray:
    a = activities(trace)
    out = np.full(len(trace.runtime), -1, dtype=np.int64)
    j = np.flatnonzero(a.launch_rt >= 0)
    if len(j):
        j = j[np.lexsort((a.end_ns[j], a.launch_rt[j]))]  # by call, then by end
        last = np.r_[a.launch_rt[j][1:] != a.launch_rt[j][:-1], True]
        out[a.launch_rt[j][last]] = j[last]
    return out


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


def by_timing(
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
    """A call [s, e) waited for its own work ``o``: it returned while that copy ran, which had
    been running for longer than WAIT_TOL_NS (a copy staged chunk by chunk returns as its last
    chunk is staged; a kernel launch posts its kernel, and a call that goes on while the kernel
    runs does host work); or right after that work ended, which started as earlier work it was
    queued behind (``queued``: the last activity issued before the call on each stream it
    touches) ended, during the call. (A launch that returns just as its kernel starts, such as
    one that first loads the kernel's module, posted its work as it returned: not a wait.)"""
    ots, oend = int(a.ts_ns[o]), int(a.end_ns[o])
    staged = a.is_copy[o] and ots < e - WAIT_TOL_NS and e <= oend + WAIT_TOL_NS
    if staged and oend - s >= WAIT_MIN_NS:
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
