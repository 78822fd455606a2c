"""A replayed step's time, read off the replayed nodes: the longer of its host cycle and its GPU
cycle, as in a steady state where every step is like it.

- **Host cycle**: from the step's boundary to the next (each boundary follows the main thread's
  last call before it: :class:`advisor.replay.structure.Steps`), less the time the main thread
  waited while the GPU still ran work issued before the step (the backlog). In a steady state
  that work is the previous step's own, queued ahead of the host, and it is counted in that
  step's GPU cycle: a step whose opening sync waits for the previous step's kernels books that
  wait to the GPU.
- **GPU cycle**: on each stream, from the start of the step's first own GPU activity there to
  the end of its last (:func:`advisor.replay.structure.step_keys`: the work the step issued);
  the longest over the streams. A stream runs its work in order, so the next step's work there
  starts after this step's: the GPU time the step's work needs, with the gaps in which that
  stream waited for the host or another stream, and its tail that runs past the step's end (in
  a steady state, into the next step); never less than the step's own GPU time on the stream.

A host that waits for its own GPU work (a sync on the step's own kernels) keeps that wait in
its host cycle: the host work after it cannot overlap the GPU work before it.
"""

from __future__ import annotations

import numpy as np

from advisor.derive.timeline import covered_by, union
from advisor.replay.cache import OwnWork
from advisor.replay.model import Graph
from advisor.replay.mods import Column


def own_work(gr: Graph) -> OwnWork:
    """The graph's :class:`OwnWork`, once (in its cache). Replay keeps stream order, so the
    first activity of a set on a stream has its earliest start, and the last one (or, where
    the trace shows activities of one stream overlapping, the one that ended last) its latest
    end."""
    c = gr.cache
    if c.own_work is None:
        g, h, st = gr.gpu, gr.host, gr.steps
        n = max(len(st.bounds_ns) - 1, 0)
        first: list[list[int]] = [[] for _ in range(n)]
        last: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        keyed = np.flatnonzero(g.step_key >= 0)
        if len(keyed):
            key, ts, end = g.step_key[keyed], g.ts_ns[keyed], g.end_ns[keyed]
            for k, j in _pick_per_key(key, keyed, ts, first=True):
                first[k // g.n_streams].append(j)
            by_end = dict(_pick_per_key(key, keyed, end, first=False))
            for k, j in _pick_per_key(key, keyed, ts, first=False):
                last[k // g.n_streams].append((j, by_end[k]))
        own_step = np.where(g.step_key >= 0, g.step_key // g.n_streams, -1)
        issued = np.where(g.launch >= 0, h.ts_ns[np.clip(g.launch, 0, None)], g.ts_ns)
        carried: list[list[int]] = [[] for _ in range(n)]
        for k in np.flatnonzero(st.chosen).tolist() if n else []:
            lo, hi = int(st.bounds_ns[k]), int(st.bounds_ns[k + 1])
            before = (issued < lo) | ((g.launch < 0) & (g.ts_ns < hi) & (own_step != k))
            js = np.flatnonzero(before & (g.end_ns > lo) & (own_step != k))
            if len(js):
                for order in (g.ts_ns[js], g.end_ns[js]):
                    carried[k] += [j for _, j in _pick_per_key(g.stream[js], js, order, False)]
        step_of = np.searchsorted(st.bounds_ns[:-1], h.ts_ns, side="right") - 1
        calls = np.flatnonzero(h.waits & ~h.fixed & (h.thread == st.main_thread))
        waits = [(i, int(step_of[i])) for i in calls.tolist() if 0 <= step_of[i] < n]
        c.own_work = OwnWork(first, last, carried, waits, keyed, g.step_key[keyed])
    return c.own_work


def _pick_per_key(
    key: np.ndarray, node: np.ndarray, order: np.ndarray, first: bool
) -> list[tuple[int, int]]:
    """Per key (in key order): the first (or last) node by ``order``."""
    o = np.lexsort((order, key))
    k_sorted, j_sorted = key[o], node[o]
    new = np.r_[True, k_sorted[1:] != k_sorted[:-1]]
    pick = new if first else np.r_[new[1:], True]
    return list(zip(k_sorted[pick].tolist(), j_sorted[pick].tolist(), strict=True))


def gpu_cycle_ns(gr: Graph, gs: Column, ge: Column, dur_ns: np.ndarray) -> np.ndarray:
    """Per step: the longest span of its own GPU work on one stream, from replayed activity
    starts ``gs`` and ends ``ge``, and never less than that work's time on the stream
    (``dur_ns``: the replayed durations; 0: no own work)."""
    ow = own_work(gr)
    n = len(ow.first)
    out = np.zeros(n, dtype=np.int64)
    for k, (fs, ls) in enumerate(zip(ow.first, ow.last, strict=True)):
        if fs:
            out[k] = max(max(ge[b], ge[c]) - gs[a] for a, (b, c) in zip(fs, ls, strict=True))
    if n and len(ow.keyed):
        m = gr.gpu.n_streams
        per = np.bincount(ow.key_of, weights=dur_ns[ow.keyed], minlength=n * m)[: n * m]
        out = np.maximum(out, per.reshape(n, m).max(axis=1).astype(np.int64))
    return out


def carried_wait_ns(gr: Graph, own_ns: Column, hs: Column, he: Column, ge: Column) -> np.ndarray:
    """Per step: how long the main thread waited while the GPU still ran work issued before the
    step (the part of each wait, beyond the call's own time, before that work ended: own work
    queued behind it could not run sooner either)."""
    ow = own_work(gr)
    out = np.zeros(len(ow.first), dtype=np.int64)
    backlog = [max((ge[j] for j in js), default=None) for js in ow.carried]
    for i, k in ow.waits:
        t = backlog[k]
        if t is not None:
            out[k] += max(0, min(he[i], t) - (hs[i] + own_ns[i]))
    return out


def host_own_ns(gr: Graph) -> np.ndarray:
    """Per steady step (measured): the host's own work, the step less the time the main thread
    spent waiting for the device: each waiting call beyond its own cost
    (:mod:`advisor.derive.waits`), the untraced waits included, clipped to the step. A call
    that waits for the work it launched itself (a blocking copy) launches it first: its first
    launch latency is its own."""
    st, h = gr.steps, gr.host
    b = st.bounds_ns
    n = max(len(b) - 1, 0)
    out = np.diff(b).astype(np.int64) if n else np.zeros(0, dtype=np.int64)
    calls = np.flatnonzero(h.waits & (h.thread == st.main_thread))
    if not n or not len(calls):
        return out
    aw = h.awaited[calls]
    itself = gr.gpu.launch[np.clip(aw, 0, None)] == calls
    own = np.where(itself, np.maximum(h.own_ns[calls], gr.launch_latency_ns), h.own_ns[calls])
    lo = h.ts_ns[calls] + own
    hi = h.end_ns[calls]
    keep = hi > lo
    us, ue = union(lo[keep], hi[keep])
    return out - covered_by(us, ue, b[:-1], b[1:])
