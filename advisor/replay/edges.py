"""The step graph's nodes and edges, one builder per kind of edge (:mod:`advisor.replay.model`
puts them together; the replayed window and the step anchors are in
:mod:`advisor.replay.structure`).

Every builder reads measured times and returns arrays over the nodes: for an edge, the node it
comes from (-1: none) and, where the edge carries one, its measured offset in ns. Host calls are
indexed in start order, GPU activities as :func:`gpu_activities` lists them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np
import pandas as pd

from advisor.arrays import unique_ints
from advisor.derive.runtime import COPY_CALL_RE, DEVICE_SYNC_RE, SYNC_CALL_RE
from advisor.derive.untraced import untraced
from advisor.derive.waits import activities, op_tails
from advisor.derive.waits import waits as derive_waits
from advisor.replay.structure import cross_stream_waits
from advisor.trace.model import Trace
from advisor.trace.names import name_mask

HANDOFF_NS = 2_000_000  # a thread's first call this soon after another thread's call: a hand-off
HANDOFF_IDLE_X = 3  # a thread idle this many times longer than the delay after another's call
CROSS_STREAM_MIN_NS = 5_000  # an unexplained start delay above this looks for another stream
THROTTLE_MIN_NS = 50_000  # a launch call this long (and THROTTLE_X x the median) may be
THROTTLE_X = 10.0  # ...waiting for the launch queue
NEG = -(1 << 62)  # "no such time" (an edge that does not exist)


class Work(enum.IntEnum):
    """What a GPU activity is."""

    COMM = 0  # a collective's kernel
    KERNEL = 1
    MEMCPY = 2
    MEMSET = 3
    UNTRACED = 4  # a wait on GPU work the trace does not hold (advisor.derive.untraced)


class Bind(enum.IntEnum):
    """A GPU activity's binding edge: the one that decided its measured start."""

    NONE = -1  # no edge: it keeps its measured start
    LAUNCH = 0  # its launch call's start plus the launch latency
    STREAM = 1  # the end of the previous activity on its stream
    CROSS_STREAM = 2  # the end of the activity on another stream it waited for


@dataclass(frozen=True, eq=False)
class GpuRows:
    """The GPU activities as measured: ``trace.kernels`` rows, then ``trace.memcpy`` rows (the
    order of :func:`advisor.derive.waits.activities`), then the untraced waits
    (:mod:`advisor.derive.untraced`)."""

    source: np.ndarray  # 0: trace.kernels, 1: trace.memcpy, 2: an untraced wait
    row: np.ndarray  # row in that table
    ts_ns: np.ndarray
    end_ns: np.ndarray
    stream: np.ndarray  # device * 2**32 + stream
    kind: np.ndarray  # Work
    launch_rt: np.ndarray  # the runtime row that launched it (an untraced wait: its call), -1


def gpu_activities(trace: Trace) -> GpuRows:
    """Every kernel, copy and memset of the trace, with the runtime row that launched it, and
    each untraced wait, "launched" by the call that waited."""
    a = activities(trace)
    k, mc = trace.kernels, trace.memcpy
    is_comm = k["is_comm"].to_numpy(dtype=bool)
    is_memset = mc["kind"].astype(str).to_numpy() == "Memset"
    u = untraced(trace)
    rows_of = derive_waits(trace).rows
    return GpuRows(
        source=np.r_[np.zeros(len(k), np.int64), np.ones(len(mc), np.int64), np.full(len(u), 2)],
        row=np.r_[np.arange(len(k)), np.arange(len(mc)), np.arange(len(u))].astype(np.int64),
        ts_ns=np.r_[a.ts_ns, u.ts_ns].astype(np.int64),
        end_ns=np.r_[a.end_ns, u.end_ns].astype(np.int64),
        stream=np.r_[a.stream, u.stream].astype(np.int64),
        kind=np.r_[
            np.where(is_comm, Work.COMM, Work.KERNEL),
            np.where(is_memset, Work.MEMSET, Work.MEMCPY),
            np.full(len(u), Work.UNTRACED),
        ].astype(np.int64),
        launch_rt=np.r_[a.launch_rt, rows_of[u.by]].astype(np.int64),
    )


