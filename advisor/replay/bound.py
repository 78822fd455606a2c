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
  shortest instance of the same collective, see :mod:`advisor.derive.peerwait`);
- ``untraced``: waits on work the trace does not show (:mod:`advisor.derive.untraced`): neither
  the host's work nor the GPU's (in ``shares_pct`` only where the path holds some).

A call that waits (:mod:`advisor.derive.waits`: by the API's rules or by its timing, whatever
its name) leads the path into the GPU work it waited for, so its wait is never counted as host.

Where the path ends: at the step's end, or, when the step's GPU cycle is longer than its host
cycle (:mod:`advisor.replay.steptime`), at the end of the GPU work the step issued, which then
runs past the step's end and holds up the next step.

``run.bound`` gives the median shares over the three replayed steady steps closest to the
median step and the largest (``by``); HTA's
critical-path analysis calls a step CPU-bound or GPU-bound in the same way.

The bound must agree with the evidence the trace shows without the critical path (the GPU busy
share, how far launches run ahead of their kernels, the host's own work):
:func:`advisor.replay.evidence.consistent` states the rule.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from advisor.replay.evidence import (  # (the evidence the bound agrees with; also read here)
    Evidence,
    consistent,
    evidence,
    gpu_occupied_pct,
    launch_lead_ms,
)
from advisor.replay.fixes import comm_wait_ns
from advisor.replay.model import Bind, Graph, Work, graph
from advisor.replay.steptime import carried_wait_ns, gpu_cycle_ns, own_work
from advisor.trace.model import Trace

__all__ = ["Evidence", "consistent", "evidence", "gpu_occupied_pct", "launch_lead_ms", "step_bound"]

KINDS = ("host", "gpu", "comm", "copies", "peer", "untraced")
WALK_STEPS = 3  # the replayed steps closest to the median whose critical paths are walked
_GPU_KIND = {
    Work.COMM: "comm",
    Work.KERNEL: "gpu",
    Work.MEMCPY: "copies",
    Work.MEMSET: "copies",
    Work.UNTRACED: "untraced",
}


def step_bound(trace: Trace) -> dict[str, Any] | None:
    """``run.bound``: ``by`` (the largest share), ``shares_pct`` (median per kind over the
    steady steps) and ``per_step`` (step number and shares); None without GPU work or steps."""
    gr = graph(trace)
    g, st = gr.gpu, gr.steps
    if not gr.n_g or not gr.n_h or len(st.bounds_ns) < 2 or not (st.anchor >= 0).any():
        return None
    wait = np.zeros(gr.n_g, dtype=np.int64)
    comm = np.flatnonzero(g.kind == Work.COMM)
    if len(comm):
        wait[comm] = np.minimum(comm_wait_ns(trace, g.row[comm]), g.end_ns[comm] - g.ts_ns[comm])
    rows = []
    steps = trace.steps["step"].to_numpy()
    d = np.diff(st.bounds_ns)
    ks = np.flatnonzero(st.chosen)
    ks = np.sort(ks[np.argsort(np.abs(d[ks] - np.median(d[ks])), kind="stable")[:WALK_STEPS]])
    lists = _Lists(gr, wait)
    # where each step's path ends: at the end of its own GPU work when that is the longer
    # cycle (advisor.replay.steptime), else at its end
    gpu_cycle = gpu_cycle_ns(gr, lists.g_ts, lists.g_end, g.end_ns - g.ts_ns)
    host_cycle = d - carried_wait_ns(
        gr, gr.host.own_ns.tolist(), lists.h_ts, lists.h_end, lists.g_end
    )
    for k in ks.tolist():
        got = _walk(gr, lists, k, from_gpu=bool(gpu_cycle[k] > host_cycle[k]))
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
    # the untraced waits' share only where the path holds some (findings.json adds it then)
    kinds = [c for c in KINDS if c != "untraced" or any(r[1][c] > 0 for r in rows)]
    med = {c: round(float(np.median([r[1][c] for r in rows])), 1) for c in kinds}
    return {
        "by": max(kinds, key=lambda c: med[c]),
        "shares_pct": med,
        "per_step": [{"step": s, **{c: sh[c] for c in kinds}} for s, sh in rows],
    }


class _Lists:
    """The graph's arrays the walk reads, as lists (the walk indexes one node at a time)."""

    def __init__(self, gr: Graph, wait: np.ndarray) -> None:
        h, g = gr.host, gr.gpu
        self.h_ts, self.h_end = h.ts_ns.tolist(), h.end_ns.tolist()
        self.g_ts, self.g_end = g.ts_ns.tolist(), g.end_ns.tolist()
        self.awaited, self.h_prev, self.handoff = (
            h.awaited.tolist(),
            h.prev.tolist(),
            h.handoff.tolist(),
        )
        self.kind, self.bind = g.kind.tolist(), g.bind.tolist()
        self.launch, self.g_prev, self.dep = g.launch.tolist(), g.prev.tolist(), g.dep.tolist()
        self.wait = wait.tolist()


def _walk(gr: Graph, ls: _Lists, k: int, from_gpu: bool) -> dict[str, int] | None:
    st = gr.steps
    lo, hi = int(st.bounds_ns[k]), int(st.bounds_ns[k + 1])
    got = dict.fromkeys(KINDS, 0)

    def add(kind: str, a: int, b: int) -> None:
        a, b = max(a, lo), min(b, hi)
        if b > a:
            got[kind] += b - a

    h_ts, h_end, g_ts, g_end = ls.h_ts, ls.h_end, ls.g_ts, ls.g_end
    a = int(st.anchor[k + 1])
    tail = [j for pair in own_work(gr).last[k] for j in pair]  # (may run past the step's end)
    j = max(tail, key=lambda x: g_end[x]) if tail and from_gpu else -1
    if j >= 0 and g_end[j] > hi:
        state, i, t = "g", j, g_end[j]
    elif k + 1 == len(st.bounds_ns) - 1 and st.last_gpu >= 0:
        state, i, t = "g", st.last_gpu, g_end[st.last_gpu]
    elif a >= 0:
        state, i = ("he", a) if st.anchor_at_end[k + 1] else ("hs", a)
        t = h_end[a] if state == "he" else h_ts[a]
    else:
        return None
    add("host", t, hi)
    for _ in range(gr.n_h + gr.n_g + 2):
        if t <= lo:
            break
        if state == "he":  # a host call, from its end
            aw = ls.awaited[i]
            if aw >= 0 and g_end[aw] > h_ts[i]:
                add("host", g_end[aw], h_end[i])
                state, i, t = "g", aw, g_end[aw]
                continue
            add("host", h_ts[i], h_end[i])
            state, t = "hs", h_ts[i]
            continue
        if state == "hs":  # a host call, from its start
            p, q = ls.h_prev[i], ls.handoff[i]
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
        kind = _GPU_KIND.get(ls.kind[i], "gpu")
        s, e = g_ts[i], g_end[i]
        w = ls.wait[i]
        if kind == "comm" and w > 0:
            add("peer", s, s + w)
            add("comm", s + w, e)
        else:
            add(kind, s, e)
        b = ls.bind[i]
        if b == Bind.LAUNCH and ls.launch[i] >= 0:
            h = ls.launch[i]
            add("host", h_ts[h], s)  # launch latency: the GPU waited for the host
            state, i, t = "hs", h, h_ts[h]
        elif b == Bind.STREAM and ls.g_prev[i] >= 0:
            j = ls.g_prev[i]
            add(kind if kind not in ("comm", "untraced") else "gpu", g_end[j], s)
            i, t = j, g_end[j]
        elif b == Bind.CROSS_STREAM and ls.dep[i] >= 0:
            j = ls.dep[i]
            add("gpu", g_end[j], s)
            i, t = j, g_end[j]
        else:
            add("host", lo, s)
            break
    return got
