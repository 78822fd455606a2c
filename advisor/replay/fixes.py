"""Fixes as transformations of the step graph (what a detector's recommendation would change).

Each fix changes a :class:`~advisor.replay.engine.Mods` at one of three levels: ``"mid"`` (the
detector's estimate), ``"low"`` and ``"high"`` (the ends of its range where the effect itself is
uncertain, e.g. a kernel speedup). Rows are rows of the trace's own tables (``trace.kernels``,
``trace.memcpy``, ``trace.runtime``), as integer positions or boolean masks.

- :class:`ScaleGpu`: these kernels/copies run ``speedup`` times faster (``inf``: gone).
- :class:`ShrinkHost`: host time inside these ranges (per thread) keeps ``keep`` of itself
  (0: removed), launch and other calls inside included, and a waiting call's own cost (not its
  wait: that is the GPU's); the GPU work stays.
- :class:`DropSyncs`: these runtime calls no longer wait for the GPU.
- :class:`AsyncCopies`: the calls launching these copies no longer wait for them.
- :class:`GraphLaunch`: these kernels (and copies) are launched as CUDA graphs: their launch
  calls cost ``GRAPH_LAUNCH_NS`` (:mod:`advisor.replay.graphruns`), the kernels follow each other on their stream without waiting
  for the host, within each run of launches a sync or another call does not break.
- :class:`~advisor.replay.graphfix.StepGraph`: the whole step in CUDA graphs (low end: compile's
  fusion; in :mod:`advisor.replay.graphfix`), both applied by :mod:`advisor.replay.graphruns`.
- :class:`HideComm`: the transfer part of these collectives overlaps compute (the waiting for
  a peer stays).
- :class:`Combined`: several fixes at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from advisor.arrays import as_rows, unique_ints
from advisor.derive.timeline import covered_by, union
from advisor.replay.graphruns import apply_runs
from advisor.replay.model import Graph
from advisor.replay.mods import Mods
from advisor.trace.model import Trace

Level = Literal["mid", "low", "high"]


class Fix:
    """Base class: ``apply`` changes ``mods`` for ``level``; ``uncertain`` fixes get a range."""

    label = "fix"

    @property
    def uncertain(self) -> bool:
        return False

    def apply(self, trace: Trace, gr: Graph, mods: Mods, level: Level) -> None:
        raise NotImplementedError


def _pick(mid: float, low: float | None, high: float | None, level: Level) -> float:
    if level == "low" and low is not None:
        return low
    if level == "high" and high is not None:
        return high
    return mid


@dataclass
class ScaleGpu(Fix):
    """These GPU activities run ``speedup`` times faster; ``low``/``high``: the range ends
    (the speedups giving the smallest and largest saving)."""

    kernels: Any = None
    memcpy: Any = None
    speedup: float = 2.0
    low: float | None = None
    high: float | None = None
    label: str = "scale GPU work"

    @property
    def uncertain(self) -> bool:
        return self.low is not None or self.high is not None

    def apply(self, trace: Trace, gr: Graph, mods: Mods, level: Level) -> None:
        s = _pick(self.speedup, self.low, self.high, level)
        nodes = np.concatenate(
            [gr.kernel_nodes(as_rows(self.kernels)), gr.memcpy_nodes(as_rows(self.memcpy))]
        )
        if s == float("inf"):
            mods.gpu_dur_ns[nodes] = 0
        elif s > 0:
            mods.gpu_dur_ns[nodes] = (mods.gpu_dur_ns[nodes] / s).astype(np.int64)


@dataclass
class ShrinkHost(Fix):
    """Host time inside [starts, ends) keeps ``keep`` of itself; ``tids``: the trace's thread
    id of each range (None: every thread)."""

    starts: Any
    ends: Any
    tids: Any = None
    keep: float = 0.0
    low: float | None = None  # keep at the low-saving end (larger than ``keep``)
    high: float | None = None
    label: str = "shrink host time"

    @property
    def uncertain(self) -> bool:
        return self.low is not None or self.high is not None

    def apply(self, trace: Trace, gr: Graph, mods: Mods, level: Level) -> None:
        keep = _pick(self.keep, self.low, self.high, level)
        for plan in self._plan(gr):
            idx, cut_gap, calls, cut_call, am, cut_anchor, hq, cut_q, late, late_call = plan[:10]
            waited, cut_own = plan[10:]
            # a waiting call's own cost is host time; its wait is not
            cut = np.minimum(cut_own, mods.own_ns[waited])
            mods.own_ns[waited] -= (cut * (1 - keep)).astype(np.int64)
            cut = np.minimum(cut_gap, mods.gap_ns[idx])
            mods.gap_ns[idx] -= (cut * (1 - keep)).astype(np.int64)
            shorter = (cut_call * (1 - keep)).astype(np.int64)
            mods.host_dur_ns[calls] -= shorter
            # work a call put in the queue as it returned comes that much sooner
            mods.launch_ns[late] -= shorter[late_call]
            # host time between a step boundary's anchor call and the boundary
            if am.any():
                cut = np.minimum(cut_anchor, mods.anchor_ns[am])
                mods.anchor_ns[am] -= (cut * (1 - keep)).astype(np.int64)
            # a hand-off's delay is host work on the resuming thread
            if len(hq):
                cut = np.minimum(cut_q, mods.handoff_ns[hq])
                mods.handoff_ns[hq] -= (cut * (1 - keep)).astype(np.int64)

    def _plan(self, gr: Graph) -> list[tuple[np.ndarray, ...]]:
        """What the ranges cover in ``gr``, whatever the level: per thread, the calls, the
        host time of their gaps and calls inside the ranges, the anchors and hand-offs. Made
        once per fix and graph, kept in the graph's cache (with the fix, so its id stays its own);
        a fix is not changed once applied."""
        plans = gr.cache.shrink_plans
        got = plans.get(id(self))
        if got is None or got[0] is not self:
            got = plans[id(self)] = (self, self._make_plan(gr))
        return got[1]

    def _make_plan(self, gr: Graph) -> list[tuple[np.ndarray, ...]]:
        st = np.asarray(self.starts, dtype=np.int64).ravel()
        en = np.asarray(self.ends, dtype=np.int64).ravel()
        if not len(st) or not gr.n_h:
            return []
        tids = None if self.tids is None else np.asarray(self.tids).ravel()
        groups = (
            [(None, np.ones(len(st), bool))]
            if tids is None
            else [(t, tids == t) for t in unique_ints(tids)]
        )
        h = gr.host
        prev_end = np.where(h.prev >= 0, h.end_ns[np.clip(h.prev, 0, None)], h.origin_ns)
        plan: list[tuple[np.ndarray, ...]] = []
        for t, m in groups:
            us, ue = union(st[m], en[m])
            on = (~h.fixed) & (True if t is None else h.trace_tid == t)
            idx = np.flatnonzero(on)
            if not len(idx):
                continue
            gap_lo = np.minimum(prev_end[idx], h.ts_ns[idx])
            cut_gap = covered_by(us, ue, gap_lo, h.ts_ns[idx])
            cut_call = covered_by(us, ue, h.ts_ns[idx], h.end_ns[idx])
            plain = ~h.waits[idx]
            a = gr.steps.anchor
            am = (a >= 0) & gr.steps.anchor_at_end
            am &= on[np.clip(a, 0, None)]
            cut_anchor = (
                covered_by(us, ue, h.end_ns[a[am]], gr.steps.bounds_ns[am]) if am.any() else a[am]
            )
            hq = idx[h.handoff[idx] >= 0]
            cut_q = np.zeros(0, dtype=np.int64)
            if len(hq):
                qend = h.end_ns[h.handoff[hq]]
                cut_q = covered_by(us, ue, np.minimum(qend, h.ts_ns[hq]), h.ts_ns[hq])
            calls = idx[plain]
            late, late_call = _enqueued_on_return(gr, calls)
            waited = idx[~plain]
            ws = h.ts_ns[waited]
            cut_own = covered_by(us, ue, ws, ws + h.own_ns[waited])
            plan.append(
                (idx, cut_gap, calls, cut_call[plain], am, cut_anchor, hq, cut_q, late, late_call)
                + (waited, cut_own)
            )
        return plan


def _enqueued_on_return(gr: Graph, calls: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The GPU activities that ``calls`` launched and that started after their call returned,
    with each one's position in ``calls``: a launch call far slower than the others (lazy
    loading of a kernel's module, a full launch queue) puts its work in the queue as it
    returns, so the work follows the call's end."""
    g, h = gr.gpu, gr.host
    pos = np.full(gr.n_h, -1, dtype=np.int64)
    pos[calls] = np.arange(len(calls))
    has = g.launch >= 0
    lc = np.clip(g.launch, 0, None)
    late = np.flatnonzero(has & (pos[lc] >= 0) & (g.ts_ns >= h.end_ns[lc]) & h.slow_launch[lc])
    return late, pos[lc[late]]


