"""The plan of the replay's scans (:mod:`advisor.replay.scan`): which elements form each run, in
which order the runs are computed, and where each element's weight and each edge's offset come
from (:class:`~advisor.replay.cache.Plan`); made once per graph and order and kept in its
:class:`~advisor.replay.cache.ReplayCache`.

Elements: host starts ``i``, host ends ``n_h + i``, GPU ends ``2 n_h + j``. An element's *level*
is its chain predecessor's, or one more than the highest level among its other inputs; a *run* is
the elements of one chain at one level, computed after every run of a lower level. An input the
event loop reads before visiting it (the clocks put it later) is read from the measured times.
"""

from __future__ import annotations

import numpy as np

from advisor.arrays import setdiff_ints, unique_ints
from advisor.replay.cache import Plan
from advisor.replay.model import Graph

NEG = -(1 << 62)  # "no such input"
SHORT_RUN = 24  # runs shorter than this are computed by the loop, longer ones by numpy

# where an element's other inputs (edges) take their offsets from
HANDOFF, ORIGIN, PREV_CONST, SYNC, LAUNCH, DEP, GPU_PREV_CONST, NO_INPUT, NONE = range(9)


def plan(gr: Graph, codes: list[int]) -> Plan | None:
    """The plan of ``gr`` replayed along ``codes`` (``gr.order`` or ``gr.order_one``); None
    where the order visits a call's end before its start (the loop then replays)."""
    h, g = gr.host, gr.gpu
    n_h, n_g = gr.n_h, gr.n_g
    n = 2 * n_h + n_g
    waits = h.waits & (h.awaited >= 0)
    c = np.asarray(codes, dtype=np.int64)
    # elements in the order: a host start is followed by its end unless it waits
    is_h = c < n_h
    first = np.where(is_h, c, np.where(c < n_h + n_g, c + n_h, c - n_g))
    then = np.where(is_h & ~waits[np.clip(c, 0, max(n_h - 1, 0))], c + n_h, -1)
    el = np.stack([first, then], axis=1).ravel()
    el = el[el >= 0]
    m = len(el)
    pos = np.full(n, -1, dtype=np.int64)
    pos[el] = np.arange(m)
    at = np.arange(m)
    kind = np.where(el < n_h, 0, np.where(el < 2 * n_h, 1, 2))
    idx = np.where(kind == 0, el, np.where(kind == 1, el - n_h, el - 2 * n_h))
    cp = np.full(m, -1, dtype=np.int64)  # chain predecessor's position
    edges: list[tuple[np.ndarray, ...]] = []  # (dst position, slot, kind, index)

    def live(slot: np.ndarray, dst: np.ndarray) -> np.ndarray:
        p = pos[slot]
        return (p >= 0) & (p < dst)

    def edge(dst: np.ndarray, slot: np.ndarray, ok: np.ndarray, k: int, i: np.ndarray) -> None:
        # an input read live (visited before) or from the measured times (slot + n)
        edges.append((dst, np.where(ok, slot, slot + n), np.full(len(dst), k), i))

    # host starts: the previous call's end on the thread (or the step's start), the hand-off
    ps = at[kind == 0]
    i = idx[ps]
    p_ = h.prev[i]
    has = p_ >= 0
    ok = has & live(n_h + np.clip(p_, 0, None), ps)
    cp[ps[ok]] = pos[n_h + p_[ok]]
    sel = has & ~ok
    edge(ps[sel], n_h + p_[sel], np.zeros(sel.sum(), bool), PREV_CONST, i[sel])
    sel = ~has
    edges.append((ps[sel], np.full(sel.sum(), 2 * n), np.full(sel.sum(), ORIGIN), i[sel]))
    q = h.handoff[i]
    sel = q >= 0
    edge(ps[sel], n_h + q[sel], live(n_h + q[sel], ps[sel]), HANDOFF, i[sel])
    # host ends: the call's start, and for a sync the GPU work it waits for
    pe = at[kind == 1]
    i = idx[pe]
    if (pos[i] >= pe).any() or (pos[i] < 0).any():
        return None
    cp[pe] = pos[i]
    sel = waits[i]
    ws, wi = pe[sel], i[sel]
    aw = h.awaited[wi]
    edge(ws, 2 * n_h + aw, live(2 * n_h + aw, ws), SYNC, wi)
    more = [
        (d, k, w)
        for d, k in zip(ws.tolist(), wi.tolist(), strict=True)
        for w in h.awaited_more.get(k, ())
    ]
    if more:
        d, k, w = (np.asarray(x, dtype=np.int64) for x in zip(*more, strict=True))
        edge(d, 2 * n_h + w, live(2 * n_h + w, d), SYNC, k)
    # GPU ends: the previous activity on the stream, the launch, the cross-stream wait
    pg = at[kind == 2]
    j = idx[pg]
    gp = g.prev[j]
    has = gp >= 0
    ok = has & live(2 * n_h + np.clip(gp, 0, None), pg)
    cp[pg[ok]] = pos[2 * n_h + gp[ok]]
    sel = has & ~ok
    edge(pg[sel], 2 * n_h + gp[sel], np.zeros(sel.sum(), bool), GPU_PREV_CONST, j[sel])
    lc = g.launch[j]
    sel = lc >= 0
    edge(pg[sel], lc[sel], live(lc[sel], pg[sel]), LAUNCH, j[sel])
    dd = g.dep[j]
    sel = dd >= 0
    edge(pg[sel], 2 * n_h + dd[sel], live(2 * n_h + dd[sel], pg[sel]), DEP, j[sel])
    sel = (gp < 0) & (dd < 0)
    edges.append((pg[sel], np.full(sel.sum(), 2 * n), np.full(sel.sum(), NO_INPUT), j[sel]))
    # every element has an edge
    dst = np.concatenate([e[0] for e in edges])
    bare = setdiff_ints(at, dst)
    edges.append((bare, np.full(len(bare), 2 * n), np.full(len(bare), NONE), bare))
    dst, slot, ek, ei = (np.concatenate([e[x] for e in edges]).astype(np.int64) for x in range(4))
    early = _early_syncs(n_h, waits, pos, el, cp, dst, slot, n)
    # levels and chains, in the order
    o = np.argsort(dst, kind="stable")
    dst, slot, ek, ei = dst[o], slot[o], ek[o], ei[o]
    inner = slot < n  # inputs read live
    lvl, chain = _levels(cp.tolist(), dst[inner].tolist(), pos[slot[inner]].tolist(), m)
    proc = np.lexsort((at, chain, lvl))
    rank = np.empty(m, dtype=np.int64)
    rank[proc] = at
    key = lvl[proc] * (int(chain.max()) + 1 if m else 1) + chain[proc]
    cut = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if m else np.zeros(0, np.int64)
    bounds = np.r_[cut, m]
    runs = list(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True))
    # edges in processing order
    o = np.lexsort((np.arange(len(dst)), rank[dst]))
    dst, slot, ek, ei = rank[dst[o]], slot[o], ek[o], ei[o]
    estart = np.searchsorted(dst, np.arange(m + 1))
    has_pred = cp[proc] >= 0
    pred = np.where(has_pred, el[np.clip(cp[proc], 0, None)], -1)
    size = np.diff(bounds)
    sr = np.repeat(size < SHORT_RUN, size) if m else np.zeros(0, bool)
    short = np.flatnonzero(sr)
    short_edges = np.flatnonzero(sr[dst]) if len(dst) else np.zeros(0, np.int64)
    gpu_in = np.zeros(n_g, dtype=bool)
    gpu_in[idx[kind == 2]] = True
    local = np.full(m + 1, -1, dtype=np.int64)
    local[short] = np.arange(len(short))
    steps, short_pred = [], []
    for a, b in runs:
        if b - a < SHORT_RUN:
            steps.append((True, int(local[a]), int(local[a]) + b - a))
            short_pred.append(int(pred[a]) if has_pred[a] else -1)
        else:
            steps.append((False, a, b))
    sstart = np.searchsorted(dst[short_edges], short, side="left") if len(short) else short
    measured = np.concatenate([h.ts_ns, h.end_ns, g.end_ns])
    return Plan(
        n=n,
        el=el[proc],
        kind=kind[proc],
        idx=idx[proc],
        has_pred=has_pred,
        pred=pred,
        runs=runs,
        src=slot,
        ekind=ek,
        eidx=ei,
        estart=estart,
        by_kind=[(k, np.flatnonzero(ek == k), ei[ek == k]) for k in range(NONE)],
        short=short,
        short_edges=short_edges,
        short_el=el[proc][short].tolist(),
        short_pred=short_pred,
        short_start=np.r_[sstart, len(short_edges)].tolist(),
        short_src=slot[short_edges].tolist(),
        steps=steps,
        early_syncs=early,
        gpu_in=gpu_in,
        values=np.concatenate([measured, measured, np.zeros(1, dtype=np.int64)]),
    )


