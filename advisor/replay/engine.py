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
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from advisor.replay.model import Graph


@dataclass
class Mods:
    """What a fix may change: host durations and gaps, syncs, GPU durations and edges."""

    h_dur: np.ndarray
    h_gap: np.ndarray
    h_qoff: np.ndarray
    h_base: np.ndarray
    h_tail: np.ndarray
    h_await: np.ndarray
    g_dur: np.ndarray
    g_offl: np.ndarray
    g_launch: np.ndarray
    g_offp: np.ndarray
    g_offd: np.ndarray
    b_off: np.ndarray  # each step boundary's offset from its anchor call

    @staticmethod
    def of(gr: Graph, calibrated: bool = True) -> Mods:
        offl, offp, offd = gr.g_offl.copy(), gr.g_offp.copy(), gr.g_offd.copy()
        if not calibrated:  # the graph alone: no measured delay it cannot explain
            r = gr.g_resid
            offl = np.where(gr.g_bind == 0, offl - r, offl)
            offp = np.where(gr.g_bind == 1, offp - r, offp)
            offd = np.where(gr.g_bind == 2, offd - r, offd)
        return Mods(
            h_dur=gr.h_end - gr.h_ts,
            h_gap=gr.h_gap.copy(),
            h_qoff=gr.h_qoff.copy(),
            h_base=gr.h_base.copy(),
            h_tail=gr.h_tail.copy(),
            h_await=gr.h_await.copy(),
            g_dur=gr.g_end - gr.g_ts,
            g_offl=offl,
            g_launch=gr.g_launch.copy(),
            g_offp=offp,
            g_offd=offd,
            b_off=gr.anchor_off.copy(),
        )


@dataclass(frozen=True)
class Replayed:
    """A replay's result: the step boundaries and per-step GPU time (what the savings read),
    and every node's replayed times (as arrays on demand)."""

    bounds: np.ndarray  # replayed step boundaries
    busy: np.ndarray  # per step: the GPU time its launches take on their busiest stream
    # every node's times (host starts and ends, GPU starts and ends), made on demand
    nodes: Callable[[], tuple[list[int], list[int], list[int], list[int]]] = field(
        repr=False, compare=False
    )

    @property
    def h_start(self) -> np.ndarray:
        return np.asarray(self.nodes()[0], dtype=np.int64)

    @property
    def h_end(self) -> np.ndarray:
        return np.asarray(self.nodes()[1], dtype=np.int64)

    @property
    def g_start(self) -> np.ndarray:
        return np.asarray(self.nodes()[2], dtype=np.int64)

    @property
    def g_end(self) -> np.ndarray:
        return np.asarray(self.nodes()[3], dtype=np.int64)

    @property
    def step_ns(self) -> np.ndarray:
        """Each step's replayed time: from its boundary to the next, and never less than the
        GPU time of its own launches on one stream (a host that runs ahead of the GPU is held
        back by the queue, and by the syncs, over the steps)."""
        return np.maximum(np.diff(self.bounds), self.busy)


def replay(gr: Graph, mods: Mods, one_step: bool = False) -> Replayed:
    """Replay the graph with ``mods`` (see the module doc); ``one_step``: only the step closest
    to the median (``gr.one_step``), the others keep their measured times."""
    n_h, n_g = gr.n_h, gr.n_g
    c = _constants(gr)
    S, E, GS, GE = c["S"][:], c["E"][:], c["GS"][:], c["GE"][:]
    prev, q, gp, gd, origin = c["prev"], c["q"], c["gp"], c["gd"], c["origin"]
    ref = _mods_lists(gr)
    m = {k: _as_list(getattr(mods, k), *ref[k]) for k in ref}
    gap, qoff, hdur = m["h_gap"], m["h_qoff"], m["h_dur"]
    await_, base, tail = m["h_await"], m["h_base"], m["h_tail"]
    gl, offl, offp, offd, gdur = m["g_launch"], m["g_offl"], m["g_offp"], m["g_offd"], m["g_dur"]
    # which calls wait for the GPU (a fix may drop some)
    sync = c["sync"] if await_ is ref["h_await"][1] else (gr.h_sync & (mods.h_await >= 0)).tolist()
    hs_base = n_h + n_g
    more = gr.h_await_more
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
    bounds = _bounds(gr, mods, S, E, GE)
    return Replayed(bounds, _busy(gr, mods, one_step, len(bounds)), lambda: (S, E, GS, GE))