@dataclass
class DropSyncs(Fix):
    """These runtime calls (rows of ``trace.runtime``) stop waiting for the GPU."""

    runtime: Any
    label: str = "drop syncs"

    def apply(self, trace: Trace, gr: Graph, mods: Mods, level: Level) -> None:
        _drop(gr, mods, gr.host_nodes(as_rows(self.runtime)))


def _drop(gr: Graph, mods: Mods, nodes: np.ndarray) -> None:
    nodes = nodes[gr.host.waits[nodes] & ~gr.host.fixed[nodes]]
    mods.awaited[nodes] = -1
    mods.host_dur_ns[nodes] = mods.own_ns[nodes]


@dataclass
class AsyncCopies(Fix):
    """The calls launching these copies (rows of ``trace.memcpy``) return without waiting
    (pinned memory and ``non_blocking=True``); ``speedup``: the copies' own speedup."""

    memcpy: Any
    speedup: float = 1.0
    low: float | None = None
    high: float | None = None
    label: str = "asynchronous copies"

    @property
    def uncertain(self) -> bool:
        return self.low is not None or self.high is not None

    def apply(self, trace: Trace, gr: Graph, mods: Mods, level: Level) -> None:
        nodes = gr.memcpy_nodes(as_rows(self.memcpy))
        launch = mods.launch[nodes]
        _drop(gr, mods, unique_ints(launch[launch >= 0]))
        s = _pick(self.speedup, self.low, self.high, level)
        if s > 1:
            mods.gpu_dur_ns[nodes] = (mods.gpu_dur_ns[nodes] / s).astype(np.int64)


