"""The replay: a discrete-event pass over the step graph, linear in its nodes.

Each node is visited once, in an order where every node it reads has been visited
(:func:`advisor.replay.structure.replay_order`): a host call starts at the latest of its thread's
previous call's end plus the host gap and the hand-off it waited for; a GPU activity starts at
the latest of its launch plus the latency, the previous activity on its stream and the
activity it waited for on another stream, and lasts its (possibly scaled) duration; a sync
ends at the latest of its own return time and the end of the GPU work it waited for plus the
measured return time. Nodes outside the steady steps keep their measured times.

A fix (:mod:`advisor.replay.fixes`) changes a :class:`Mods` (durations, gaps, edges) before the
pass; the step times are read off the replayed positions of the step boundaries' anchors.
What every replay of a graph reads (its arrays as lists, the one-step replay's nodes) is made
once, in the graph's :class:`~advisor.replay.cache.ReplayCache`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from advisor.replay.model import Graph
from advisor.replay.mods import Column, Mods, Times
from advisor.replay.scan import scan
from advisor.replay.scanplan import plan
from advisor.replay.steptime import carried_wait_ns, gpu_cycle_ns


@dataclass(frozen=True)
class Replayed:
    """A replay's result: the step boundaries and per-step GPU time (what the savings read),
    and every node's replayed times (as arrays on demand)."""

    bounds_ns: np.ndarray  # replayed step boundaries
    # per step: the main thread's waits for work issued before it (the last step: and the time
    # its own GPU work holds its end past its host side)
    carried_ns: np.ndarray
    gpu_cycle_ns: np.ndarray  # per step: the span of its own GPU work
    # every node's times (host starts and ends, GPU starts and ends), made on demand
    nodes: Callable[[], Times] = field(repr=False, compare=False)

    @property
    def host_start_ns(self) -> np.ndarray:
        return np.asarray(self.nodes()[0], dtype=np.int64)

    @property
    def host_end_ns(self) -> np.ndarray:
        return np.asarray(self.nodes()[1], dtype=np.int64)

    @property
    def gpu_start_ns(self) -> np.ndarray:
        return np.asarray(self.nodes()[2], dtype=np.int64)

    @property
    def gpu_end_ns(self) -> np.ndarray:
        return np.asarray(self.nodes()[3], dtype=np.int64)

    @property
    def host_cycle_ns(self) -> np.ndarray:
        """Per step: from its boundary to the next, less its waits for earlier work."""
        return np.diff(self.bounds_ns) - self.carried_ns

    @property
    def step_ns(self) -> np.ndarray:
        """Each step's replayed time: the longer of its host cycle and its GPU cycle
        (:mod:`advisor.replay.steptime`)."""
        return np.maximum(self.host_cycle_ns, self.gpu_cycle_ns)


def replay(gr: Graph, mods: Mods, one_step: bool = False) -> Replayed:
    """Replay the graph with ``mods`` (see the module doc); ``one_step``: only the step closest
    to the median (``gr.steps.median_step``), the others keep their measured times. The times
    are those of the event loop (:func:`replay_loop`), computed a run of nodes at a time
    (:mod:`advisor.replay.scan`) where its plan holds for ``mods``."""
    c = gr.cache
    if one_step not in c.scan_plans:
        c.scan_plans[one_step] = plan(gr, gr.order_one if one_step else gr.order)
    pl = c.scan_plans[one_step]
    times = scan(gr, pl, mods) if pl is not None else None
    if times is None:
        return replay_loop(gr, mods, one_step)
    own_ns = _as_list(mods.own_ns, *_unchanged(gr)["own_ns"])
    return _result(gr, mods, own_ns, times, lambda: times)