@dataclass(frozen=True, eq=False)
class HostRows:
    """The runtime calls that matter to the GPU, and the operators' tails that waited for it,
    in start order."""

    runtime_row: np.ndarray  # row of trace.runtime (-1: an operator's tail)
    op_tail: np.ndarray  # an operator's tail (advisor.derive.waits.op_tails): its index, -1
    ts_ns: np.ndarray
    end_ns: np.ndarray
    process: np.ndarray  # process code
    thread: np.ndarray  # thread code (per process and thread id), in (process, thread) order
    trace_tid: np.ndarray  # the trace's own thread id
    is_sync: np.ndarray  # bool: an explicit synchronize
    is_device_sync: np.ndarray  # bool: one that waits for every stream of the device
    is_copy: np.ndarray  # bool: a copy call (cudaMemcpy*)
    is_launch: np.ndarray  # bool: launched GPU work of the trace
    of_runtime: np.ndarray  # per runtime row: its host call, -1


def host_calls(trace: Trace, launch_rt: np.ndarray) -> HostRows:
    """The calls that launched GPU work (``launch_rt``: runtime rows), the syncs and every
    call that waits for the device (:mod:`advisor.derive.waits`: of any name)."""
    rt = trace.runtime
    n_rt = len(rt)
    launched = np.zeros(n_rt, dtype=bool)
    launched[launch_rt[launch_rt >= 0]] = True
    is_sync = name_mask(rt["name"], SYNC_CALL_RE) if n_rt else np.zeros(0, bool)
    is_copy = name_mask(rt["name"], COPY_CALL_RE) if n_rt else np.zeros(0, bool)
    waiting = np.zeros(n_rt, dtype=bool)
    waiting[derive_waits(trace).rows] = True
    rows = np.flatnonzero(launched | is_sync | waiting)
    tails = op_tails(trace)  # waits no recorded call holds: host nodes of their own
    n_tail = len(tails.op)
    ts = np.r_[rt["ts_ns"].to_numpy(np.int64)[rows], tails.ts_ns]
    end = np.r_[rt["end_ns"].to_numpy(np.int64)[rows], tails.end_ns]
    pid = np.r_[rt["pid"].to_numpy()[rows], tails.pid] if n_tail else rt["pid"].to_numpy()[rows]
    tid = np.r_[rt["tid"].to_numpy()[rows], tails.tid] if n_tail else rt["tid"].to_numpy()[rows]
    tail = np.r_[np.full(len(rows), -1, dtype=np.int64), np.arange(n_tail)]
    rows = np.r_[rows, np.full(n_tail, -1, dtype=np.int64)]
    o = np.lexsort((end, ts))
    rows, ts, end, pid, tid, tail = rows[o], ts[o], end[o], pid[o], tid[o], tail[o]
    real = rows >= 0
    # thread codes in (process, thread) order: one integer key per pair (a unique over
    # columns sorts structured rows, far slower)
    pcode = pd.factorize(pid)[0].astype(np.int64)
    tcode = pd.factorize(tid)[0].astype(np.int64)
    if len(rows):
        _, thread = np.unique(pcode * (int(tcode.max()) + 1) + tcode, return_inverse=True)
    else:
        thread = np.zeros(0, dtype=np.int64)
    of_runtime = np.full(n_rt, -1, dtype=np.int64)
    of_runtime[rows[real]] = np.flatnonzero(real)
    r = np.clip(rows, 0, None)
    return HostRows(
        runtime_row=rows,
        op_tail=tail,
        ts_ns=ts,
        end_ns=end,
        process=pcode,
        thread=thread.astype(np.int64).ravel(),
        trace_tid=tid,
        is_sync=is_sync[r] & real,
        is_device_sync=name_mask(rt["name"], DEVICE_SYNC_RE)[r] & real if len(r) else real,
        is_copy=is_copy[r] & real,
        is_launch=launched[r] & real,
        of_runtime=of_runtime,
    )


def host_order(thread: np.ndarray, ts: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, ...]:
    """Host order: each call's previous call on its thread (-1) and the host work before it."""
    prev = np.full(len(ts), -1, dtype=np.int64)
    for t in unique_ints(thread):
        idx = np.flatnonzero(thread == t)
        prev[idx[1:]] = idx[:-1]
    prev_end = np.where(prev >= 0, end[np.clip(prev, 0, None)], ts)
    return prev, np.maximum(ts - prev_end, 0)


