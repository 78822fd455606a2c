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
from advisor.derive.runtime import CLOCK_TOL_NS, COPY_CALL_RE, DEVICE_SYNC_RE, SYNC_CALL_RE
from advisor.replay.structure import cross_stream_waits
from advisor.trace.model import Trace
from advisor.trace.names import name_mask

HANDOFF_NS = 2_000_000  # a thread's first call this soon after another thread's call: a hand-off
HANDOFF_IDLE_X = 3  # a thread idle this many times longer than the delay after another's call
CROSS_STREAM_MIN_NS = 5_000  # an unexplained start delay above this looks for another stream
THROTTLE_MIN_NS = 50_000  # a launch call this long (and THROTTLE_X x the median) may be
THROTTLE_X = 10.0  # ...waiting for the launch queue
SYNC_LOOKBACK = 4000  # a sync looks for what it waits for among the activities issued last
NEG = -(1 << 62)  # "no such time" (an edge that does not exist)


class Work(enum.IntEnum):
    """What a GPU activity is."""

    COMM = 0  # a collective's kernel
    KERNEL = 1
    MEMCPY = 2
    MEMSET = 3


class Bind(enum.IntEnum):
    """A GPU activity's binding edge: the one that decided its measured start."""

    NONE = -1  # no edge: it keeps its measured start
    LAUNCH = 0  # its launch call's start plus the launch latency
    STREAM = 1  # the end of the previous activity on its stream
    CROSS_STREAM = 2  # the end of the activity on another stream it waited for


@dataclass(frozen=True, eq=False)
class GpuRows:
    """The GPU activities as measured: ``trace.kernels`` rows, then ``trace.memcpy`` rows."""

    source: np.ndarray  # 0: trace.kernels, 1: trace.memcpy
    row: np.ndarray  # row in that table
    ts_ns: np.ndarray
    end_ns: np.ndarray
    stream: np.ndarray  # device * 2**32 + stream
    kind: np.ndarray  # Work
    launch_rt: np.ndarray  # the runtime row that launched it, -1
    pageable_dtoh: np.ndarray  # bool: a device-to-host copy into pageable memory


def gpu_activities(trace: Trace) -> GpuRows:
    """Every kernel, copy and memset of the trace, with the runtime row that launched it."""
    k, mc = trace.kernels, trace.memcpy
    cols = ["ts_ns", "end_ns", "device", "stream", "launch_idx"]
    is_comm = k["is_comm"].to_numpy(dtype=bool)
    kk = k[cols].assign(
        src=0, row=np.arange(len(k)), kind=np.where(is_comm, Work.COMM, Work.KERNEL)
    )
    is_memset = mc["kind"].astype(str).to_numpy() == "Memset"
    mm = mc[cols].assign(
        src=1, row=np.arange(len(mc)), kind=np.where(is_memset, Work.MEMSET, Work.MEMCPY)
    )
    g = pd.concat([p for p in (kk, mm) if len(p)] or [kk], ignore_index=True)
    dev = g["device"].fillna(-1).to_numpy(np.int64)
    strm = pd.to_numeric(g["stream"], errors="coerce").fillna(-1).to_numpy(np.int64)
    source, row, kind = (g[c].to_numpy(np.int64) for c in ("src", "row", "kind"))
    dtoh = np.zeros(len(g), dtype=bool)
    if len(mc):
        mk = (source == 1) & (kind == Work.MEMCPY)
        rows = row[mk]
        dtoh[np.flatnonzero(mk)] = (mc["kind"].astype(str).to_numpy()[rows] == "DtoH") & (
            mc["dst"].astype(str).to_numpy()[rows] != "Pinned"
        )
    return GpuRows(
        source=source,
        row=row,
        ts_ns=g["ts_ns"].to_numpy(np.int64),
        end_ns=g["end_ns"].to_numpy(np.int64),
        stream=dev * (1 << 32) + strm,
        kind=kind,
        launch_rt=g["launch_idx"].to_numpy(np.int64),
        pageable_dtoh=dtoh,
    )


