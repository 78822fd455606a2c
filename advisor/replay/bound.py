"""What bounds each step: the critical path of the step graph, by kind of work.

The path is walked back from each step's end through the edge that decided every node's
measured time (:mod:`advisor.replay.model`): a sync that waited leads to the GPU work it waited
for, a GPU activity to its launch, the previous activity on its stream or the one it waited
for on another stream, a host call to the previous call on its thread (or the thread it waited
for). Each stretch of the path is counted as:

- ``host``: host calls, Python and other host work between them, launch latency;
- ``gpu``: computation kernels (and gaps between kernels on a stream);
- ``comm``: communication kernels moving data;
- ``copies``: memcpy and memset;
- ``peer``: communication kernels waiting for a peer (one-rank estimate: the part beyond the
  shortest instance of the same collective, see :mod:`advisor.derive.peerwait`).

Where the path ends: at the step's end, or, when the step's GPU cycle is longer than its host
cycle (:mod:`advisor.replay.steptime`), at the end of the GPU work the step issued, which then
runs past the step's end and holds up the next step.

``run.bound`` gives the median shares over the three replayed steady steps closest to the
median step and the largest (``by``); HTA's
critical-path analysis calls a step CPU-bound or GPU-bound in the same way.

The bound must agree with the evidence the trace shows without the critical path (the GPU busy
share, how far launches run ahead of their kernels): :func:`consistent` states the rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from advisor.derive.quality import timeline_complete
from advisor.derive.timeline import covered_by, main_device, union
from advisor.replay.fixes import comm_wait_ns
from advisor.replay.model import Bind, Graph, Work, graph
from advisor.replay.steptime import carried_wait_ns, gpu_cycle_ns, own_work
from advisor.trace.model import Trace

KINDS = ("host", "gpu", "comm", "copies", "peer")
WALK_STEPS = 3  # the replayed steps closest to the median whose critical paths are walked
SLACK_PCT = 10.0  # consistent(): the GPU-side share may exceed the busy share by this much
GPU_BUSY_PCT = 90.0  # consistent(): a GPU idle less than a tenth of the step...
LEAD_X = 10.0  # ...with launches this many launch latencies ahead of their kernels is the bound
_GPU_KIND = {Work.COMM: "comm", Work.KERNEL: "gpu", Work.MEMCPY: "copies", Work.MEMSET: "copies"}


def step_bound(trace: Trace) -> dict[str, Any] | None:
    """``run.bound``: ``by`` (the largest share), ``shares_pct`` (median per kind over the
    steady steps) and ``per_step`` (step number and shares); None without GPU work or steps."""
    gr = graph(trace)
    g, st = gr.gpu, gr.steps
    if not gr.n_g or not gr.n_h or len(st.bounds_ns) < 2 or not (st.anchor >= 0).any():
        return None
    wait = np.zeros(gr.n_g, dtype=np.int64)
    comm = np.flatnonzero(g.kind == Work.COMM)
    if len(comm):
        wait[comm] = np.minimum(comm_wait_ns(trace, g.row[comm]), g.end_ns[comm] - g.ts_ns[comm])
    rows = []
    steps = trace.steps["step"].to_numpy()
    d = np.diff(st.bounds_ns)
    ks = np.flatnonzero(st.chosen)
    ks = np.sort(ks[np.argsort(np.abs(d[ks] - np.median(d[ks])), kind="stable")[:WALK_STEPS]])
    lists = _Lists(gr, wait)
    # where each step's path ends: at the end of its own GPU work when that is the longer
    # cycle (advisor.replay.steptime), else at its end
    gpu_cycle = gpu_cycle_ns(gr, lists.g_ts, lists.g_end, g.end_ns - g.ts_ns)
    host_cycle = d - carried_wait_ns(
        gr, gr.host.own_ns.tolist(), lists.h_ts, lists.h_end, lists.g_end
    )
    for k in ks.tolist():
        got = _walk(gr, lists, k, from_gpu=bool(gpu_cycle[k] > host_cycle[k]))
        if got is None:
            continue
        total = sum(got.values())
        if total <= 0:
            continue
        rows.append(
            (
                int(steps[k]) if k < len(steps) else k,
                {c: round(100.0 * got[c] / total, 1) for c in KINDS},
            )
        )
    if not rows:
        return None
    med = {c: round(float(np.median([r[1][c] for r in rows])), 1) for c in KINDS}
    return {
        "by": max(KINDS, key=lambda c: med[c]),
        "shares_pct": med,
        "per_step": [{"step": s, **sh} for s, sh in rows],
    }


class _Lists:
    """The graph's arrays the walk reads, as lists (the walk indexes one node at a time)."""

    def __init__(self, gr: Graph, wait: np.ndarray) -> None:
        h, g = gr.host, gr.gpu
        self.h_ts, self.h_end = h.ts_ns.tolist(), h.end_ns.tolist()
        self.g_ts, self.g_end = g.ts_ns.tolist(), g.end_ns.tolist()
        self.awaited, self.h_prev, self.handoff = (
            h.awaited.tolist(),
            h.prev.tolist(),
            h.handoff.tolist(),
        )
        self.kind, self.bind = g.kind.tolist(), g.bind.tolist()
        self.launch, self.g_prev, self.dep = g.launch.tolist(), g.prev.tolist(), g.dep.tolist()
        self.wait = wait.tolist()


