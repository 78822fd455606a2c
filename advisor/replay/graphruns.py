"""CUDA graphs in the replay: the runs of launches a graph holds (:func:`graph_runs`), what
ends one (:func:`run_breaks`), and what a run changes in the step (:func:`apply_runs`), for the
fixes that launch work as graphs (:class:`~advisor.replay.fixes.GraphLaunch`,
:class:`~advisor.replay.graphfix.StepGraph`), which hand themselves over as :class:`Captured`.

A graph holds a run of launches on one thread: a host call that is not one of them ends the run
(:func:`graph_runs`), and a call a graph cannot hold (:func:`run_breaks`: a synchronize, a copy
to or from host memory the host waits for) is never one of them. In a run each launch costs
``GRAPH_LAUNCH_NS`` and no longer waits for a slot in the launch queue, the host time between
two launches (and a hand-off between launching threads) keeps ``host_keep`` of itself except
inside the fix's keep ranges, and each activity follows the one before it on its stream from
the same run without waiting for the host.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from advisor.arrays import as_rows, unique_ints
from advisor.derive.timeline import covered_by, union
from advisor.replay.model import Graph, graph
from advisor.replay.mods import Mods
from advisor.trace.model import Trace

GRAPH_LAUNCH_NS = 1_000  # a kernel node's share of one cudaGraphLaunch
GRAPH_GAP_NS = 1_000  # gap between consecutive kernels of a graph


class Captured(Protocol):
    """What a fix that launches work as CUDA graphs names: its kernels (rows of
    ``trace.kernels``) and copies (rows of ``trace.memcpy``), and the host ranges whose time
    stays (``keep_starts``/``keep_ends``, ns; None: none)."""

    @property
    def kernels(self) -> Any: ...
    @property
    def memcpy(self) -> Any: ...
    @property
    def keep_starts(self) -> Any: ...
    @property
    def keep_ends(self) -> Any: ...


def graph_runs(trace: Trace, fix: Captured, gr: Graph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What ``fix`` captures in ``gr``: its launch calls (host nodes), those whose host gap
    before them lies inside a run (the previous call on the thread is one of them, in the same
    step: each step launches its own graphs), and those whose hand-off from another thread
    comes from one of them."""
    g, h = gr.gpu, gr.host
    nodes = np.concatenate(
        [gr.kernel_nodes(as_rows(fix.kernels)), gr.memcpy_nodes(as_rows(fix.memcpy))]
    )
    nodes = nodes[~g.fixed[nodes]]
    calls = g.launch[nodes]
    calls = unique_ints(calls[calls >= 0])
    calls = calls[~h.fixed[calls] & ~_breaks(trace, gr)[calls]]
    if not len(calls):
        return calls, calls, calls
    mine = np.zeros(gr.n_h, dtype=bool)
    mine[calls] = True
    inner = calls[_joins(gr, mine, calls, h.prev[calls])]
    handed = calls[_joins(gr, mine, calls, h.handoff[calls])]
    return calls, inner, handed


def _joins(gr: Graph, mine: np.ndarray, calls: np.ndarray, before: np.ndarray) -> np.ndarray:
    """Per call: the host call ``before`` it (-1: none) is captured too, in the same step."""
    b = np.clip(before, 0, None)
    step = _step_of(gr)
    return (before >= 0) & mine[b] & (step[b] == step[calls])


def _step_of(gr: Graph) -> np.ndarray:
    """Per host node: the step it starts in (its index among the step boundaries)."""
    return np.searchsorted(gr.steps.bounds_ns, gr.host.ts_ns, side="right")


