"""The replay as scans along chains: the times of the event loop of :mod:`advisor.replay.engine`,
computed a run of nodes at a time.

Every replayed time is the latest of its inputs, each plus an offset. The times fall into
*chains*: a thread's calls (each call's start, then its end) and a stream's activities (their
ends). An element of a chain reads the element before it plus a weight (the host work before a
call, a call's own time, an activity's gap and duration) and the latest of its other inputs
``b`` (the hand-off a call waited for, the GPU work a sync waited for, an activity's launch and
its cross-stream wait): ``x[k] = max(x[k-1] + w[k], b[k])``. Over a run of elements that is a
cumulative sum and a running maximum, ``x[k] = W[k] + max(x0, max over m <= k of (b[m] - W[m]))``
with ``W`` the cumulative weights: exact integer arithmetic, so the times are the loop's to the
nanosecond.

Each element gets a *level*: its chain predecessor's, or one more than the highest level among
its other inputs. A *run* is the elements of one chain at one level. Runs are computed level by
level, so everything a run reads is known before it; a long run is one numpy scan, a short one
(a chain that changes level at every element: syncs and cross-stream waits in a row) a small
loop. The plan (levels, runs, where each offset comes from) depends on the graph only and is made
once per graph and order (:mod:`advisor.replay.scanplan`); a fix only changes
weights and offsets.

Where the event loop reads a node it has not visited yet (the clocks put a predecessor later),
it reads the node's measured time; the plan reads those inputs from the measured times too. A fix
that adds an edge, or drops a sync whose end some node reads before the sync's end is visited,
changes what the loop reads in ways the plan does not hold: :func:`scan` returns None and the
loop replays it.
"""

from __future__ import annotations

import numpy as np

from advisor.replay.cache import Plan
from advisor.replay.model import Graph
from advisor.replay.mods import Mods, Times
from advisor.replay.scanplan import (
    DEP,
    GPU_PREV_CONST,
    HANDOFF,
    LAUNCH,
    NEG,
    ORIGIN,
    PREV_CONST,
    SYNC,
)


def scan(gr: Graph, pl: Plan, mods: Mods) -> Times | None:
    """The replayed host starts and ends and GPU starts and ends of ``gr`` with ``mods``
    (None: the plan does not hold for these mods, see the module doc)."""
    h, g = gr.host, gr.gpu
    n_h = gr.n_h
    if not (
        ((mods.launch == g.launch) | (mods.launch < 0)).all()
        and ((mods.awaited == h.awaited) | (mods.awaited < 0)).all()
    ):
        return None
    if len(pl.early_syncs) and (mods.awaited[pl.early_syncs] < 0).any():
        return None
    n = pl.n
    sync = h.waits & (mods.awaited >= 0)
    w = _weights(pl, mods, sync)
    off = _offsets(gr, pl, mods)
    vm = pl.values.copy()
    el, src, estart, has_pred, pred = pl.el, pl.src, pl.estart, pl.has_pred, pl.pred
    # the short runs' loop reads lists, and the values through a memoryview
    sw = w[pl.short].tolist()
    soff = off[pl.short_edges].tolist()
    sel, spred, sstart, ssrc = pl.short_el, pl.short_pred, pl.short_start, pl.short_src
    mv = memoryview(vm)  # type: ignore[arg-type]
    r = 0
    for short, a, b in pl.steps:
        if short:
            p = spred[r]
            r += 1
            x = mv[p] if p >= 0 else NEG  # (a chain's first element has weight 0)
            for k in range(a, b):
                e, e1 = sstart[k], sstart[k + 1]
                best = mv[ssrc[e]] + soff[e]
                while e + 1 < e1:
                    e += 1
                    v = mv[ssrc[e]] + soff[e]
                    if v > best:
                        best = v
                x += sw[k]
                if best > x:
                    x = best
                mv[sel[k]] = x
            continue
        e0, e1 = estart[a], estart[b]
        vals = vm[src[e0:e1]] + off[e0:e1]
        bk = np.maximum.reduceat(vals, estart[a:b] - e0)
        cw = np.cumsum(w[a:b])
        x0 = vm[pred[a]] if has_pred[a] else NEG
        vm[el[a:b]] = cw + np.maximum(x0, np.maximum.accumulate(bk - cw))
    ge = vm[2 * n_h : n]
    gs = np.where(pl.gpu_in, ge - mods.gpu_dur_ns, g.ts_ns)
    return vm[:n_h], vm[n_h : 2 * n_h], gs, ge


def _weights(pl: Plan, mods: Mods, sync: np.ndarray) -> np.ndarray:
    """Each processed element's weight after its chain predecessor (0 where it has none)."""
    i, k = pl.idx, pl.kind
    hi = np.where(k < 2, i, 0)
    gj = np.where(k == 2, i, 0)
    w = np.where(
        k == 0,
        mods.gap_ns[hi],
        np.where(
            k == 1,
            np.where(sync[hi], mods.own_ns[hi], mods.host_dur_ns[hi]),
            mods.prev_ns[gj] + mods.gpu_dur_ns[gj],
        ),
    )
    return np.where(pl.has_pred | (k == 1), w, 0).astype(np.int64)


def _offsets(gr: Graph, pl: Plan, mods: Mods) -> np.ndarray:
    """Each edge's offset with ``mods`` (NEG: the edge is gone)."""
    out = np.full(len(pl.ekind), NEG, dtype=np.int64)
    for k, at, i in pl.by_kind:
        if not len(at):
            continue
        if k == HANDOFF:
            v = mods.handoff_ns[i]
        elif k == ORIGIN:
            v = gr.host.origin_ns[i] + mods.gap_ns[i]
        elif k == PREV_CONST:
            v = mods.gap_ns[i]
        elif k == SYNC:
            v = np.where(mods.awaited[i] >= 0, mods.return_ns[i], NEG)
        elif k == LAUNCH:
            v = np.where(mods.launch[i] >= 0, mods.launch_ns[i] + mods.gpu_dur_ns[i], NEG)
        elif k == DEP:
            v = mods.dep_ns[i] + mods.gpu_dur_ns[i]
        elif k == GPU_PREV_CONST:
            v = mods.prev_ns[i] + mods.gpu_dur_ns[i]
        else:  # NO_INPUT: an activity with no edge left starts at its measured time
            v = np.where(mods.launch[i] < 0, gr.gpu.ts_ns[i] + mods.gpu_dur_ns[i], NEG)
        out[at] = v
    return out
