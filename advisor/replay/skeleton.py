"""A rank's step graph reduced to its collectives: what the job replay
(:mod:`advisor.replay.job`) joins across ranks.

In the step graph (:mod:`advisor.replay.model`) every time is decided by one *binding* edge: a
GPU activity's start by its launch, its stream or the activity it waited for on another stream
(``GpuWork.bind``); a host call's start by the previous call on its thread or the call of
another thread it was handed off from; the end of a call that waits for the GPU (a sync, a
blocking copy) by the GPU work it waited for. Following binding edges back from a time reaches
either the end of a collective or a time no edge decides (the start of the recording, a thread's
first call): its *root*. The time is then its root's end plus the measured path length (the
*offset*), however the collective's own end moves. The *slack* is how much earlier the time
could move before another of its edges (one that did not bind) would decide it: the smallest
such margin along the path; that edge's own root (*alt root*) moves it in turn.

:func:`skeleton` gives, for each collective of the digest (:class:`advisor.digest.Collectives`)
and each steady step's start and end, the root (a row of the collectives, -1: none), the offset
(after the root's end; with no root, the measured time itself, own clock) and the slack. This
is the reduction of Lumos (MLSys 2025) and dPRO to the one path that decided each time: linear in
the graph (pointer jumping over the binding edges), with no replay.
"""

from __future__ import annotations

import numpy as np

from advisor.digest import Skeleton
from advisor.replay.edges import Work
from advisor.replay.model import Graph

INF = np.int64(1 << 62)