def apply_runs(
    trace: Trace, fix: Captured, gr: Graph, mods: Mods, host_keep: float, fusion: bool
) -> None:
    """Apply ``fix`` (see the module doc); ``fusion``: every launch stays a call of its
    own at its measured cost, and the GPU work still waits for it."""
    calls, inner, handed = graph_runs(trace, fix, gr)
    if not len(calls):
        return
    h, g = gr.host, gr.gpu
    if host_keep < 1.0:  # host time between two launches of a run, less what a graph keeps
        lo = h.end_ns[h.prev[inner]]
        kept = _kept_ns(fix, lo, h.ts_ns[inner])
        cut = np.maximum(np.minimum(mods.gap_ns[inner], h.ts_ns[inner] - lo) - kept, 0)
        mods.gap_ns[inner] -= (cut * (1.0 - host_keep)).astype(np.int64)
        lo = h.end_ns[h.handoff[handed]]
        kept = _kept_ns(fix, lo, h.ts_ns[handed])
        cut = np.maximum(mods.handoff_ns[handed] - kept, 0)
        mods.handoff_ns[handed] -= (cut * (1.0 - host_keep)).astype(np.int64)
    if fusion:
        return
    mods.awaited[calls] = -1  # no wait for a slot in the queue, nor for a copy it holds
    mods.host_dur_ns[calls] = np.minimum(mods.host_dur_ns[calls], GRAPH_LAUNCH_NS)
    # each activity follows the one before it on its stream when both are in one run
    nodes = np.flatnonzero(np.isin(g.launch, calls) & ~g.fixed)
    run = _run_of(gr, calls)
    prev = g.prev[nodes]
    ok = prev >= 0
    same = np.zeros(len(nodes), dtype=bool)
    pl = g.launch[np.clip(prev, 0, None)]
    same[ok] = (pl[ok] >= 0) & (run[np.clip(pl[ok], 0, None)] == run[g.launch[nodes[ok]]])
    same &= run[g.launch[nodes]] >= 0
    chained = nodes[same]
    mods.launch[chained] = -1  # the graph's own order, not the host, starts them
    mods.prev_ns[chained] = np.minimum(mods.prev_ns[chained], GRAPH_GAP_NS)


def _run_of(gr: Graph, calls: np.ndarray) -> np.ndarray:
    """Per host node: the run of captured launches it belongs to (-1: not captured). A run is
    a stretch of ``calls`` on one thread, in one step, with no other host call between them."""
    h = gr.host
    run = np.full(gr.n_h, -1, dtype=np.int64)
    mine = np.zeros(gr.n_h, dtype=bool)
    mine[calls] = True
    o = calls[np.lexsort((h.ts_ns[calls], h.thread[calls]))]  # by thread, in start order
    head = ~_joins(gr, mine, o, h.prev[o])  # the previous call on its thread is not one
    run[o] = np.cumsum(head)
    return run


def _kept_ns(fix: Captured, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per interval [lo, hi): the time inside ``fix``'s keep ranges (on any thread)."""
    if fix.keep_starts is None or not len(lo):
        return np.zeros(len(lo), dtype=np.int64)
    ks = np.asarray(fix.keep_starts, dtype=np.int64).ravel()
    ke = np.asarray(fix.keep_ends, dtype=np.int64).ravel()
    if not len(ks):
        return np.zeros(len(lo), dtype=np.int64)
    us, ue = union(ks, ke)
    return covered_by(us, ue, lo, np.maximum(hi, lo))


def run_breaks(trace: Trace) -> np.ndarray:
    """Rows of ``trace.runtime``: the calls in the replayed steps that end a run of captured
    launches because a graph cannot hold them (:func:`_breaks`)."""
    gr = graph(trace)
    h = gr.host
    return h.runtime_row[_breaks(trace, gr) & ~h.fixed]


def _breaks(trace: Trace, gr: Graph) -> np.ndarray:
    """Per host node: a call a graph cannot hold, one that waits for the GPU because the host
    needs it to: a synchronize (stream, device, event), a synchronous ``cudaMemcpy``, or a copy
    call that waited for a copy to or from host memory it reads or writes (device-to-host, or
    from pageable memory). Not a launch that waited for a slot in a full launch queue, nor a
    device-to-device or pinned copy that happened to finish within its call: a graph holds
    those."""

    def make() -> np.ndarray:
        from advisor.derive.runtime import SYNC_CALL_RE
        from advisor.trace.names import name_mask

        h, g = gr.host, gr.gpu
        out = h.waits & ~h.slow_launch
        if not out.any():
            return out
        rt = trace.runtime
        rows = h.runtime_row
        sync = name_mask(rt["name"], SYNC_CALL_RE)[rows]
        plain = (rt["name"].astype(str).to_numpy()[rows] == "cudaMemcpy") | (
            rt["name"].astype(str).to_numpy()[rows] == "hipMemcpy"
        )
        a = np.clip(h.awaited, 0, None)
        host_mem = np.zeros(gr.n_h, dtype=bool)
        mc = trace.memcpy
        is_copy = (h.awaited >= 0) & (g.source[a] == 1) if gr.n_g else host_mem
        if is_copy.any() and len(mc):
            r = g.row[a[is_copy]]
            kind = mc["kind"].astype(str).to_numpy()[r]
            src = mc["src"].astype(str).to_numpy()[r]
            host_mem[is_copy] = (kind == "DtoH") | ((kind == "HtoD") & (src != "Pinned"))
        return np.asarray(out & (sync | plain | host_mem), dtype=bool)

    return trace.memo("graphruns.run_breaks", make)