def one_step_of(gr: Graph, mods: Mods, full: Replayed) -> Replayed:
    """``replay(gr, mods, one_step=True)``, read off ``full`` (``replay(gr, mods)``) when the
    one step's events read no time that only the full replay changes (the steps replayed
    before it are not its neighbours, and ``mods`` adds no edge): both replays then compute
    the same times for its events, and the other nodes keep their measured times."""
    if not _one_step_apart(gr) or not _no_new_edges(gr, mods):
        return replay(gr, mods, True)
    S, E, GS, GE = full.nodes()
    vis_h, vis_g = _visited_host_one(gr), _visited_one(gr)
    c = _constants(gr)
    hs, he = _Either(vis_h, S, c["S"]), _Either(vis_h, E, c["E"])
    gs, ge = _Either(vis_g, GS, c["GS"]), _Either(vis_g, GE, c["GE"])
    bounds = _bounds(gr, mods, hs, he, ge)  # type: ignore[arg-type]
    return Replayed(
        bounds,
        _busy(gr, mods, True, len(bounds)),
        lambda: (hs.merged(), he.merged(), gs.merged(), ge.merged()),
    )


class _Either:
    """Node times: the replayed ones where ``pick`` is set, else the measured ones."""

    def __init__(self, pick: np.ndarray, replayed: list[int], measured: list[int]) -> None:
        self.pick, self.replayed, self.measured = pick, replayed, measured

    def __getitem__(self, i: int) -> int:
        return self.replayed[i] if self.pick[i] else self.measured[i]

    def __len__(self) -> int:
        return len(self.measured)

    def merged(self) -> list[int]:
        out = self.measured[:]
        for i in np.flatnonzero(self.pick).tolist():
            out[i] = self.replayed[i]
        return out


def _no_new_edges(gr: Graph, mods: Mods) -> bool:
    """``mods`` keeps or drops the graph's launch and sync edges, adds none."""
    return bool(
        ((mods.g_launch == gr.g_launch) | (mods.g_launch < 0)).all()
        and ((mods.h_await == gr.h_await) | (mods.h_await < 0)).all()
    )


def _one_step_apart(gr: Graph) -> bool:
    """No event of the one-step replay reads a node that the full replay visits and the
    one-step replay does not (checked once per graph, on every edge it has)."""
    key = "_replay_one_apart"
    if key not in gr.__dict__:
        codes = np.asarray(gr.order, dtype=np.int64)
        n_h, n_g = gr.n_h, gr.n_g
        full_h = np.zeros(n_h + 1, dtype=bool)  # (a last False: reads of -1)
        full_g = np.zeros(n_g + 1, dtype=bool)
        full_h[codes[codes < n_h]] = True
        full_g[codes[(codes >= n_h) & (codes < n_h + n_g)] - n_h] = True
        only_h = full_h & ~np.r_[_visited_host_one(gr), False]
        only_g = full_g & ~np.r_[_visited_one(gr), False]
        h, g = np.flatnonzero(_visited_host_one(gr)), np.flatnonzero(_visited_one(gr))
        more = [w for i in h.tolist() for w in gr.h_await_more.get(i, ())]
        gr.__dict__[key] = not (
            only_h[gr.h_prev[h]].any()
            or only_h[gr.h_q[h]].any()
            or only_g[gr.h_await[h]].any()
            or only_g[np.asarray(more, dtype=np.int64)].any()
            or only_h[gr.g_launch[g]].any()
            or only_g[gr.g_prev[g]].any()
            or only_g[gr.g_dep[g]].any()
        )
    return gr.__dict__[key]  # type: ignore[no-any-return]


def _visited_host_one(gr: Graph) -> np.ndarray:
    """bool per host call: replayed in the one-step replay (``gr.order_one``), once."""
    key = "_replay_visited_host_one"
    if key not in gr.__dict__:
        codes = np.asarray(gr.order_one, dtype=np.int64)
        seen = np.zeros(gr.n_h, dtype=bool)
        seen[codes[codes < gr.n_h]] = True
        seen[codes[codes >= gr.n_h + gr.n_g] - gr.n_h - gr.n_g] = True
        gr.__dict__[key] = seen
    return gr.__dict__[key]  # type: ignore[no-any-return]