def _walk(gr: Graph, ls: _Lists, k: int, from_gpu: bool) -> dict[str, int] | None:
    st = gr.steps
    lo, hi = int(st.bounds_ns[k]), int(st.bounds_ns[k + 1])
    got = dict.fromkeys(KINDS, 0)

    def add(kind: str, a: int, b: int) -> None:
        a, b = max(a, lo), min(b, hi)
        if b > a:
            got[kind] += b - a

    h_ts, h_end, g_ts, g_end = ls.h_ts, ls.h_end, ls.g_ts, ls.g_end
    a = int(st.anchor[k + 1])
    tail = [j for pair in own_work(gr).last[k] for j in pair]  # (may run past the step's end)
    j = max(tail, key=lambda x: g_end[x]) if tail and from_gpu else -1
    if j >= 0 and g_end[j] > hi:
        state, i, t = "g", j, g_end[j]
    elif k + 1 == len(st.bounds_ns) - 1 and st.last_gpu >= 0:
        state, i, t = "g", st.last_gpu, g_end[st.last_gpu]
    elif a >= 0:
        state, i = ("he", a) if st.anchor_at_end[k + 1] else ("hs", a)
        t = h_end[a] if state == "he" else h_ts[a]
    else:
        return None
    add("host", t, hi)
    for _ in range(gr.n_h + gr.n_g + 2):
        if t <= lo:
            break
        if state == "he":  # a host call, from its end
            aw = ls.awaited[i]
            if aw >= 0 and g_end[aw] > h_ts[i]:
                add("host", g_end[aw], h_end[i])
                state, i, t = "g", aw, g_end[aw]
                continue
            add("host", h_ts[i], h_end[i])
            state, t = "hs", h_ts[i]
            continue
        if state == "hs":  # a host call, from its start
            p, q = ls.h_prev[i], ls.handoff[i]
            pe = h_end[p] if p >= 0 else None
            qe = h_end[q] if q >= 0 else None
            if qe is not None and (pe is None or qe >= pe):
                add("host", qe, h_ts[i])
                state, i, t = "he", q, qe
            elif pe is not None:
                add("host", pe, h_ts[i])
                state, i, t = "he", p, pe
            else:
                add("host", lo, h_ts[i])
                break
            continue
        # a GPU activity, from its end
        kind = _GPU_KIND.get(ls.kind[i], "gpu")
        s, e = g_ts[i], g_end[i]
        w = ls.wait[i]
        if kind == "comm" and w > 0:
            add("peer", s, s + w)
            add("comm", s + w, e)
        else:
            add(kind, s, e)
        b = ls.bind[i]
        if b == Bind.LAUNCH and ls.launch[i] >= 0:
            h = ls.launch[i]
            add("host", h_ts[h], s)  # launch latency: the GPU waited for the host
            state, i, t = "hs", h, h_ts[h]
        elif b == Bind.STREAM and ls.g_prev[i] >= 0:
            j = ls.g_prev[i]
            add(kind if kind != "comm" else "gpu", g_end[j], s)
            i, t = j, g_end[j]
        elif b == Bind.CROSS_STREAM and ls.dep[i] >= 0:
            j = ls.dep[i]
            add("gpu", g_end[j], s)
            i, t = j, g_end[j]
        else:
            add("host", lo, s)
            break
    return got


