"""What the trace shows about the bound without the critical path, and the rule the bound
(:mod:`advisor.replay.bound`) must agree with: the GPU's busy and occupied shares, how far
launches run ahead of their kernels, and the host's own work (the step less its waits:
:func:`advisor.replay.steptime.host_own_ns`, ``run.host_own_pct``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from advisor.derive.quality import timeline_complete
from advisor.derive.timeline import covered_by, main_device, union
from advisor.replay.model import Work, graph
from advisor.replay.steptime import host_own_ns
from advisor.trace.model import Trace

DEVICE_KINDS = ("gpu", "comm", "copies", "peer")  # the GPU's own work, as the trace measured it
SLACK_PCT = 10.0  # consistent(): a share of the path may exceed the evidence by this much
GPU_BUSY_PCT = 85.0  # consistent(): a GPU busy this share of the step...
LEAD_X = 10.0  # ...with launches this many launch latencies ahead of their kernels is the bound


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
    # share of the steps the host's main thread worked, not waiting (``run.host_own_pct``)
    host_own_pct: float | None = None


def evidence(trace: Trace, gpu_busy_pct: float | None) -> Evidence:
    """The :class:`Evidence` of ``trace`` (a steady trace), with its ``run.gpu_busy_pct``."""
    return Evidence(
        gpu_busy_pct=gpu_busy_pct,
        launch_lead_ms=launch_lead_ms(trace),
        launch_latency_ms=graph(trace).launch_latency_ns / 1e6,
        # (the untraced waits are apart in the bound and out of the busy share)
        complete=timeline_complete(trace, but=("untraced",)),
        gpu_occupied_pct=gpu_occupied_pct(trace),
        host_own_pct=host_own_pct(trace),
    )


def host_own_pct(trace: Trace) -> float | None:
    """``run.host_own_pct``: the share of the steady steps' wall time the host's main thread
    worked, the steps less the time it waited for the device in the waits the trace shows
    (:mod:`advisor.derive.waits`, the untraced waits included); None without host calls to
    read or steps."""
    gr = graph(trace)
    st = gr.steps
    if not gr.n_h or len(st.bounds_ns) < 2 or st.main_thread < 0:
        return None
    total = float(st.bounds_ns[-1] - st.bounds_ns[0])
    return round(100.0 * float(host_own_ns(gr).sum()) / total, 2) if total > 0 else None


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
    on = ((g.stream >> 32) == dev) & (g.kind != Work.UNTRACED)
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
    own = np.flatnonzero((g.step_key >= 0) & (g.launch >= 0) & (g.kind != Work.UNTRACED))
    if not len(own):
        return None
    lead = g.ts_ns[own] - gr.host.ts_ns[g.launch[own]]
    return round(float(np.median(lead)) / 1e6, 3)


def consistent(bound: dict[str, Any], ev: Evidence) -> str | None:
    """Whether ``run.bound`` agrees with the evidence; None when it does, else why not.

    The rule, in general terms, for a trace that recorded its whole GPU timeline (no CUDA-graph
    replays with unrecorded kernels, no lost launches or dropped events: otherwise nothing is
    said; waits on work the trace does not show are a share of their own in the bound, and out
    of the busy share):

    - the path cannot be on the GPU for longer than the GPU works: its GPU-side share (gpu,
      comm, copies, peer) is at most the GPU's occupied share (busy, or with launched work
      waiting to start: :func:`gpu_occupied_pct`; else the busy share) plus SLACK_PCT points
      (the path is the median of three steps);
    - nor on the host for longer than the host works: its host share is at most the host's own
      work (``run.host_own_pct``) plus SLACK_PCT points;
    - when the GPU is busy for at least GPU_BUSY_PCT of the step and launches run ahead of their
      kernels by at least LEAD_X times the launch latency (the typical kernel waited in the
      queue behind other GPU work, not for the host), the step is not host-bound.
    """
    if not ev.complete:
        return None
    sh = bound.get("shares_pct") or {}
    device = sum(float(sh.get(k, 0.0)) for k in DEVICE_KINDS)
    busy = ev.gpu_busy_pct
    cap = max(busy, ev.gpu_occupied_pct or 0.0) if busy is not None else None
    if cap is not None and device > cap + SLACK_PCT:
        return f"GPU-side share {device:.1f}% above the GPU's occupied share {cap:.1f}%"
    host = float(sh.get("host", 0.0))
    if ev.host_own_pct is not None and host > ev.host_own_pct + SLACK_PCT:
        return f"host share {host:.1f}% above the host's own work {ev.host_own_pct:.1f}%"
    lead, lat = ev.launch_lead_ms, ev.launch_latency_ms
    ahead = lead is not None and lead >= LEAD_X * max(lat, 0.0) and lead > 0
    if busy is not None and busy >= GPU_BUSY_PCT and ahead and bound.get("by") == "host":
        return f"GPU busy {busy:.1f}% and launches {lead:.3f} ms ahead, yet host-bound"
    return None