@dataclass
class GraphLaunch(Fix):
    """These kernels (rows of ``trace.kernels``) and copies (rows of ``trace.memcpy``) launched
    as CUDA graphs; ``host_keep``: the share of the host time between their launches that
    remains (captured Python and dispatch go away with a graph; 1.0 keeps it).

    A graph holds a run of launches on one thread: a host call that is not one of them (a
    sync, a blocking copy, another launch) ends the run, and the next run is a graph of its
    own. In a run each launch call costs ``GRAPH_LAUNCH_NS`` (its share of one graph launch;
    a launch call that waited for a full launch queue no longer waits), the host time
    between two launches of the run, and the hand-off from one launching thread to another,
    keeps ``host_keep`` of itself except inside the ``keep_starts``/``keep_ends`` ranges
    (host work a graph does not hold: it stays), and each activity follows the one before it
    on its stream from the same run without waiting for the host."""

    kernels: Any
    host_keep: float = 1.0
    low: float | None = None  # host_keep at the low-saving end
    high: float | None = None
    label: str = "CUDA graphs"
    memcpy: Any = None
    keep_starts: Any = None  # host ranges whose time stays (what a graph does not hold)
    keep_ends: Any = None

    @property
    def uncertain(self) -> bool:
        return self.low is not None or self.high is not None

    def apply(self, trace: Trace, gr: Graph, mods: Mods, level: Level) -> None:
        keep = _pick(self.host_keep, self.low, self.high, level)
        apply_runs(trace, self, gr, mods, keep, False)


@dataclass
class HideComm(Fix):
    """The transfer part of these collectives (rows of ``trace.kernels``) hidden under compute;
    ``wait_ns``: each one's waiting for a peer (default: the one-rank estimate of
    :func:`advisor.derive.peerwait.single_rank_transfer_ns`)."""

    kernels: Any
    wait_ns: Any = None
    share: float = 1.0  # of the transfer hidden
    low: float | None = None  # share hidden at the low-saving end
    label: str = "overlap communication"

    @property
    def uncertain(self) -> bool:
        return self.low is not None

    def apply(self, trace: Trace, gr: Graph, mods: Mods, level: Level) -> None:
        share = _pick(self.share, self.low, None, level)
        rows = as_rows(self.kernels)
        nodes = gr.kernel_nodes(rows)
        if not len(nodes):
            return
        if self.wait_ns is not None:
            wait = np.asarray(self.wait_ns, dtype=np.int64).ravel()
            keep_ns = dict(zip(rows.tolist(), wait.tolist(), strict=False))
            w = np.array([keep_ns.get(int(r), 0) for r in gr.gpu.row[nodes]], dtype=np.int64)
        else:
            w = comm_wait_ns(trace, gr.gpu.row[nodes])
        d = mods.gpu_dur_ns[nodes]
        w = np.minimum(np.maximum(w, 0), d)
        mods.gpu_dur_ns[nodes] = (w + (d - w) * (1.0 - share)).astype(np.int64)


def comm_wait_ns(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """One-rank estimate of each collective kernel's waiting for a peer (``trace.kernels`` rows)."""
    wait: np.ndarray = trace.memo("fixes.comm_wait", lambda: _comm_wait(trace))
    return wait[np.asarray(rows, dtype=np.int64)]


def _comm_wait(trace: Trace) -> np.ndarray:
    """:func:`comm_wait_ns` of every kernel (0 for those not collectives), once per trace."""
    from advisor.derive.peerwait import single_rank_transfer_ns

    k = trace.kernels
    comm = k["is_comm"].to_numpy(dtype=bool)
    ci = np.flatnonzero(comm)
    wait = np.zeros(len(k), dtype=np.int64)
    if not len(ci):
        return wait
    d = k["dur_ns"].to_numpy(np.int64)[ci]
    tr = single_rank_transfer_ns(
        k["name"].astype(str).to_numpy()[ci], np.asarray(k["stream"].to_numpy()[ci]), d
    )
    wait[ci] = d - tr
    return wait


@dataclass
class Combined(Fix):
    """Several fixes at once, applied in order."""

    fixes: Sequence[Fix] = field(default_factory=tuple)
    label: str = "all fixes"

    @property
    def uncertain(self) -> bool:
        return any(f.uncertain for f in self.fixes)

    def apply(self, trace: Trace, gr: Graph, mods: Mods, level: Level) -> None:
        for f in self.fixes:
            f.apply(trace, gr, mods, level)
