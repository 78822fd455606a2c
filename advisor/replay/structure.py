"""The step graph's structure beyond its edges (:mod:`advisor.replay.model` builds the graph
with these): the replayed window (which steps are replayed, which nodes stay at their measured
times, where a thread's first call in a step starts), the step each activity's GPU time counts
against, the cross-stream waits, the replay order, and the anchors the step boundaries are read
from."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from advisor.derive.runtime import CLOCK_TOL_NS
from advisor.trace.model import Trace

CROSS_STREAM_TOL_NS = 20_000  # ...whose activity ended at most this long before the start


def chosen_steps(st: pd.DataFrame) -> np.ndarray:
    """The steps replayed: every steady step (a cause found in some steps only is valued over
    all of them: :mod:`advisor.replay.whatif`)."""
    return np.ones(len(st), dtype=bool)


def in_replayed_steps(
    st: pd.DataFrame, chosen: np.ndarray, t: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Whether each time falls in a replayed step, and that step's start."""
    s = st["ts_ns"].to_numpy(np.int64)
    e = st["end_ns"].to_numpy(np.int64)
    if not len(s):
        return np.zeros(len(t), dtype=bool), np.zeros(len(t), dtype=np.int64)
    k = np.searchsorted(s, t, side="right") - 1
    kk = np.clip(k, 0, None)
    return (k >= 0) & (t < e[kk]) & chosen[kk], s[kk]


@dataclass(frozen=True, eq=False)
class Window:
    """The replayed window: the steps replayed and which nodes keep their measured times."""

    chosen: np.ndarray  # bool per step: replayed
    host_fixed: np.ndarray  # bool per host call: outside the replayed steps
    gpu_fixed: np.ndarray  # bool per GPU activity: launched (else run) outside them
    origin_ns: np.ndarray  # per host call: the start of its step
    prev: np.ndarray  # host order cut at the window: a thread's first call in it has none
    gap_ns: np.ndarray  # ...and starts this long after its step's start


def replayed_window(
    st: pd.DataFrame,
    h_ts: np.ndarray,
    g_ts: np.ndarray,
    prev: np.ndarray,
    gap_ns: np.ndarray,
    handoff: np.ndarray,
    launch: np.ndarray,
) -> Window:
    """The replayed steps (:func:`chosen_steps`); nodes outside them keep their measured times
    (a GPU activity goes with its launch call). A thread's first call in a replayed step that
    no hand-off starts follows the step's start: the host time before it in the step is host
    work a fix may shrink."""
    chosen = chosen_steps(st)
    h_in, origin = in_replayed_steps(st, chosen, h_ts)
    h_fixed = ~h_in
    first = (~h_fixed) & ((prev < 0) | h_fixed[np.clip(prev, 0, None)]) & (handoff < 0)
    prev, gap_ns = prev.copy(), gap_ns.copy()
    prev[first] = -1
    gap_ns[first] = np.maximum(h_ts[first] - origin[first], 0)
    g_fixed = np.where(
        launch >= 0, h_fixed[np.clip(launch, 0, None)], ~in_replayed_steps(st, chosen, g_ts)[0]
    )
    if not len(st):
        h_fixed[:] = True
        g_fixed[:] = True
    return Window(chosen, h_fixed, g_fixed, origin, prev, gap_ns)


def step_of(st: pd.DataFrame, t: np.ndarray) -> np.ndarray:
    """The step each time falls in or after (-1: before the first)."""
    if not len(st):
        return np.full(len(t), -1)
    return np.searchsorted(st["ts_ns"].to_numpy(np.int64), t, side="right") - 1