def replay_loop(gr: Graph, mods: Mods, one_step: bool = False) -> Replayed:
    """:func:`replay` as one pass over the events in replay order (the reference)."""
    n_h, n_g = gr.n_h, gr.n_g
    c = _loop_lists(gr)
    S, E, GS, GE = c["S"][:], c["E"][:], c["GS"][:], c["GE"][:]
    prev, q, gp, gd, origin = c["prev"], c["handoff"], c["gpu_prev"], c["dep"], c["origin"]
    ref = _unchanged(gr)
    m = {k: _as_list(getattr(mods, k), *ref[k]) for k in ref}
    gap, qoff, hdur = m["gap_ns"], m["handoff_ns"], m["host_dur_ns"]
    await_, base, tail = m["awaited"], m["own_ns"], m["return_ns"]
    gl, offl, offp, offd = m["launch"], m["launch_ns"], m["prev_ns"], m["dep_ns"]
    gdur = m["gpu_dur_ns"]
    # which calls wait for the GPU (a fix may drop some)
    if await_ is ref["awaited"][1]:
        sync = c["waits"]
    else:
        sync = (gr.host.waits & (mods.awaited >= 0)).tolist()
    hs_base = n_h + n_g
    more = gr.host.awaited_more
    neg = -(1 << 62)
    for ev in gr.order_one if one_step else gr.order:
        if ev < n_h:
            p = prev[ev]
            s = (E[p] if p >= 0 else origin[ev]) + gap[ev]
            qq = q[ev]
            if qq >= 0:
                t = E[qq] + qoff[ev]
                if t > s:
                    s = t
            S[ev] = s
            if not sync[ev]:
                E[ev] = s + hdur[ev]
        elif ev < hs_base:
            j = ev - n_h
            lch = gl[j]
            s = S[lch] + offl[j] if lch >= 0 else neg
            pp = gp[j]
            if pp >= 0:
                t = GE[pp] + offp[j]
                if t > s:
                    s = t
            dd = gd[j]
            if dd >= 0:
                t = GE[dd] + offd[j]
                if t > s:
                    s = t
            if s == neg:
                s = GS[j]
            GS[j] = s
            GE[j] = s + gdur[j]
        else:
            i = ev - hs_base
            a = await_[i]
            if a >= 0:  # (a dropped sync ended at its start's visit: its own time only)
                e = S[i] + base[i]
                t = GE[a] + tail[i]
                if t > e:
                    e = t
                if i in more:  # a device sync waits for every stream
                    for w in more[i]:
                        t = GE[w] + tail[i]
                        if t > e:
                            e = t
                E[i] = e
    return _result(gr, mods, base, (S, E, GS, GE), lambda: (S, E, GS, GE))


def one_step_of(gr: Graph, mods: Mods, full: Replayed) -> Replayed:
    """``replay(gr, mods, one_step=True)``, read off ``full`` (``replay(gr, mods)``) when the
    one step's events read no time that only the full replay changes (the steps replayed
    before it are not its neighbours, and ``mods`` adds no edge): both replays then compute
    the same times for its events, and the other nodes keep their measured times."""
    if not _one_step_apart(gr) or not _no_new_edges(gr, mods):
        return replay(gr, mods, True)
    S, E, GS, GE = full.nodes()
    vis_h, vis_g = _one_step_host(gr), _one_step_gpu(gr)
    c = _loop_lists(gr)
    hs, he = _Either(vis_h, S, c["S"]), _Either(vis_h, E, c["E"])
    gs, ge = _Either(vis_g, GS, c["GS"]), _Either(vis_g, GE, c["GE"])
    own_ns = _as_list(mods.own_ns, *_unchanged(gr)["own_ns"])
    return _result(
        gr,
        mods,
        own_ns,
        (hs, he, gs, ge),  # type: ignore[arg-type]
        lambda: (hs.merged(), he.merged(), gs.merged(), ge.merged()),
    )


def _result(
    gr: Graph,
    mods: Mods,
    own_ns: list[int],
    times: Times,
    nodes: Callable[[], Times],
) -> Replayed:
    """The :class:`Replayed` of replayed node ``times`` (host starts and ends, GPU starts and
    ends), with the host calls' own times the replay used."""
    hs, he, gs, ge = times
    bounds, tail_ns = _bounds(gr, mods, hs, he, ge)
    carried = carried_wait_ns(gr, own_ns, hs, he, ge)
    if len(carried):  # the last step's end held by its own GPU work is the GPU cycle's
        carried[-1] += tail_ns
    return Replayed(bounds, carried, gpu_cycle_ns(gr, gs, ge, mods.gpu_dur_ns), nodes)


class _Either:
    """Node times: the replayed ones where ``pick`` is set, else the measured ones."""

    def __init__(self, pick: np.ndarray, replayed: Column, measured: list[int]) -> None:
        self.pick, self.replayed, self.measured = pick, replayed, measured

    def __getitem__(self, i: int) -> int:
        return self.replayed[i] if self.pick[i] else self.measured[i]

    def __len__(self) -> int:
        return len(self.measured)

    def merged(self) -> list[int]:
        out = self.measured[:]
        for i in np.flatnonzero(self.pick).tolist():
            out[i] = int(self.replayed[i])
        return out


def _no_new_edges(gr: Graph, mods: Mods) -> bool:
    """``mods`` keeps or drops the graph's launch and sync edges, adds none."""
    return bool(
        ((mods.launch == gr.gpu.launch) | (mods.launch < 0)).all()
        and ((mods.awaited == gr.host.awaited) | (mods.awaited < 0)).all()
    )


