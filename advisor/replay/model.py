"""The step model: a dependency graph of the steady steps, built once per trace.

Nodes are the host's *runtime calls* that matter to the GPU (launches of kernels and copies,
synchronizations, blocking copies) and the GPU activities (kernels, copies, memsets). Every
other host time (Python, operator dispatch, other runtime calls) is the *gap* before the next
call on the same thread: host work, replayed as measured unless a fix shrinks it.

Edges (each with an offset in ns):

- **host order**: a call starts ``gap`` after the previous call on its thread ended;
- **hand-off**: a thread that sat idle while another thread of the process worked (the main
  thread during the autograd thread's backward, and back) starts when the other thread's last
  call before it ended, plus the measured delay;
- **launch**: a GPU activity starts no earlier than its launch call started plus the launch
  latency (correlation id);
- **stream order**: no earlier than the previous activity on its stream ended;
- **cross-stream wait**: an activity that started well after both of those, right after an
  activity on another stream of its device ended (cudaStreamWaitEvent / event waits), waits
  for that one;
- **sync**: ``cuda{Stream,Device,Event}Synchronize`` and blocking copies (``cudaMemcpy``, and
  ``cudaMemcpyAsync`` whose copy finished before the call returned) end when the GPU work they
  waited for ended, plus the measured return time.

Each node's *binding* edge (the one that decided its measured start) carries the measured
offset; the others their natural minimum (the trace's launch latency, zero gap). Delays the
graph cannot explain stay as measured delays on the binding edge (``residual_ns``), so the
unchanged replay gives back the measured times; :func:`advisor.replay.engine.replay` with
``calibrated=False`` drops them, which measures how much of the step the graph explains.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from advisor.derive.runtime import CLOCK_TOL_NS, COPY_CALL_RE, DEVICE_SYNC_RE, SYNC_CALL_RE
from advisor.replay.structure import (
    chosen_steps,
    cross_stream_waits,
    in_replayed_steps,
    replay_order,
    step_anchors,
)
from advisor.trace.model import Trace
from advisor.trace.names import name_mask

HANDOFF_NS = 2_000_000  # a thread resuming this soon after another thread's call: a hand-off
CROSS_STREAM_MIN_NS = 5_000  # an unexplained start delay above this looks for another stream
THROTTLE_MIN_NS = 50_000  # a launch call this long (and THROTTLE_X x the median) may be
THROTTLE_X = 10.0  # ...waiting for the launch queue
NEG = -(1 << 62)


@dataclass
class Graph:
    """Per-node arrays (host calls ``h_*``, GPU activities ``g_*``) and the replay order."""

    # host calls (rows of trace.runtime in ``h_rt``)
    h_rt: np.ndarray
    h_tid: np.ndarray  # thread code (per process and thread id)
    h_traw: np.ndarray  # the trace's own tid
    h_ts: np.ndarray
    h_end: np.ndarray
    h_prev: np.ndarray  # previous call on the same thread, -1
    h_gap: np.ndarray  # host time before this call on its thread (offset of the host edge)
    h_q: np.ndarray  # hand-off: call on another thread, -1
    h_qoff: np.ndarray
    h_await: np.ndarray  # GPU activity a sync waits for, -1
    h_await_more: dict[int, list[int]]  # a device sync: the last activity of each other stream
    h_tail: np.ndarray  # return time after that activity ended
    h_base: np.ndarray  # duration when nothing is to wait for
    h_sync: np.ndarray  # bool: a synchronization or blocking copy
    h_fixed: np.ndarray  # bool: before the replayed window (kept at measured times)
    # GPU activities: kernels rows then memcpy rows (``g_src`` 0/1, ``g_row``)
    g_src: np.ndarray
    g_row: np.ndarray
    g_ts: np.ndarray
    g_end: np.ndarray
    g_stream: np.ndarray  # device * 2**32 + stream
    g_kind: np.ndarray  # 0 comm, 1 kernel, 2 memcpy, 3 memset
    g_launch: np.ndarray  # host call index, -1
    g_offl: np.ndarray
    g_prev: np.ndarray
    g_offp: np.ndarray
    g_dep: np.ndarray
    g_offd: np.ndarray
    g_resid: np.ndarray  # the measured delay nothing explains (on the binding edge)
    g_bind: np.ndarray  # 0 launch, 1 stream, 2 cross-stream, -1 none (kept at its time)
    g_fixed: np.ndarray
    order: list[int]  # event codes: host start i, n_h + GPU j, n_h + n_g + sync end i
    order_one: list[int]  # the events of the step closest to the median only
    one_step: int  # that step's index
    # steps (steady): boundaries and the host anchors that place them in the replay
    bounds: np.ndarray  # step starts then the last end (len n_steps + 1)
    anchor: np.ndarray  # the main thread's last call before each boundary, -1
    anchor_off: np.ndarray  # the boundary is this long after its end (or start)
    anchor_end: np.ndarray  # bool: measured from the call's end (it ended before the boundary)
    last_gpu: int  # GPU activity that ends the last step, -1
    last_gpu_off: int
    launch_latency_ns: int
    main_tid: int
    start_ns: int  # the window's start
    h_origin: (
        np.ndarray
    )  # start of each call's step: a thread's first call in it starts h_gap after it
    chosen: np.ndarray  # bool per step: replayed (the others keep their measured times)
    g_key: np.ndarray  # step * n_streams + stream code of each activity launched in a step, -1
    n_streams: int

    @property
    def n_h(self) -> int:
        return len(self.h_ts)

    @property
    def n_g(self) -> int:
        return len(self.g_ts)

    def kernel_nodes(self, rows: np.ndarray) -> np.ndarray:
        """GPU node indices of ``trace.kernels`` rows (those in the graph)."""
        return self._nodes(0, rows)

    def memcpy_nodes(self, rows: np.ndarray) -> np.ndarray:
        return self._nodes(1, rows)

    def _nodes(self, src: int, rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        if rows.dtype == bool:
            rows = np.flatnonzero(rows)
        m = self.g_src == src
        idx = np.flatnonzero(m)
        pos = np.searchsorted(self.g_row[idx], rows)  # g_row is sorted within a source
        pos = np.clip(pos, 0, max(len(idx) - 1, 0))
        ok = (len(idx) > 0) & (self.g_row[idx[pos]] == rows) if len(idx) else np.zeros(0, bool)
        return idx[pos[ok]] if len(idx) else np.zeros(0, dtype=np.int64)

    def host_nodes(self, runtime_rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(runtime_rows, dtype=np.int64)
        pos = np.clip(np.searchsorted(self.h_rt, rows), 0, max(self.n_h - 1, 0))
        ok = self.h_rt[pos] == rows if self.n_h else np.zeros(0, bool)
        return pos[ok]


def graph(trace: Trace) -> Graph:
    """The step graph of ``trace`` (a steady trace: see :func:`advisor.derive.steps.steady_trace`),
    built once."""
    return trace.memo("replay_graph", lambda: _build(trace))  # type: ignore[no-any-return]


def _empty() -> Graph:
    """The graph of a trace with nothing to replay (no host calls or no GPU work)."""
    from dataclasses import fields

    vals: dict[str, object] = {}
    for f in fields(Graph):
        t = str(f.type)
        vals[f.name] = (
            {}
            if t.startswith("dict")
            else []
            if t.startswith("list")
            else np.zeros(
                0,
                dtype=bool
                if f.name in ("h_sync", "h_fixed", "g_fixed", "anchor_end")
                else np.int64,
            )
            if "ndarray" in t
            else (1 if f.name == "n_streams" else -1)
        )
    vals["chosen"] = np.zeros(0, dtype=bool)
    vals["one_step"] = -1
    return Graph(**vals)  # type: ignore[arg-type]


def _build(trace: Trace) -> Graph:
    rt, k, mc = trace.runtime, trace.kernels, trace.memcpy
    if not len(rt) or not (len(k) or len(mc)):
        return _empty()
    st = trace.steps
    lo = int(st["ts_ns"].min()) if len(st) else 0
    # ---- GPU activities
    kcols = ["ts_ns", "end_ns", "device", "stream", "launch_idx"]
    kk = k[kcols].assign(
        src=0, row=np.arange(len(k)), kind=np.where(k["is_comm"].to_numpy(dtype=bool), 0, 1)
    )
    mm = mc[kcols].assign(
        src=1,
        row=np.arange(len(mc)),
        kind=np.where(mc["kind"].astype(str).to_numpy() == "Memset", 3, 2),
    )
    g = pd.concat([p for p in (kk, mm) if len(p)] or [kk], ignore_index=True)
    g_ts = g["ts_ns"].to_numpy(np.int64)
    g_end = g["end_ns"].to_numpy(np.int64)
    dev = g["device"].fillna(-1).to_numpy(np.int64)
    strm = pd.to_numeric(g["stream"], errors="coerce").fillna(-1).to_numpy(np.int64)
    g_stream = dev * (1 << 32) + strm
    li = g["launch_idx"].to_numpy(np.int64)

    # ---- host calls that matter: launches, syncs, blocking copies
    n_rt = len(rt)
    launched = np.zeros(n_rt, dtype=bool)
    launched[li[li >= 0]] = True
    is_sync_call = name_mask(rt["name"], SYNC_CALL_RE) if n_rt else np.zeros(0, bool)
    is_copy_call = name_mask(rt["name"], COPY_CALL_RE) if n_rt else np.zeros(0, bool)
    keep = launched | is_sync_call
    h_rt = np.flatnonzero(keep)
    if not len(h_rt):
        return _empty()
    h_ts = rt["ts_ns"].to_numpy(np.int64)[h_rt]
    h_end = rt["end_ns"].to_numpy(np.int64)[h_rt]
    pid = rt["pid"].to_numpy()[h_rt]
    tid_raw = rt["tid"].to_numpy()[h_rt]
    # a thread is (pid, tid); sort host calls by start
    o = np.lexsort((h_end, h_ts))
    h_rt, h_ts, h_end, pid, tid_raw = h_rt[o], h_ts[o], h_end[o], pid[o], tid_raw[o]
    # thread codes in (process, thread) order: one integer key per pair (a unique over
    # columns sorts structured rows, far slower)
    pcode = pd.factorize(pid)[0].astype(np.int64)
    tcode = pd.factorize(tid_raw)[0].astype(np.int64)
    _, h_tid = np.unique(pcode * (int(tcode.max()) + 1) + tcode, return_inverse=True)
    h_tid = h_tid.astype(np.int64).ravel()
    n_h = len(h_ts)
    rt_to_h = np.full(n_rt, -1, dtype=np.int64)
    rt_to_h[h_rt] = np.arange(n_h)

    # host order and gaps, per thread
    h_prev = np.full(n_h, -1, dtype=np.int64)
    for t in np.unique(h_tid):
        idx = np.flatnonzero(h_tid == t)
        h_prev[idx[1:]] = idx[:-1]
    prev_end = np.where(h_prev >= 0, h_end[np.clip(h_prev, 0, None)], h_ts)
    h_gap = np.maximum(h_ts - prev_end, 0)

    # hand-offs between threads of one process
    h_q = np.full(n_h, -1, dtype=np.int64)
    threads = np.unique(h_tid)
    if len(threads) > 1:
        best_end = np.full(n_h, NEG, dtype=np.int64)
        for t in threads:
            idx = np.flatnonzero(h_tid == t)
            ends = np.maximum.accumulate(h_end[idx])
            j = np.searchsorted(ends, h_ts, side="right") - 1
            cand = np.where(j >= 0, idx[np.clip(j, 0, None)], -1)
            other = (h_tid != t) & (cand >= 0)
            other &= pcode == pcode[np.clip(cand, 0, None)]
            ce = h_end[np.clip(cand, 0, None)]
            better = other & (ce > best_end)
            h_q[better], best_end[better] = cand[better], ce[better]
        ok = h_q >= 0
        off = h_ts - best_end
        own = h_ts - prev_end
        ok &= (off <= HANDOFF_NS) & ((h_prev < 0) | ((best_end > prev_end) & (own > 3 * off)))
        h_q[~ok] = -1
    h_qoff = np.where(h_q >= 0, h_ts - h_end[np.clip(h_q, 0, None)], 0)
    h_gap = np.where(h_q >= 0, 0, h_gap)  # the thread waited for the other one

    # ---- GPU edges
    ok_l = (li >= 0) & (li < n_rt)
    g_launch = np.full(len(li), -1, dtype=np.int64)
    g_launch[ok_l] = rt_to_h[li[ok_l]]
    n_g = len(g_ts)
    lts = np.where(g_launch >= 0, h_ts[np.clip(g_launch, 0, None)], NEG)
    lat = g_ts - lts
    good = (g_launch >= 0) & (lat >= 0)
    L0 = int(np.percentile(lat[good], 5)) if good.any() else 0
    go = np.lexsort((g_ts, g_stream))
    g_prev = np.full(n_g, -1, dtype=np.int64)
    same = np.r_[False, g_stream[go][1:] == g_stream[go][:-1]] if n_g else np.zeros(0, bool)
    g_prev[go[same]] = go[np.flatnonzero(same) - 1]
    pend = np.where(g_prev >= 0, g_end[np.clip(g_prev, 0, None)], NEG)
    c_launch = np.where(g_launch >= 0, lts + L0, NEG)
    natural = np.maximum(c_launch, pend)
    resid = np.where(natural > NEG, g_ts - natural, 0)
    # cross-stream waits: a late start right after another stream's activity on the device
    g_dep = np.full(n_g, -1, dtype=np.int64)
    late = np.flatnonzero(resid > CROSS_STREAM_MIN_NS)
    if len(late):
        g_dep[late] = cross_stream_waits(late, g_ts, g_end, g_stream)
    dend = np.where(g_dep >= 0, g_end[np.clip(g_dep, 0, None)], NEG)
    natural = np.maximum(natural, dend)
    resid = np.where(natural > NEG, np.maximum(g_ts - natural, 0), 0)
    cands = np.stack([c_launch, pend, dend])
    g_bind = np.where(natural > NEG, np.argmax(cands, axis=0), -1)
    g_offl = np.full(n_g, L0, dtype=np.int64)
    g_offp = np.zeros(n_g, dtype=np.int64)
    g_offd = np.zeros(n_g, dtype=np.int64)
    # the binding edge gives back the measured start (also when the clocks disagree)
    g_offl = np.where(g_bind == 0, g_ts - lts, np.minimum(g_offl, g_ts - lts))
    g_offp = np.where(g_bind == 1, g_ts - pend, np.minimum(0, g_ts - pend))
    g_offd = np.where(g_bind == 2, g_ts - dend, np.minimum(0, g_ts - dend))
    g_offl = np.where(g_launch >= 0, g_offl, 0)
    g_offp = np.where(g_prev >= 0, g_offp, 0)
    g_offd = np.where(g_dep >= 0, g_offd, 0)

    # ---- syncs and blocking copies: what they waited for
    h_await = np.full(n_h, -1, dtype=np.int64)
    await_more: dict[int, list[int]] = {}
    is_device_sync = name_mask(rt["name"], DEVICE_SYNC_RE)[h_rt] if n_h else np.zeros(0, bool)
    sync_rows = np.flatnonzero(is_sync_call[h_rt]) if n_h else np.zeros(0, np.int64)
    # a launch that takes far longer than launches do waits for a slot in a full launch queue:
    # it returns when earlier GPU work ends (back-pressure from the GPU)
    lcall = np.flatnonzero(launched[h_rt] & ~is_copy_call[h_rt]) if n_h else np.zeros(0, np.int64)
    if len(lcall):
        ld = (h_end - h_ts)[lcall]
        slow = lcall[ld > max(THROTTLE_MIN_NS, THROTTLE_X * float(np.median(ld)))]
        sync_rows = np.union1d(sync_rows, slow)
    if len(sync_rows) and n_g:
        lo_order = np.argsort(np.where(g_launch >= 0, lts, g_ts), kind="stable")
        lsorted = np.where(g_launch >= 0, lts, g_ts)[lo_order]
        for i in sync_rows.tolist():
            n = np.searchsorted(lsorted, h_ts[i], side="left")
            cand = lo_order[max(0, n - 4000) : n]
            e = g_end[cand]
            e = np.where(e <= h_end[i] + CLOCK_TOL_NS, e, NEG)
            if len(e) and e.max() > h_ts[i]:
                h_await[i] = cand[int(np.argmax(e))]
                if is_device_sync[i]:  # every stream's last activity launched before it
                    cs = g_stream[cand]
                    last = pd.Series(np.arange(len(cand))).groupby(cs).last().to_numpy()
                    more = [int(cand[x]) for x in last if cand[x] != h_await[i] and e[x] > NEG]
                    if more:
                        await_more[i] = more
    copy_h = np.flatnonzero(is_copy_call[h_rt]) if n_h else np.zeros(0, np.int64)
    if len(copy_h):
        own = np.full(n_h, -1, dtype=np.int64)
        ok = g_launch >= 0
        own[g_launch[ok]] = np.flatnonzero(ok)
        oc = own[copy_h]
        has = oc >= 0
        ce = g_end[np.clip(oc, 0, None)]
        # a device-to-host copy into pageable memory (or by cudaMemcpy) blocks the host by
        # CUDA's rules; any copy that ended before its call returned did too
        dtoh = np.zeros(n_g, dtype=bool)
        if len(mc):
            mk = (g["src"].to_numpy() == 1) & (g["kind"].to_numpy() == 2)
            rows = g["row"].to_numpy()[mk]
            dtoh[np.flatnonzero(mk)] = (mc["kind"].astype(str).to_numpy()[rows] == "DtoH") & (
                mc["dst"].astype(str).to_numpy()[rows] != "Pinned"
            )
        blocking = has & (ce > h_ts[copy_h])
        blocking &= (ce <= h_end[copy_h] + CLOCK_TOL_NS) | dtoh[np.clip(oc, 0, None)]
        h_await[copy_h[blocking]] = oc[blocking]
    h_sync = h_await >= 0
    aend = g_end[np.clip(h_await, 0, None)] if n_g else np.zeros(n_h, np.int64)
    # the return time after the awaited work ended (negative where the GPU clock runs ahead
    # of the host's: the measured end is kept); with nothing to wait for, the call's own time
    h_tail = np.where(h_sync, h_end - aend, 0)
    waited = h_sync & (aend > h_ts)
    h_base = np.where(waited, np.clip(h_tail, 0, h_end - h_ts), h_end - h_ts)

    # ---- the replayed window: the steady steps
    hi = int(st["end_ns"].max()) if len(st) else 0
    chosen = chosen_steps(st, np.concatenate([h_ts, g_ts]))
    h_in, h_origin = in_replayed_steps(st, chosen, h_ts)
    h_fixed = ~h_in
    # a thread's first call in a replayed step follows the step's start (host time before it
    # in the step is host work a fix may shrink)
    first = (~h_fixed) & ((h_prev < 0) | h_fixed[np.clip(h_prev, 0, None)]) & (h_q < 0)
    h_prev[first] = -1
    h_gap[first] = np.maximum(h_ts[first] - h_origin[first], 0)
    g_fixed = np.where(
        g_launch >= 0, h_fixed[np.clip(g_launch, 0, None)], ~in_replayed_steps(st, chosen, g_ts)[0]
    )
    if not len(st):
        h_fixed[:] = True
        g_fixed[:] = True

    # which step launched each activity (its GPU time counts against that step's throughput)
    sc, _ = pd.factorize(g_stream)
    n_streams = max(int(sc.max()) + 1, 1) if n_g else 1
    when = np.where(g_launch >= 0, lts, g_ts)
    sidx = (
        np.searchsorted(st["ts_ns"].to_numpy(np.int64), when, side="right") - 1
        if len(st)
        else np.full(n_g, -1)
    )
    inside = (sidx >= 0) & (when < hi) & ~g_fixed & chosen[np.clip(sidx, 0, None)]
    g_key = np.where(inside, sidx * n_streams + sc, -1).astype(np.int64)
    order = replay_order(
        h_tid, h_ts, h_end, h_fixed, h_sync, h_await, g_ts, g_launch, g_fixed, g_stream
    )
    # the events of the one step closest to the median alone (the range ends replay only it)
    h_k = (
        np.searchsorted(st["ts_ns"].to_numpy(np.int64), h_ts, side="right") - 1
        if len(st)
        else np.full(n_h, -1)
    )
    mid = (
        int(np.argmin(np.abs(st["dur_ns"].to_numpy() - np.median(st["dur_ns"].to_numpy()))))
        if len(st)
        else -1
    )
    g_k = np.where(g_launch >= 0, h_k[np.clip(g_launch, 0, None)], sidx)
    codes = np.asarray(order, dtype=np.int64)
    ev_k = np.where(
        codes < n_h,
        h_k[np.clip(codes, 0, n_h - 1)],
        np.where(
            codes < n_h + n_g,
            g_k[np.clip(codes - n_h, 0, max(n_g - 1, 0))],
            h_k[np.clip(codes - n_h - n_g, 0, n_h - 1)],
        ),
    )
    order_one = codes[ev_k == mid].tolist() if len(codes) else []
    bounds, anchor, anchor_off, anchor_end, last_gpu, last_off, main_tid = step_anchors(
        trace, st, h_tid, h_ts, h_end, tid_raw, g_launch, g_end, g_fixed
    )
    return Graph(
        h_rt=h_rt,
        h_tid=h_tid,
        h_traw=tid_raw,
        h_ts=h_ts,
        h_end=h_end,
        h_prev=h_prev,
        h_gap=h_gap,
        h_q=h_q,
        h_qoff=h_qoff,
        h_await=h_await,
        h_await_more=await_more,
        h_tail=h_tail,
        h_base=h_base,
        h_sync=h_sync,
        h_fixed=h_fixed,
        g_src=g["src"].to_numpy(np.int64),
        g_row=g["row"].to_numpy(np.int64),
        g_ts=g_ts,
        g_end=g_end,
        g_stream=g_stream,
        g_kind=g["kind"].to_numpy(np.int64),
        g_launch=g_launch,
        g_offl=g_offl,
        g_prev=g_prev,
        g_offp=g_offp,
        g_dep=g_dep,
        g_offd=g_offd,
        g_resid=resid,
        g_bind=g_bind,
        g_fixed=g_fixed,
        order=order,
        order_one=order_one,
        one_step=mid,
        bounds=bounds,
        anchor=anchor,
        anchor_off=anchor_off,
        anchor_end=anchor_end,
        last_gpu=last_gpu,
        last_gpu_off=last_off,
        launch_latency_ns=L0,
        main_tid=main_tid,
        start_ns=lo,
        h_origin=h_origin,
        chosen=chosen,
        g_key=g_key,
        n_streams=n_streams,
    )