def handoffs(h: HostRows, prev: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Hand-offs: the call on another thread of the process that a call waited for (-1), and
    the delay after that call's end. A thread waited for another one when it resumed after
    that thread's call, which ended later than its own previous call, and its own idle time is
    more than HANDOFF_IDLE_X times the delay (a thread's first call: within HANDOFF_NS). The
    delay is host work of the resuming thread (Python before its next runtime call)."""
    ts, end, thread = h.ts_ns, h.end_ns, h.thread
    q = np.full(len(ts), -1, dtype=np.int64)
    prev_end = np.where(prev >= 0, end[np.clip(prev, 0, None)], ts)
    threads = unique_ints(thread)
    if len(threads) > 1:
        best_end = np.full(len(ts), NEG, dtype=np.int64)
        for t in threads:
            idx = np.flatnonzero(thread == t)
            ends = np.maximum.accumulate(end[idx])
            j = np.searchsorted(ends, ts, side="right") - 1
            cand = np.where(j >= 0, idx[np.clip(j, 0, None)], -1)
            other = (thread != t) & (cand >= 0)
            other &= h.process == h.process[np.clip(cand, 0, None)]
            ce = end[np.clip(cand, 0, None)]
            better = other & (ce > best_end)
            q[better], best_end[better] = cand[better], ce[better]
        ok = q >= 0
        off = ts - best_end
        own = ts - prev_end
        waited = (best_end > prev_end) & (own > HANDOFF_IDLE_X * off)
        ok &= np.where(prev < 0, off <= HANDOFF_NS, waited)
        q[~ok] = -1
    return q, np.where(q >= 0, ts - end[np.clip(q, 0, None)], 0)


def launches(
    launch_rt: np.ndarray,
    of_runtime: np.ndarray,
    h_ts: np.ndarray,
    g_ts: np.ndarray,
    prev_end: np.ndarray,
    measured: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, int]:
    """Launch edges: each activity's launch call (-1), that call's start (NEG: none) and the
    launch latency: the 5th percentile of start minus launch over the activities launched onto
    an idle stream (the previous activity on the stream, ``prev_end``, ended before the launch
    call started). An activity queued behind other work starts when that work ends, so its
    start minus launch measures the queue, not the launch: on a GPU-bound trace where the host
    runs far ahead, every activity is queued. Over all activities where none was launched
    onto an idle stream; ``measured``: the activities it is measured on (default: all)."""
    ok = (launch_rt >= 0) & (launch_rt < len(of_runtime))
    launch = np.full(len(launch_rt), -1, dtype=np.int64)
    launch[ok] = of_runtime[launch_rt[ok]]
    launch_ts = np.where(launch >= 0, h_ts[np.clip(launch, 0, None)], NEG)
    lat = g_ts - launch_ts
    good = (launch >= 0) & (lat >= 0)
    if measured is not None:
        good &= measured
    idle = good & (prev_end <= launch_ts)
    use = idle if idle.any() else good
    return launch, launch_ts, int(np.percentile(lat[use], 5)) if use.any() else 0


def stream_order(stream: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Stream order: the previous activity on each activity's stream (-1)."""
    n = len(ts)
    go = np.lexsort((ts, stream))
    prev = np.full(n, -1, dtype=np.int64)
    same = np.r_[False, stream[go][1:] == stream[go][:-1]] if n else np.zeros(0, bool)
    prev[go[same]] = go[np.flatnonzero(same) - 1]
    return prev


def cross_stream(g: GpuRows, ready_ns: np.ndarray) -> np.ndarray:
    """Cross-stream waits: for an activity that started more than CROSS_STREAM_MIN_NS after
    its launch and stream order allowed (``ready_ns``; NEG: neither applies), the activity on
    another stream of its device that ended right before it started (-1)."""
    late_by = np.where(ready_ns > NEG, g.ts_ns - ready_ns, 0)
    dep = np.full(len(ready_ns), -1, dtype=np.int64)
    late = np.flatnonzero(late_by > CROSS_STREAM_MIN_NS)
    if len(late):
        dep[late] = cross_stream_waits(late, g.ts_ns, g.end_ns, g.stream)
    return dep


@dataclass(frozen=True, eq=False)
class Binding:
    """Each activity's edge offsets, its binding edge and what no edge explains."""

    bind: np.ndarray  # Bind
    launch_ns: np.ndarray  # offset after the launch call's start
    prev_ns: np.ndarray  # after the previous activity on the stream ended
    dep_ns: np.ndarray  # after the activity waited for on another stream ended
    residual_ns: np.ndarray  # the measured delay after the latest edge (on the binding one)


def after_launch(launch_ts: np.ndarray, latency_ns: int) -> np.ndarray:
    """The earliest start the launch edge allows (NEG: no launch)."""
    return np.where(launch_ts > NEG, launch_ts + latency_ns, NEG)


def binding(
    ts: np.ndarray,
    launch_ts: np.ndarray,
    latency_ns: int,
    prev_end: np.ndarray,
    dep_end: np.ndarray,
) -> Binding:
    """The binding edge of each activity (the latest of launch + latency, the previous
    activity's end on its stream, the cross-stream activity's end; NEG where an edge is
    missing; the first on a tie) carries the offset that gives back the measured start; the
    others their natural minimum (the launch latency, no gap), or less where the clocks
    disagree."""
    ready_launch = after_launch(launch_ts, latency_ns)
    ready = np.maximum(np.maximum(ready_launch, prev_end), dep_end)
    residual = np.where(ready > NEG, np.maximum(ts - ready, 0), 0)
    edges = np.stack([ready_launch, prev_end, dep_end])  # in Bind order
    bind = np.where(ready > NEG, np.argmax(edges, axis=0), Bind.NONE)
    launch_ns = np.where(
        bind == Bind.LAUNCH, ts - launch_ts, np.minimum(latency_ns, ts - launch_ts)
    )
    prev_ns = np.where(bind == Bind.STREAM, ts - prev_end, np.minimum(0, ts - prev_end))
    dep_ns = np.where(bind == Bind.CROSS_STREAM, ts - dep_end, np.minimum(0, ts - dep_end))
    return Binding(
        bind=bind,
        launch_ns=np.where(launch_ts > NEG, launch_ns, 0),
        prev_ns=np.where(prev_end > NEG, prev_ns, 0),
        dep_ns=np.where(dep_end > NEG, dep_ns, 0),
        residual_ns=residual,
    )


def queue_backpressure(h: HostRows) -> np.ndarray:
    """Launch-queue back-pressure: the launch calls (not copies) that took more than
    THROTTLE_MIN_NS and THROTTLE_X times the median launch: they waited for a slot in a full
    launch queue and return when earlier GPU work ends, as a sync does."""
    calls = np.flatnonzero(h.is_launch & ~h.is_copy)
    if not len(calls):
        return calls
    d = (h.end_ns - h.ts_ns)[calls]
    return calls[d > max(THROTTLE_MIN_NS, THROTTLE_X * float(np.median(d)))]


def waits(trace: Trace, h: HostRows, g: GpuRows) -> CallWaits:
    """The calls that wait for GPU work, from :mod:`advisor.derive.waits` (explicit syncs and
    copies by the API's rules, calls of any name by timing), and what each waits for: a GPU
    activity (an untraced wait of :mod:`advisor.derive.untraced` where the trace holds no
    work that explains the wait's end), with its return time and own cost."""
    w = derive_waits(trace)
    n = len(h.ts_ns)
    awaited = np.full(n, -1, dtype=np.int64)
    return_ns = np.zeros(n, dtype=np.int64)
    own_ns = h.end_ns - h.ts_ns
    more: dict[int, list[int]] = {}
    node = h.of_runtime[w.rows] if len(w.rows) else w.rows
    ok = node >= 0
    awaited[node[ok]] = w.awaited[ok]
    return_ns[node[ok]] = w.return_ns[ok]
    own_ns[node[ok]] = w.own_ns[ok]
    for p, m in w.more.items():
        if node[p] >= 0:
            more[int(node[p])] = list(m)
    tails = op_tails(trace)  # an operator's tail that waited (no recorded call did)
    at = np.flatnonzero(h.op_tail >= 0)
    if len(at):
        t = h.op_tail[at]
        awaited[at], return_ns[at], own_ns[at] = (
            tails.awaited[t],
            tails.return_ns[t],
            tails.own_ns[t],
        )
    u = untraced(trace)
    ends_wait = np.flatnonzero(u.before < 0)
    first = len(g.ts_ns) - len(u)  # the untraced waits come last among the GPU rows
    for x in ends_wait.tolist():  # the call waits for the untraced stretch itself
        c = int(node[u.by[x]])
        if c >= 0:
            awaited[c] = first + x
            return_ns[c] = h.end_ns[c] - u.end_ns[x]
            own_ns[c] = int(np.clip(return_ns[c], 0, h.end_ns[c] - h.ts_ns[c]))
            more.pop(c, None)
    return CallWaits(awaited, more, return_ns, own_ns)


@dataclass(frozen=True, eq=False)
class CallWaits:
    """Per host call: the GPU activity it waits for (-1: it does not wait), a device sync's
    other streams, its return time after that activity ended and its own cost."""

    awaited: np.ndarray
    more: dict[int, list[int]]
    return_ns: np.ndarray
    own_ns: np.ndarray
