"""What bounds each step: the critical path of the step graph, by kind of work.

The path is walked back from each step's end through the edge that decided every node's
measured time (:mod:`advisor.replay.model`): a sync that waited leads to the GPU work it waited
for, a GPU activity to its launch, the previous activity on its stream or the one it waited
for on another stream, a host call to the previous call on its thread (or the thread it waited
for). Each stretch of the path is counted as:

- ``host``: host calls, Python and other host work between them, launch latency;
- ``gpu``: computation kernels (and gaps between kernels on a stream);
- ``comm``: communication kernels moving data;
- ``copies``: memcpy and memset;
- ``peer``: communication kernels waiting for a peer (one-rank estimate: the part beyond the
  shortest instance of the same collective, see :mod:`advisor.derive.peerwait`).

``run.bound`` gives the median shares over the three replayed steady steps closest to the
median step and the largest (``by``); HTA's
critical-path analysis calls a step CPU-bound or GPU-bound in the same way.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from advisor.replay.fixes import comm_wait_ns
from advisor.replay.model import Graph, graph
from advisor.trace.model import Trace

KINDS = ("host", "gpu", "comm", "copies", "peer")
WALK_STEPS = 3  # the replayed steps closest to the median whose critical paths are walked
_GPU_KIND = {0: "comm", 1: "gpu", 2: "copies", 3: "copies"}


def step_bound(trace: Trace) -> dict[str, Any] | None:
    """``run.bound``: ``by`` (the largest share), ``shares_pct`` (median per kind over the
    steady steps) and ``per_step`` (step number and shares); None without GPU work or steps."""
    gr = graph(trace)
    if not gr.n_g or not gr.n_h or len(gr.bounds) < 2 or not (gr.anchor >= 0).any():
        return None
    wait = np.zeros(gr.n_g, dtype=np.int64)
    comm = np.flatnonzero(gr.g_kind == 0)
    if len(comm):
        wait[comm] = np.minimum(comm_wait_ns(trace, gr.g_row[comm]), gr.g_end[comm] - gr.g_ts[comm])
    rows = []
    steps = trace.steps["step"].to_numpy()
    d = np.diff(gr.bounds)
    ks = np.flatnonzero(gr.chosen)
    ks = np.sort(ks[np.argsort(np.abs(d[ks] - np.median(d[ks])), kind="stable")[:WALK_STEPS]])
    lists = _Lists(gr, wait)
    for k in ks.tolist():
        got = _walk(gr, lists, k)
        if got is None:
            continue
        total = sum(got.values())
        if total <= 0:
            continue
        rows.append(
            (
                int(steps[k]) if k < len(steps) else k,
                {c: round(100.0 * got[c] / total, 1) for c in KINDS},
            )
        )
    if not rows:
        return None
    med = {c: round(float(np.median([r[1][c] for r in rows])), 1) for c in KINDS}
    return {
        "by": max(KINDS, key=lambda c: med[c]),
        "shares_pct": med,
        "per_step": [{"step": s, **sh} for s, sh in rows],
    }


class _Lists:
    """The graph's arrays the walk reads, as lists (the walk indexes one node at a time)."""

    def __init__(self, gr: Graph, wait: np.ndarray) -> None:
        self.h_ts, self.h_end = gr.h_ts.tolist(), gr.h_end.tolist()
        self.g_ts, self.g_end = gr.g_ts.tolist(), gr.g_end.tolist()
        self.h_await, self.h_prev, self.h_q = (
            gr.h_await.tolist(),
            gr.h_prev.tolist(),
            gr.h_q.tolist(),
        )
        self.g_kind, self.g_bind = gr.g_kind.tolist(), gr.g_bind.tolist()
        self.g_launch, self.g_prev, self.g_dep = (
            gr.g_launch.tolist(),
            gr.g_prev.tolist(),
            gr.g_dep.tolist(),
        )
        self.wait = wait.tolist()


def _walk(gr: Graph, ls: _Lists, k: int) -> dict[str, int] | None:
    lo, hi = int(gr.bounds[k]), int(gr.bounds[k + 1])
    got = dict.fromkeys(KINDS, 0)

    def add(kind: str, a: int, b: int) -> None:
        a, b = max(a, lo), min(b, hi)
        if b > a:
            got[kind] += b - a

    h_ts, h_end, g_ts, g_end = ls.h_ts, ls.h_end, ls.g_ts, ls.g_end
    a = int(gr.anchor[k + 1])
    if k + 1 == len(gr.bounds) - 1 and gr.last_gpu >= 0:
        state, i, t = "g", gr.last_gpu, g_end[gr.last_gpu]
    elif a >= 0:
        state, i = ("he", a) if gr.anchor_end[k + 1] else ("hs", a)
        t = h_end[a] if state == "he" else h_ts[a]
    else:
        return None
    add("host", t, hi)
    for _ in range(gr.n_h + gr.n_g + 2):
        if t <= lo:
            break
        if state == "he":  # a host call, from its end
            aw = ls.h_await[i]
            if aw >= 0 and g_end[aw] > h_ts[i]:
                add("host", g_end[aw], h_end[i])
                state, i, t = "g", aw, g_end[aw]
                continue
            add("host", h_ts[i], h_end[i])
            state, t = "hs", h_ts[i]
            continue
        if state == "hs":  # a host call, from its start
            p, q = ls.h_prev[i], ls.h_q[i]
            pe = h_end[p] if p >= 0 else None
            qe = h_end[q] if q >= 0 else None
            if qe is not None and (pe is None or qe >= pe):
                add("host", qe, h_ts[i])
                state, i, t = "he", q, qe
            elif pe is not None:
                add("host", pe, h_ts[i])
                state, i, t = "he", p, pe
            else:
                add("host", lo, h_ts[i])
                break
            continue
        # a GPU activity, from its end
        kind = _GPU_KIND.get(ls.g_kind[i], "gpu")
        s, e = g_ts[i], g_end[i]
        w = ls.wait[i]
        if kind == "comm" and w > 0:
            add("peer", s, s + w)
            add("comm", s + w, e)
        else:
            add(kind, s, e)
        b = ls.g_bind[i]
        if b == 0 and ls.g_launch[i] >= 0:
            h = ls.g_launch[i]
            add("host", h_ts[h], s)  # launch latency: the GPU waited for the host
            state, i, t = "hs", h, h_ts[h]
        elif b == 1 and ls.g_prev[i] >= 0:
            j = ls.g_prev[i]
            add(kind if kind != "comm" else "gpu", g_end[j], s)
            i, t = j, g_end[j]
        elif b == 2 and ls.g_dep[i] >= 0:
            j = ls.g_dep[i]
            add("gpu", g_end[j], s)
            i, t = j, g_end[j]
        else:
            add("host", lo, s)
            break
    return got