def _one_step_apart(gr: Graph) -> bool:
    """No event of the one-step replay reads a node that the full replay visits and the
    one-step replay does not (checked once per graph, on every edge it has)."""
    c = gr.cache
    if c.one_step_apart is None:
        codes = np.asarray(gr.order, dtype=np.int64)
        n_h, n_g = gr.n_h, gr.n_g
        full_h = np.zeros(n_h + 1, dtype=bool)  # (a last False: reads of -1)
        full_g = np.zeros(n_g + 1, dtype=bool)
        full_h[codes[codes < n_h]] = True
        full_g[codes[(codes >= n_h) & (codes < n_h + n_g)] - n_h] = True
        only_h = full_h & ~np.r_[_one_step_host(gr), False]
        only_g = full_g & ~np.r_[_one_step_gpu(gr), False]
        h, g = np.flatnonzero(_one_step_host(gr)), np.flatnonzero(_one_step_gpu(gr))
        host, gpu = gr.host, gr.gpu
        more = [w for i in h.tolist() for w in host.awaited_more.get(i, ())]
        c.one_step_apart = not (
            only_h[host.prev[h]].any()
            or only_h[host.handoff[h]].any()
            or only_g[host.awaited[h]].any()
            or only_g[np.asarray(more, dtype=np.int64)].any()
            or only_h[gpu.launch[g]].any()
            or only_g[gpu.prev[g]].any()
            or only_g[gpu.dep[g]].any()
        )
    return c.one_step_apart


def _one_step_host(gr: Graph) -> np.ndarray:
    """bool per host call: replayed in the one-step replay (``gr.order_one``), once."""
    c = gr.cache
    if c.one_step_host is None:
        codes = np.asarray(gr.order_one, dtype=np.int64)
        seen = np.zeros(gr.n_h, dtype=bool)
        seen[codes[codes < gr.n_h]] = True
        seen[codes[codes >= gr.n_h + gr.n_g] - gr.n_h - gr.n_g] = True
        c.one_step_host = seen
    return c.one_step_host


def _one_step_gpu(gr: Graph) -> np.ndarray:
    """bool per GPU activity: replayed in the one-step replay (``gr.order_one``), once."""
    c = gr.cache
    if c.one_step_gpu is None:
        codes = np.asarray(gr.order_one, dtype=np.int64)
        g = codes[(codes >= gr.n_h) & (codes < gr.n_h + gr.n_g)] - gr.n_h
        seen = np.zeros(gr.n_g, dtype=bool)
        seen[g] = True
        c.one_step_gpu = seen
    return c.one_step_gpu


def _as_list(a: np.ndarray, ref: np.ndarray, ref_list: list[int]) -> list[int]:
    """``a`` as a list: the unchanged replay's own list when equal to it, else that list with
    the changed entries replaced (or a new list, when most entries changed)."""
    idx = np.flatnonzero(a != ref)
    if not len(idx):
        return ref_list
    if 4 * len(idx) > len(ref_list):
        return a.tolist()
    out = ref_list[:]
    for i, v in zip(idx.tolist(), a[idx].tolist(), strict=True):
        out[i] = v
    return out


_LOOP_MODS = (
    "gap_ns",
    "handoff_ns",
    "host_dur_ns",
    "awaited",
    "own_ns",
    "return_ns",
    "launch",
    "launch_ns",
    "prev_ns",
    "dep_ns",
    "gpu_dur_ns",
)  # the Mods arrays the replay loop reads


def _unchanged(gr: Graph) -> dict[str, tuple[np.ndarray, list[int]]]:
    """The unchanged replay's arrays and their lists: a fix's arrays equal to them are not
    converted again."""
    c = gr.cache
    if c.unchanged is None:
        m0 = Mods.of(gr)
        c.unchanged = {k: (getattr(m0, k), getattr(m0, k).tolist()) for k in _LOOP_MODS}
    return c.unchanged


def _loop_lists(gr: Graph) -> dict[str, list[Any]]:
    """The graph's fixed arrays as Python lists (the replay loop indexes lists), once."""
    c = gr.cache
    if c.loop_lists is None:
        h, g = gr.host, gr.gpu
        c.loop_lists = {
            "S": h.ts_ns.tolist(),
            "E": h.end_ns.tolist(),
            "GS": g.ts_ns.tolist(),
            "GE": g.end_ns.tolist(),
            "prev": h.prev.tolist(),
            "handoff": h.handoff.tolist(),
            "gpu_prev": g.prev.tolist(),
            "dep": g.dep.tolist(),
            "origin": h.origin_ns.tolist(),
            "waits": (h.waits & (h.awaited >= 0)).tolist(),
        }
    return c.loop_lists


def _bounds(gr: Graph, mods: Mods, hs: Column, he: Column, ge: Column) -> tuple[np.ndarray, int]:
    """The replayed step boundaries, and how far the GPU work the last step ends with holds
    its end past its host side (0 unchanged: the measured end is both)."""
    st = gr.steps
    b = st.bounds_ns.copy()
    if len(b) < 2 or not len(hs):
        return b, 0
    for x, (a, at_end, off) in enumerate(
        zip(st.anchor.tolist(), st.anchor_at_end.tolist(), mods.anchor_ns.tolist(), strict=True)
    ):
        if a >= 0:
            b[x] = (he[a] if at_end else hs[a]) + off
    tail = 0
    if st.last_gpu >= 0:  # the last step also ends with the GPU work it launched
        gpu_end = ge[st.last_gpu] + st.last_gpu_ns
        tail = max(0, gpu_end - int(b[-1])) if st.anchor[-1] >= 0 else 0
        b[-1] = max(int(b[-1]), gpu_end)
    return b, tail