@dataclass(frozen=True, eq=False)
class HostRows:
    """The runtime calls that matter to the GPU, in start order."""

    runtime_row: np.ndarray  # row of trace.runtime
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
    """The calls that launched GPU work (``launch_rt``: runtime rows) and the syncs."""
    rt = trace.runtime
    n_rt = len(rt)
    launched = np.zeros(n_rt, dtype=bool)
    launched[launch_rt[launch_rt >= 0]] = True
    is_sync = name_mask(rt["name"], SYNC_CALL_RE) if n_rt else np.zeros(0, bool)
    is_copy = name_mask(rt["name"], COPY_CALL_RE) if n_rt else np.zeros(0, bool)
    rows = np.flatnonzero(launched | is_sync)
    ts = rt["ts_ns"].to_numpy(np.int64)[rows]
    end = rt["end_ns"].to_numpy(np.int64)[rows]
    pid = rt["pid"].to_numpy()[rows]
    tid = rt["tid"].to_numpy()[rows]
    o = np.lexsort((end, ts))
    rows, ts, end, pid, tid = rows[o], ts[o], end[o], pid[o], tid[o]
    # thread codes in (process, thread) order: one integer key per pair (a unique over
    # columns sorts structured rows, far slower)
    pcode = pd.factorize(pid)[0].astype(np.int64)
    tcode = pd.factorize(tid)[0].astype(np.int64)
    if len(rows):
        _, thread = np.unique(pcode * (int(tcode.max()) + 1) + tcode, return_inverse=True)
    else:
        thread = np.zeros(0, dtype=np.int64)
    of_runtime = np.full(n_rt, -1, dtype=np.int64)
    of_runtime[rows] = np.arange(len(rows))
    return HostRows(
        runtime_row=rows,
        ts_ns=ts,
        end_ns=end,
        process=pcode,
        thread=thread.astype(np.int64).ravel(),
        trace_tid=tid,
        is_sync=is_sync[rows],
        is_device_sync=name_mask(rt["name"], DEVICE_SYNC_RE)[rows] if len(rows) else is_sync[rows],
        is_copy=is_copy[rows],
        is_launch=launched[rows],
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
) -> tuple[np.ndarray, np.ndarray, int]:
    """Launch edges: each activity's launch call (-1), that call's start (NEG: none) and the
    launch latency: the 5th percentile of start minus launch over the activities launched onto
    an idle stream (the previous activity on the stream, ``prev_end``, ended before the launch
    call started). An activity queued behind other work starts when that work ends, so its
    start minus launch measures the queue, not the launch: on a GPU-bound trace where the host
    runs far ahead, every activity is queued. Over all activities where none was launched
    onto an idle stream."""
    ok = (launch_rt >= 0) & (launch_rt < len(of_runtime))
    launch = np.full(len(launch_rt), -1, dtype=np.int64)
    launch[ok] = of_runtime[launch_rt[ok]]
    launch_ts = np.where(launch >= 0, h_ts[np.clip(launch, 0, None)], NEG)
    lat = g_ts - launch_ts
    good = (launch >= 0) & (lat >= 0)
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


def sync_waits(
    h: HostRows, waiting: np.ndarray, g: GpuRows, launch: np.ndarray, issued_ns: np.ndarray
) -> tuple[np.ndarray, dict[int, list[int]]]:
    """Syncs: for each waiting call (host indices), the GPU activity issued before it that
    ended last before the call returned (-1: none ended after the call started); a device sync
    also waits for the last such activity of every other stream.

    An activity was issued before the call when its launch call started before it
    (``issued_ns``: the launch's start). One whose launch is not in the trace (work queued
    before the trace's host events begin, a lost launch) was issued at some time before it
    started: it counts when it started before the call returned, since it ran while the host
    waited and no recorded call issued it."""
    awaited = np.full(len(h.ts_ns), -1, dtype=np.int64)
    more: dict[int, list[int]] = {}
    if not len(waiting) or not len(g.ts_ns):
        return awaited, more
    has = launch >= 0
    by_issue = np.flatnonzero(has)[np.argsort(issued_ns[has], kind="stable")]
    issued_sorted = issued_ns[by_issue]
    by_start = np.flatnonzero(~has)[np.argsort(g.ts_ns[~has], kind="stable")]
    start_sorted = g.ts_ns[by_start]
    for i in waiting.tolist():
        n = np.searchsorted(issued_sorted, h.ts_ns[i], side="left")
        cand = by_issue[max(0, n - SYNC_LOOKBACK) : n]
        n = np.searchsorted(start_sorted, h.end_ns[i], side="left")
        if n:
            cand = np.concatenate([cand, by_start[max(0, n - SYNC_LOOKBACK) : n]])
            cand = cand[np.argsort(issued_ns[cand], kind="stable")]
        e = g.end_ns[cand]
        e = np.where(e <= h.end_ns[i] + CLOCK_TOL_NS, e, NEG)
        if len(e) and e.max() > h.ts_ns[i]:
            awaited[i] = cand[int(np.argmax(e))]
            if h.is_device_sync[i]:  # every stream's last activity launched before it
                last = pd.Series(np.arange(len(cand))).groupby(g.stream[cand]).last().to_numpy()
                w = [int(cand[x]) for x in last if cand[x] != awaited[i] and e[x] > NEG]
                if w:
                    more[i] = w
    return awaited, more


def blocking_copies(h: HostRows, g: GpuRows, launch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Blocking copies: the copy calls that waited for their own copy (host indices) and that
    copy. By CUDA's rules a device-to-host copy into pageable memory (or by cudaMemcpy) blocks
    the host; any copy that ended before its call returned did too."""
    calls = np.flatnonzero(h.is_copy)
    if not len(calls):
        return calls, calls
    own = np.full(len(h.ts_ns), -1, dtype=np.int64)
    ok = launch >= 0
    own[launch[ok]] = np.flatnonzero(ok)
    copy = own[calls]
    ce = g.end_ns[np.clip(copy, 0, None)]
    blocking = (copy >= 0) & (ce > h.ts_ns[calls])
    blocking &= (ce <= h.end_ns[calls] + CLOCK_TOL_NS) | g.pageable_dtoh[np.clip(copy, 0, None)]
    return calls[blocking], copy[blocking]


def sync_times(
    awaited: np.ndarray, ts: np.ndarray, end: np.ndarray, g_end: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """A waiting call's return time after the awaited work ended (negative where the GPU clock
    runs ahead of the host's: the measured end is kept) and its own time (what it lasts with
    nothing to wait for: the return time, within the call; for every other call its
    duration)."""
    waits = awaited >= 0
    aend = g_end[np.clip(awaited, 0, None)] if len(g_end) else np.zeros(len(ts), np.int64)
    return_ns = np.where(waits, end - aend, 0)
    waited = waits & (aend > ts)
    own_ns = np.where(waited, np.clip(return_ns, 0, end - ts), end - ts)
    return return_ns, own_ns