def _busy(gr: Graph, mods: Mods, one_step: bool, n_bounds: int) -> np.ndarray:
    """Per step, the GPU time its launches take on their busiest stream. A replayed activity
    lasts its (modified) duration, one the replay did not visit its measured one."""
    n = max(n_bounds - 1, 0)
    if not n:
        return np.zeros(0, dtype=np.int64)
    keyed, key_of = _keyed(gr)
    dur = mods.g_dur[keyed]
    if one_step:  # activities the one-step replay does not visit keep their measured time
        dur = np.where(_visited_one(gr)[keyed], dur, (gr.g_end - gr.g_ts)[keyed])
    per: np.ndarray = np.bincount(key_of, weights=dur, minlength=n * gr.n_streams)
    busy = per[: n * gr.n_streams].reshape(n, gr.n_streams).max(axis=1)
    return np.asarray(busy, dtype=np.int64)


def _keyed(gr: Graph) -> tuple[np.ndarray, np.ndarray]:
    """The activities launched in a replayed step (``g_key >= 0``) and their keys, once."""
    key = "_replay_keyed"
    if key not in gr.__dict__:
        keyed = np.flatnonzero(gr.g_key >= 0)
        gr.__dict__[key] = (keyed, gr.g_key[keyed])
    return gr.__dict__[key]  # type: ignore[no-any-return]


def _visited_one(gr: Graph) -> np.ndarray:
    """bool per GPU activity: replayed in the one-step replay (``gr.order_one``), once."""
    key = "_replay_visited_one"
    if key not in gr.__dict__:
        codes = np.asarray(gr.order_one, dtype=np.int64)
        g = codes[(codes >= gr.n_h) & (codes < gr.n_h + gr.n_g)] - gr.n_h
        seen = np.zeros(gr.n_g, dtype=bool)
        seen[g] = True
        gr.__dict__[key] = seen
    return gr.__dict__[key]  # type: ignore[no-any-return]


def _as_list(a: np.ndarray, ref: np.ndarray, ref_list: list[int]) -> list[int]:
    """``a`` as a list: the unchanged replay's own list when equal to it, else that list with
    the changed entries replaced (or a new list, when most entries changed)."""
    idx = np.flatnonzero(a != ref)
    if not len(idx):
        return ref_list
    if 4 * len(idx) > len(ref_list):
        return a.tolist()  # type: ignore[no-any-return]
    out = ref_list[:]
    for i, v in zip(idx.tolist(), a[idx].tolist(), strict=True):
        out[i] = v
    return out


def _mods_lists(gr: Graph) -> dict[str, tuple[np.ndarray, list[int]]]:
    """The unchanged replay's arrays and their lists: a fix's arrays equal to them are not
    converted again."""
    key = "_replay_mods_lists"
    if key not in gr.__dict__:
        m0 = Mods.of(gr)
        gr.__dict__[key] = {
            k: (getattr(m0, k), getattr(m0, k).tolist())
            for k in (
                "h_gap",
                "h_qoff",
                "h_dur",
                "h_await",
                "h_base",
                "h_tail",
                "g_launch",
                "g_offl",
                "g_offp",
                "g_offd",
                "g_dur",
            )
        }
    return gr.__dict__[key]  # type: ignore[no-any-return]


def _constants(gr: Graph) -> dict[str, list[Any]]:
    """The graph's fixed arrays as Python lists (the replay loop indexes lists), once."""
    key = "_replay_lists"
    if key not in gr.__dict__:
        gr.__dict__[key] = {
            "S": gr.h_ts.tolist(),
            "E": gr.h_end.tolist(),
            "GS": gr.g_ts.tolist(),
            "GE": gr.g_end.tolist(),
            "prev": gr.h_prev.tolist(),
            "q": gr.h_q.tolist(),
            "gp": gr.g_prev.tolist(),
            "gd": gr.g_dep.tolist(),
            "origin": gr.h_origin.tolist(),
            "sync": (gr.h_sync & (gr.h_await >= 0)).tolist(),
        }
    return gr.__dict__[key]  # type: ignore[no-any-return]


def _bounds(gr: Graph, mods: Mods, hs: list[int], he: list[int], ge: list[int]) -> np.ndarray:
    b = gr.bounds.copy()
    if len(b) < 2 or not len(hs):
        return b
    for x, (a, at_end, off) in enumerate(
        zip(gr.anchor.tolist(), gr.anchor_end.tolist(), mods.b_off.tolist(), strict=True)
    ):
        if a >= 0:
            b[x] = (he[a] if at_end else hs[a]) + off
    if gr.last_gpu >= 0:  # the last step also ends with the GPU work it launched
        b[-1] = max(int(b[-1]), ge[gr.last_gpu] + gr.last_gpu_off)
    return b