def _host_prev(thread: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """The previous call on each call's thread (-1), across step boundaries."""
    prev = np.full(len(ts), -1, dtype=np.int64)
    o = np.lexsort((ts, thread))
    same = np.r_[False, thread[o][1:] == thread[o][:-1]] if len(o) else np.zeros(0, bool)
    prev[o[same]] = o[np.flatnonzero(same) - 1]
    return prev


def binding(gr: Graph) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Over the time points (host starts, host ends, GPU starts, GPU ends, in that order): each
    one's binding predecessor (-1: none), its measured time, the slack of its binding edge and
    the predecessor of the edge that would bind next (-1: none)."""
    h, g = gr.host, gr.gpu
    n_h, n_g = gr.n_h, gr.n_g
    hs, he, gs, ge = 0, n_h, 2 * n_h, 2 * n_h + n_g
    t = np.concatenate([h.ts_ns, h.end_ns, g.ts_ns, g.end_ns]).astype(np.int64)
    pred = np.full(len(t), -1, dtype=np.int64)
    alt = np.full(len(t), -1, dtype=np.int64)
    slack = np.full(len(t), INF, dtype=np.int64)
    # host starts: the previous call on the thread, or the call it was handed off from
    prev = _host_prev(h.thread, h.ts_ns)
    pred[hs:he] = np.where(prev >= 0, he + prev, -1)
    q = h.handoff >= 0
    pred[hs:he][q] = he + h.handoff[q]
    pe = h.end_ns[np.clip(prev, 0, None)]
    qp = q & (prev >= 0)
    slack[hs:he][qp] = (h.ts_ns - pe)[qp]
    alt[hs:he][qp] = he + prev[qp]
    # host ends: the start, or the GPU work a waiting call waited for
    pred[he:gs] = hs + np.arange(n_h)
    a = h.awaited
    aend = g.end_ns[np.clip(a, 0, None)] if n_g else np.zeros(n_h, np.int64)
    waited = (a >= 0) & (aend > h.ts_ns)
    for i, more in h.awaited_more.items():  # a device sync: the stream whose work ended last
        if waited[i]:
            last = max([int(a[i]), *more], key=lambda x: int(g.end_ns[x]))
            a = a.copy() if a is h.awaited else a
            a[i], aend[i] = last, g.end_ns[last]
    pred[he:gs][waited] = ge + a[waited]
    slack[he:gs][waited] = (h.end_ns - (h.ts_ns + h.own_ns))[waited]
    alt[he:gs][waited] = hs + np.flatnonzero(waited)
    # GPU starts: the binding edge; slack to the next latest edge
    lat = gr.launch_latency_ns
    ready = np.stack(
        [
            np.where(g.launch >= 0, h.ts_ns[np.clip(g.launch, 0, None)] + lat, -INF),
            np.where(g.prev >= 0, g.end_ns[np.clip(g.prev, 0, None)], -INF),
            np.where(g.dep >= 0, g.end_ns[np.clip(g.dep, 0, None)], -INF),
        ]
    )
    src = np.stack([hs + g.launch, ge + g.prev, ge + g.dep])
    b = np.asarray(g.bind, dtype=np.int64)
    bound = b >= 0
    col = np.clip(b, 0, 2)
    pred[gs:ge] = np.where(bound, src[col, np.arange(n_g)], -1)
    if n_g:
        top = ready[col, np.arange(n_g)]
        others = ready.copy()
        others[col, np.arange(n_g)] = -INF
        second = others.max(axis=0)
        has = bound & (second > -INF)
        slack[gs:ge] = np.where(has, np.maximum(top - second, 0), INF)
        alt[gs:ge] = np.where(has, src[others.argmax(axis=0), np.arange(n_g)], -1)
    # GPU ends: the start
    pred[ge:] = gs + np.arange(n_g)
    return pred, t, slack, alt


def roots(
    pred: np.ndarray, t: np.ndarray, slack: np.ndarray, alt: np.ndarray, is_root: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each time point's root (the first point up its binding path that ``is_root`` marks, or
    the point with no predecessor), its offset after the root's time, the smallest slack on the
    way and the predecessor of the edge that would bind there (-1: none), by pointer jumping
    (O(n log n)). An edge that would bind next but follows the same root moves with it: it limits
    nothing."""
    n = len(t)
    idx = np.arange(n)
    par = np.where((pred >= 0) & ~is_root, pred, idx)
    off = np.where(par != idx, t - t[np.clip(par, 0, None)], 0)
    root = par
    for _ in range(64):
        nxt = root[root]
        if np.array_equal(nxt, root):
            break
        off = off + off[root]
        root = nxt
    same = (alt >= 0) & (root[np.clip(alt, 0, None)] == root)
    limits = (par != idx) & ~same & (alt >= 0)
    sl = np.where(limits, slack, INF)
    at = np.where(limits, alt, -1)
    jump = par
    for _ in range(64):
        nxt = jump[jump]
        if np.array_equal(nxt, jump):
            break
        up = sl[jump] < sl
        sl = np.where(up, sl[jump], sl)
        at = np.where(up, at[jump], at)
        jump = nxt
    return root, off, sl, at


def skeleton(gr: Graph, coll_kernel_rows: np.ndarray, origin_ns: int) -> Skeleton | None:
    """The skeleton of ``gr`` for the collectives at ``coll_kernel_rows`` (rows of
    ``trace.kernels``, in the digest's order); ``origin_ns``: the trace's origin on its own
    clock (offsets of rootless times are absolute). None: nothing to replay."""
    if not gr.n_h or not gr.n_g or len(gr.steps.bounds_ns) < 2:
        return None
    pred, t, slack, alt = binding(gr)
    n_h, n_g = gr.n_h, gr.n_g
    ge = 2 * n_h + n_g
    comm_nodes = np.flatnonzero(gr.gpu.kind == Work.COMM)
    is_root = np.zeros(len(t), dtype=bool)
    is_root[ge + comm_nodes] = True
    par, off, sl, at = roots(pred, t, slack, alt, is_root)
    # the digest's row of each collective kernel node (-1: a collective the digest leaves out)
    node_row = np.full(n_g, -1, dtype=np.int64)
    cnodes = gr.kernel_nodes(coll_kernel_rows)
    have = np.isin(np.asarray(coll_kernel_rows, dtype=np.int64), gr.gpu.row[cnodes])
    node_row[cnodes] = np.flatnonzero(have)

    def row_of(point: np.ndarray) -> np.ndarray:
        """The digest row of the collective ``point``'s root is the end of (-1: none)."""
        r = par[np.clip(point, 0, None)]
        return np.where((point >= 0) & (r >= ge), node_row[np.clip(r - ge, 0, n_g - 1)], -1)

    def reduce(points: np.ndarray) -> tuple[np.ndarray, ...]:
        row = row_of(points)
        free = row < 0  # no collective of the digest decides it: its measured time
        o = np.where(free, t[points] + origin_ns, off[points])
        slk = np.where(free, 0, np.minimum(sl[points], INF)).astype(np.int64)
        return row, o.astype(np.int64), slk, np.where(free, -1, row_of(at[points]))

    coll_pts = np.full(len(coll_kernel_rows), -1, dtype=np.int64)
    coll_pts[have] = 2 * n_h + cnodes
    c_root, c_off, c_slack, c_alt = reduce(np.clip(coll_pts, 0, None))
    missing = coll_pts < 0
    c_root[missing], c_slack[missing], c_alt[missing] = -1, 0, -1
    st = gr.steps
    h_t = np.where(st.anchor_at_end, gr.host.end_ns[np.clip(st.anchor, 0, None)], 0)
    h_t = np.where(st.anchor_at_end, h_t, gr.host.ts_ns[np.clip(st.anchor, 0, None)])
    b_pts = np.where(
        st.anchor >= 0, np.where(st.anchor_at_end, n_h, 0) + np.clip(st.anchor, 0, None), -1
    )
    b_gap = st.anchor_ns.astype(np.int64).copy()
    if st.last_gpu >= 0:  # the last step ends with its GPU work when that ends later
        end_gpu = int(gr.gpu.end_ns[st.last_gpu]) + st.last_gpu_ns
        if b_pts[-1] < 0 or end_gpu >= int(h_t[-1] + b_gap[-1]):
            b_pts[-1], b_gap[-1] = ge + st.last_gpu, st.last_gpu_ns
    b_root, b_off, b_slack, b_alt = reduce(np.clip(b_pts, 0, None))
    b_off = b_off + b_gap
    free = (b_pts < 0) | (b_root < 0)  # the measured boundary
    b_root[free], b_slack[free], b_alt[free] = -1, 0, -1
    b_off[free] = st.bounds_ns[free] + origin_ns
    return Skeleton(
        coll_root=c_root,
        coll_off_ns=c_off,
        coll_slack_ns=c_slack,
        coll_alt_root=c_alt,
        bound_root=b_root,
        bound_off_ns=b_off,
        bound_slack_ns=b_slack,
        bound_alt_root=b_alt,
    )
