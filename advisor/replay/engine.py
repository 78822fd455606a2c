"""The replay: a discrete-event pass over the step graph, linear in its nodes.

Each node is visited once, in an order where every node it reads has been visited
(:func:`advisor.replay.model._order`): a host call starts at the latest of its thread's
previous call's end plus the host gap and the hand-off it waited for; a GPU activity starts at
the latest of its launch plus the latency, the previous activity on its stream and the
activity it waited for on another stream, and lasts its (possibly scaled) duration; a sync
ends at the latest of its own return time and the end of the GPU work it waited for plus the
measured return time. Nodes outside the steady steps keep their measured times.

A fix (:mod:`advisor.replay.fixes`) changes a :class:`Mods` (durations, gaps, edges) before the
pass; the step times are read off the replayed positions of the step boundaries' anchors.
"""

from __future__ import annotations

from dataclasses import dataclass

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
        return Mods(h_dur=gr.h_end - gr.h_ts, h_gap=gr.h_gap.copy(), h_qoff=gr.h_qoff.copy(),
                    h_base=gr.h_base.copy(), h_tail=gr.h_tail.copy(),
                    h_await=gr.h_await.copy(), g_dur=gr.g_end - gr.g_ts, g_offl=offl,
                    g_launch=gr.g_launch.copy(), g_offp=offp, g_offd=offd,
                    b_off=gr.anchor_off.copy())  # fmt: skip


@dataclass(frozen=True)
class Replayed:
    h_start: np.ndarray
    h_end: np.ndarray
    g_start: np.ndarray
    g_end: np.ndarray
    bounds: np.ndarray  # replayed step boundaries

    busy: np.ndarray  # per step: the GPU time its launches take on their busiest stream

    @property
    def step_ns(self) -> np.ndarray:
        """Each step's replayed time: from its boundary to the next, and never less than the
        GPU time of its own launches on one stream (a host that runs ahead of the GPU is held
        back by the queue, and by the syncs, over the steps)."""
        return np.maximum(np.diff(self.bounds), self.busy)


def replay(gr: Graph, mods: Mods) -> Replayed:
    """Replay the graph with ``mods`` (see the module doc)."""
    n_h, n_g = gr.n_h, gr.n_g
    S = gr.h_ts.tolist()
    E = gr.h_end.tolist()
    GS = gr.g_ts.tolist()
    GE = gr.g_end.tolist()
    prev, gap = gr.h_prev.tolist(), mods.h_gap.tolist()
    q, qoff = gr.h_q.tolist(), mods.h_qoff.tolist()
    hdur = mods.h_dur.tolist()
    sync = (gr.h_sync & (mods.h_await >= 0)).tolist()
    await_, base, tail = mods.h_await.tolist(), mods.h_base.tolist(), mods.h_tail.tolist()
    gl, offl = mods.g_launch.tolist(), mods.g_offl.tolist()
    gp, offp = gr.g_prev.tolist(), mods.g_offp.tolist()
    gd, offd = gr.g_dep.tolist(), mods.g_offd.tolist()
    gdur = mods.g_dur.tolist()
    hs_base = n_h + n_g
    more = gr.h_await_more
    neg = -(1 << 62)
    origin = gr.h_origin.tolist()
    for ev in gr.order:
        if ev < n_h:
            p = prev[ev]
            s = E[p] + gap[ev] if p >= 0 else origin[ev] + gap[ev]
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
                for c in more.get(i, ()):  # a device sync waits for every stream
                    t = GE[c] + tail[i]
                    if t > e:
                        e = t
                E[i] = e
    hs, he = np.asarray(S, dtype=np.int64), np.asarray(E, dtype=np.int64)
    gs, ge = np.asarray(GS, dtype=np.int64), np.asarray(GE, dtype=np.int64)
    bounds = _bounds(gr, mods, hs, he, ge)
    n = max(len(bounds) - 1, 0)
    k = gr.g_key >= 0
    per: np.ndarray = np.bincount(gr.g_key[k], weights=(ge - gs)[k], minlength=n * gr.n_streams)
    busy = per[: n * gr.n_streams].reshape(n, gr.n_streams).max(axis=1) if n else np.zeros(0)
    return Replayed(hs, he, gs, ge, bounds, np.asarray(busy, dtype=np.int64))


def _bounds(gr: Graph, mods: Mods, hs: np.ndarray, he: np.ndarray, ge: np.ndarray) -> np.ndarray:
    b = gr.bounds.copy()
    if len(b) < 2 or not len(hs):
        return b
    a, ok = gr.anchor, gr.anchor >= 0
    at = np.where(gr.anchor_end, he[np.clip(a, 0, None)], hs[np.clip(a, 0, None)])
    b[ok] = at[ok] + mods.b_off[ok]
    if gr.last_gpu >= 0:  # the last step also ends with the GPU work it launched
        b[-1] = max(int(b[-1]), int(ge[gr.last_gpu]) + gr.last_gpu_off)
    return b