def _early_syncs(
    n_h: int,
    waits: np.ndarray,
    pos: np.ndarray,
    el: np.ndarray,
    cp: np.ndarray,
    dst: np.ndarray,
    slot: np.ndarray,
    n: int,
) -> np.ndarray:
    """The syncs whose end some element reads between the sync's start and its end in the
    order: dropping such a sync moves its end to its start's visit, so the reader would see
    the replayed end where it saw the measured one."""
    reads = np.concatenate([slot % n, el[np.clip(cp, 0, None)][cp >= 0]])
    readers = np.concatenate([dst, np.flatnonzero(cp >= 0)])
    call = reads - n_h
    sel = (reads >= n_h) & (reads < 2 * n_h)
    call, readers = call[sel], readers[sel]
    sel = waits[call] & (pos[call] >= 0)
    call, readers = call[sel], readers[sel]
    between = (readers > pos[call]) & (readers < pos[n_h + call])
    return unique_ints(call[between])


def _levels(
    cp: list[int], ext_dst: list[int], ext_src: list[int], m: int
) -> tuple[np.ndarray, np.ndarray]:
    """Each element's level (its chain predecessor's, or one more than its other live inputs'
    highest) and chain, in order."""
    lvl = [0] * m
    chain = [0] * m
    e, ne = 0, len(ext_dst)
    nxt = 0
    for p in range(m):
        b = 0
        while e < ne and ext_dst[e] == p:
            t = lvl[ext_src[e]] + 1
            if t > b:
                b = t
            e += 1
        c = cp[p]
        if c >= 0:
            lv = lvl[c]
            chain[p] = chain[c]
        else:
            lv = 0
            chain[p] = nxt
            nxt += 1
        lvl[p] = lv if lv > b else b
    return np.asarray(lvl, dtype=np.int64), np.asarray(chain, dtype=np.int64)