@dataclass(frozen=True)
class Evidence:
    """What the trace shows about the bound without the critical path (see :func:`consistent`)."""

    gpu_busy_pct: float | None  # GPU busy share of the steady steps (``run.gpu_busy_pct``)
    launch_lead_ms: float | None  # median time from a launch call's start to its kernel's
    launch_latency_ms: float  # the trace's launch latency (5th percentile of the same)
    complete: bool = True  # the trace recorded the whole GPU timeline (run.trace_quality)
    # share of the steps the main GPU ran work or had launched work waiting to start (see
    # gpu_occupied_pct); None: not measured
    gpu_occupied_pct: float | None = None


def evidence(trace: Trace, gpu_busy_pct: float | None) -> Evidence:
    """The :class:`Evidence` of ``trace`` (a steady trace), with its ``run.gpu_busy_pct``."""
    return Evidence(
        gpu_busy_pct=gpu_busy_pct,
        launch_lead_ms=launch_lead_ms(trace),
        launch_latency_ms=graph(trace).launch_latency_ns / 1e6,
        complete=timeline_complete(trace),
        gpu_occupied_pct=gpu_occupied_pct(trace),
    )


def gpu_occupied_pct(trace: Trace) -> float | None:
    """The share of the steady steps during which the main GPU ran work or had launched work
    waiting to start: per activity, from its launch call's start plus the launch latency (its
    own start when later, or when it has no recorded launch) to its end. A gap between kernels
    whose next kernel was already launched is the GPU's own time (setup between kernels, a
    dependency inside the device), not the host's."""
    gr = graph(trace)
    dev = main_device(trace)
    st = trace.steps
    if dev is None or not len(st) or not gr.n_g:
        return None
    g = gr.gpu
    on = (g.stream >> 32) == dev
    if not on.any():
        return None
    lat = gr.launch_latency_ns
    ts, end, launch = g.ts_ns[on], g.end_ns[on], g.launch[on]
    ready = np.where(launch >= 0, gr.host.ts_ns[np.clip(launch, 0, None)] + lat, ts)
    us, ue = union(np.minimum(ready, ts), end)
    lo, hi = st["ts_ns"].to_numpy(), st["end_ns"].to_numpy()
    total = float((hi - lo).sum())
    return round(100.0 * float(covered_by(us, ue, lo, hi).sum()) / total, 2) if total > 0 else None


def launch_lead_ms(trace: Trace) -> float | None:
    """How far launches run ahead of their GPU work: the median, over the replayed steps' own
    launched activities, of the activity's start minus its launch call's start (None: none)."""
    gr = graph(trace)
    g = gr.gpu
    own = np.flatnonzero((g.step_key >= 0) & (g.launch >= 0))
    if not len(own):
        return None
    lead = g.ts_ns[own] - gr.host.ts_ns[g.launch[own]]
    return round(float(np.median(lead)) / 1e6, 3)


def consistent(bound: dict[str, Any], ev: Evidence) -> str | None:
    """Whether ``run.bound`` agrees with the evidence; None when it does, else why not.

    The rule, in general terms, for a trace that recorded its whole GPU timeline (no CUDA-graph
    replays with unrecorded kernels, no lost launches or dropped events: otherwise nothing is
    said):

    - the path cannot be on the GPU for longer than the GPU works: its GPU-side share (gpu,
      comm, copies, peer) is at most the GPU's occupied share (busy, or with launched work
      waiting to start: :func:`gpu_occupied_pct`; else the busy share) plus SLACK_PCT points
      (the path is the median of three steps);
    - when the GPU is busy for at least GPU_BUSY_PCT of the step and launches run ahead of their
      kernels by at least LEAD_X times the launch latency (the typical kernel waited in the
      queue behind other GPU work, not for the host), the step is GPU-bound: ``by`` is a
      GPU-side kind.
    """
    if not ev.complete:
        return None
    sh = bound.get("shares_pct") or {}
    device = sum(float(sh.get(k, 0.0)) for k in KINDS if k != "host")
    busy = ev.gpu_busy_pct
    cap = max(busy, ev.gpu_occupied_pct or 0.0) if busy is not None else None
    if cap is not None and device > cap + SLACK_PCT:
        return f"GPU-side share {device:.1f}% above the GPU's occupied share {cap:.1f}%"
    lead, lat = ev.launch_lead_ms, ev.launch_latency_ms
    ahead = lead is not None and lead >= LEAD_X * max(lat, 0.0) and lead > 0
    if busy is not None and busy >= GPU_BUSY_PCT and ahead and bound.get("by") == "host":
        return f"GPU busy {busy:.1f}% and launches {lead:.3f} ms ahead, yet host-bound"
    return None