def step_keys(
    st: pd.DataFrame,
    chosen: np.ndarray,
    issued_ns: np.ndarray,
    start_ns: np.ndarray,
    stream: np.ndarray,
    fixed: np.ndarray,
    launched: np.ndarray,
) -> tuple[np.ndarray, int]:
    """The steps' own GPU work: which replayed step issued each activity (its GPU time counts
    against that step): ``step * n_streams + stream code`` (-1: none), and ``n_streams``.

    An activity was issued by the step its launch call started in (``issued_ns``: the launch's
    start; without a launch in the trace, ``launched`` False, its own start). One whose
    launch is not in the trace belongs to the step it started in, unless it ran on its stream
    before the first launched activity of the step there: then the previous step queued it,
    and it is that step's work when that step is replayed too (else: -1, work of a step the
    replay does not see)."""
    sc, _ = pd.factorize(stream)
    n_streams = max(int(sc.max()) + 1, 1) if len(stream) else 1
    hi = int(st["end_ns"].max()) if len(st) else 0
    k = step_of(st, issued_ns)
    inside = (k >= 0) & (issued_ns < hi) & ~fixed & chosen[np.clip(k, 0, None)]
    key = np.where(inside, k * n_streams + sc, -1).astype(np.int64)
    unknown = inside & ~launched
    if unknown.any():
        own = inside & launched
        first = np.full(len(st) * n_streams, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(first, key[own], start_ns[own])
        first_own = first[np.clip(key, 0, None)]
        none = np.iinfo(np.int64).max  # (no launched activity there: all of it is the step's)
        queued = np.flatnonzero(unknown & (first_own < none) & (start_ns < first_own))
        before = k[queued] - 1  # the step that queued it, when that step is replayed too
        seen = (before >= 0) & chosen[np.clip(before, 0, None)]
        key[queued] = np.where(seen, key[queued] - n_streams, -1)
    return key, n_streams


def median_step(st: pd.DataFrame) -> int:
    """The step closest to the median step (-1: none)."""
    if not len(st):
        return -1
    d = st["dur_ns"].to_numpy()
    return int(np.argmin(np.abs(d - np.median(d))))


def one_step_events(
    order: list[int], h_step: np.ndarray, g_step: np.ndarray, step: int
) -> list[int]:
    """The events of ``order`` that belong to ``step`` (a host call's step is the one it
    started in, an activity's its launch call's, else the one it started in)."""
    n_h, n_g = len(h_step), len(g_step)
    codes = np.asarray(order, dtype=np.int64)
    ev_k = np.where(
        codes < n_h,
        h_step[np.clip(codes, 0, n_h - 1)],
        np.where(
            codes < n_h + n_g,
            g_step[np.clip(codes - n_h, 0, max(n_g - 1, 0))],
            h_step[np.clip(codes - n_h - n_g, 0, n_h - 1)],
        ),
    )
    return codes[ev_k == step].tolist() if len(codes) else []


def cross_stream_waits(
    late: np.ndarray, g_ts: np.ndarray, g_end: np.ndarray, g_stream: np.ndarray
) -> np.ndarray:
    """For each late activity, the activity on another stream of its device that ended last in
    [start - CROSS_STREAM_TOL_NS, start] (the later one in end order on a tie), -1: all the
    candidates of every activity at once, in pieces of bounded size."""
    eo = np.argsort(g_end, kind="stable")
    ends_sorted = g_end[eo]
    out = np.full(len(late), -1, dtype=np.int64)
    piece = 1 << 16
    for a in range(0, len(late), piece):
        js = late[a : a + piece]
        hi = np.searchsorted(ends_sorted, g_ts[js] + 1, side="left")
        lo = np.searchsorted(ends_sorted, g_ts[js] - CROSS_STREAM_TOL_NS, side="left")
        cnt = np.maximum(hi - lo, 0)
        if not cnt.sum():
            continue
        who = np.repeat(np.arange(len(js)), cnt)  # each candidate's late activity
        # candidate positions from the last end down, per late activity
        step = np.arange(len(who)) - np.repeat(np.cumsum(cnt) - cnt, cnt)
        c = eo[np.repeat(hi - 1, cnt) - step]
        sj, sc = g_stream[js][who], g_stream[c]
        ok = np.flatnonzero((sc != sj) & (sc >> 32 == sj >> 32))
        first_of, at = np.unique(who[ok], return_index=True)  # the first match of each
        out[a + first_of] = c[ok[at]]
    return out


def replay_order(
    thread: np.ndarray,
    h_ts: np.ndarray,
    h_end: np.ndarray,
    h_fixed: np.ndarray,
    waits: np.ndarray,
    awaited: np.ndarray,
    g_ts: np.ndarray,
    launch: np.ndarray,
    g_fixed: np.ndarray,
    stream: np.ndarray,
) -> list[int]:
    """Replay order: every node after the nodes it reads. Measured times, with each key moved
    past a predecessor's when the clocks put the predecessor later (keys never decrease along
    a thread or a stream; a sync ends after what it waited for started)."""
    n_h, n_g = len(h_ts), len(g_ts)
    go = np.lexsort((g_ts, stream))
    gseg = np.cumsum(np.r_[True, stream[go][1:] != stream[go][:-1]]) if n_g else go
    ho = np.lexsort((h_ts, thread))
    hseg = np.repeat(thread[ho], 2)
    hs_key, he_key = h_ts.copy(), h_ts.copy()
    gk = g_ts.copy()
    for _ in range(2):
        if n_g:
            gk = np.maximum(g_ts, np.where(launch >= 0, hs_key[np.clip(launch, 0, None)], g_ts))
            gk[go] = pd.Series(gk[go]).groupby(gseg).cummax().to_numpy()
            aw = np.clip(awaited, 0, None)
            he_key = np.where(waits, np.maximum(h_end, gk[aw] + 1), hs_key)
        seq = np.stack([hs_key[ho], he_key[ho]], axis=1).ravel()
        seq = pd.Series(seq).groupby(hseg).cummax().to_numpy().reshape(-1, 2)
        hs_key[ho], he_key[ho] = seq[:, 0], seq[:, 1]
    hs = np.flatnonzero(~h_fixed)
    gs = np.flatnonzero(~g_fixed)
    ss = np.flatnonzero(waits & ~h_fixed)
    keys = np.concatenate([hs_key[hs], gk[gs], he_key[ss]])
    kind = np.concatenate([np.ones(len(hs)), np.full(len(gs), 2), np.zeros(len(ss))])
    code = np.concatenate([hs, n_h + gs, n_h + n_g + ss])
    o = np.lexsort((kind, keys))
    return code[o].tolist()


@dataclass(frozen=True, eq=False)
class Steps:
    """The steady steps in the graph: their boundaries, which are replayed, and the host calls
    on the main thread that place the boundaries in the replay."""

    bounds_ns: np.ndarray  # step starts, then the last step's end (len n_steps + 1)
    chosen: np.ndarray  # bool per step: replayed (the others keep their measured times)
    median_step: int  # the step closest to the median (the range ends replay it alone), -1
    anchor: np.ndarray  # per boundary: the main thread's last call before it, -1
    anchor_ns: np.ndarray  # the boundary is this long after the anchor's end (or start)
    anchor_at_end: np.ndarray  # bool: from the anchor's end (it ended before the boundary)
    last_gpu: int  # the GPU activity that ends the last step, -1
    last_gpu_ns: int  # the last boundary is this long after that activity's end
    main_thread: int  # thread code of the step markers' thread, -1


def steps(
    trace: Trace,
    st: pd.DataFrame,
    chosen: np.ndarray,
    thread: np.ndarray,
    trace_tid: np.ndarray,
    h_ts: np.ndarray,
    h_end: np.ndarray,
    g_end: np.ndarray,
    g_fixed: np.ndarray,
) -> Steps:
    """Step boundaries and the host calls on the main thread that place them in the replay."""
    n = len(st)
    bounds = (
        np.r_[st["ts_ns"].to_numpy(np.int64), st["end_ns"].to_numpy(np.int64)[-1:]]
        if n
        else np.zeros(0, np.int64)
    )
    anchor = np.full(len(bounds), -1, dtype=np.int64)
    off = np.zeros(len(bounds), dtype=np.int64)
    ends_at = np.zeros(len(bounds), dtype=bool)
    if not len(h_ts) or not n:
        return Steps(bounds, chosen, median_step(st), anchor, off, ends_at, -1, 0, -1)
    main = main_thread(trace, thread, trace_tid, h_ts, int(bounds[0]), int(bounds[-1]))
    idx = np.flatnonzero(thread == main)
    # each boundary follows the main thread's last call before it: host work shrunk after
    # that call (at the start of the next step) moves the next boundary, not this one
    j = np.searchsorted(h_ts[idx], bounds, side="left") - 1
    ok = j >= 0
    anchor[ok] = idx[j[ok]]
    a = anchor[ok]
    off[ok] = bounds[ok] - np.where(h_end[a] <= bounds[ok], h_end[a], h_ts[a])
    ends_at[ok] = h_end[a] <= bounds[ok]
    last_gpu, last_off, last = -1, 0, len(bounds) - 1
    inwin = np.flatnonzero(~g_fixed & (g_end <= bounds[last]) & (g_end >= bounds[last - 1]))
    if len(inwin):  # a step that ends with its GPU work (markers other than ProfilerStep)
        lg = int(inwin[np.argmax(g_end[inwin])])
        if bounds[last] - g_end[lg] <= CLOCK_TOL_NS:
            last_gpu, last_off = lg, int(bounds[last] - g_end[lg])
    return Steps(
        bounds, chosen, median_step(st), anchor, off, ends_at, last_gpu, last_off, int(main)
    )


def main_thread(
    trace: Trace, thread: np.ndarray, trace_tid: np.ndarray, h_ts: np.ndarray, lo: int, hi: int
) -> int:
    """The thread the step markers are on (else the one with the most calls in the window)."""
    ann = trace.annotations
    if len(ann) and not trace.meta.synthetic_steps:
        m = ann["name"].astype(str).str.startswith("ProfilerStep#").to_numpy()
        if m.any():
            t = ann["tid"].to_numpy()[m][0]
            hit = np.flatnonzero(trace_tid == t)
            if len(hit):
                return int(thread[hit[0]])
    inw = (h_ts >= lo) & (h_ts < hi)
    vals = thread[inw] if inw.any() else thread
    return int(np.bincount(vals).argmax())
