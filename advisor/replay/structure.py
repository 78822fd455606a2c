"""The step graph's structure beyond its per-node arrays (:mod:`advisor.replay.model` builds
the graph with these): which steps are replayed, the cross-stream waits, the replay order, and
the anchors the step boundaries are read from."""

from __future__ import annotations

import numpy as np
import pandas as pd

from advisor.derive.runtime import CLOCK_TOL_NS
from advisor.trace.model import Trace

MAX_REPLAY_STEPS = 8
MAX_REPLAY_EVENTS = 30_000  # host calls and GPU activities replayed (about 30 ms a replay)
CROSS_STREAM_TOL_NS = 20_000  # ...whose activity ended at most this long before the start


def chosen_steps(st: pd.DataFrame, times: np.ndarray) -> np.ndarray:
    """The steps replayed: those closest to the median step, as many as fit in
    MAX_REPLAY_EVENTS nodes (``times``: every node's start), at least one and at most
    MAX_REPLAY_STEPS: the replay's cost stays bounded; the saving is a median anyway."""
    d = st["dur_ns"].to_numpy(np.int64)
    out = np.zeros(len(d), dtype=bool)
    if not len(d):
        return out
    k = np.searchsorted(st["ts_ns"].to_numpy(np.int64), times, side="right") - 1
    n = np.bincount(k[k >= 0], minlength=len(d))[: len(d)]
    total = 0
    for i in np.argsort(np.abs(d - np.median(d)), kind="stable")[:MAX_REPLAY_STEPS].tolist():
        if out.any() and total + n[i] > MAX_REPLAY_EVENTS:
            break
        out[i] = True
        total += int(n[i])
    return out


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
    h_tid: np.ndarray,
    h_ts: np.ndarray,
    h_end: np.ndarray,
    h_fixed: np.ndarray,
    h_sync: np.ndarray,
    h_await: np.ndarray,
    g_ts: np.ndarray,
    g_launch: np.ndarray,
    g_fixed: np.ndarray,
    g_stream: np.ndarray,
) -> list[int]:
    """Replay order: every node after the nodes it reads. Measured times, with each key moved
    past a predecessor's when the clocks put the predecessor later (keys never decrease along
    a thread or a stream; a sync ends after what it waited for started)."""
    n_h, n_g = len(h_ts), len(g_ts)
    go = np.lexsort((g_ts, g_stream))
    gseg = np.cumsum(np.r_[True, g_stream[go][1:] != g_stream[go][:-1]]) if n_g else go
    ho = np.lexsort((h_ts, h_tid))
    hseg = np.repeat(h_tid[ho], 2)
    hs_key, he_key = h_ts.copy(), h_ts.copy()
    gk = g_ts.copy()
    for _ in range(2):
        if n_g:
            gk = np.maximum(g_ts, np.where(g_launch >= 0, hs_key[np.clip(g_launch, 0, None)], g_ts))
            gk[go] = pd.Series(gk[go]).groupby(gseg).cummax().to_numpy()
            aw = np.clip(h_await, 0, None)
            he_key = np.where(h_sync, np.maximum(h_end, gk[aw] + 1), hs_key)
        seq = np.stack([hs_key[ho], he_key[ho]], axis=1).ravel()
        seq = pd.Series(seq).groupby(hseg).cummax().to_numpy().reshape(-1, 2)
        hs_key[ho], he_key[ho] = seq[:, 0], seq[:, 1]
    hs = np.flatnonzero(~h_fixed)
    gs = np.flatnonzero(~g_fixed)
    ss = np.flatnonzero(h_sync & ~h_fixed)
    keys = np.concatenate([hs_key[hs], gk[gs], he_key[ss]])
    kind = np.concatenate([np.ones(len(hs)), np.full(len(gs), 2), np.zeros(len(ss))])
    code = np.concatenate([hs, n_h + gs, n_h + n_g + ss])
    o = np.lexsort((kind, keys))
    return code[o].tolist()  # type: ignore[no-any-return]


def step_anchors(
    trace: Trace,
    st: pd.DataFrame,
    h_tid: np.ndarray,
    h_ts: np.ndarray,
    h_end: np.ndarray,
    tid_raw: np.ndarray,
    g_launch: np.ndarray,
    g_end: np.ndarray,
    g_fixed: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, int, int]:
    """Step boundaries and the host calls on the main thread that place them in the replay."""
    n = len(st)
    bounds = (
        np.r_[st["ts_ns"].to_numpy(np.int64), st["end_ns"].to_numpy(np.int64)[-1:]]
        if n
        else np.zeros(0, np.int64)
    )
    anchor = np.full(len(bounds), -1, dtype=np.int64)
    off = np.zeros(len(bounds), dtype=np.int64)
    if not len(h_ts) or not n:
        return bounds, anchor, off, np.zeros(len(bounds), bool), -1, 0, -1
    main = main_thread(trace, h_tid, tid_raw, h_ts, int(bounds[0]), int(bounds[-1]))
    idx = np.flatnonzero(h_tid == main)
    # each boundary follows the main thread's last call before it: host work shrunk after
    # that call (at the start of the next step) moves the next boundary, not this one
    j = np.searchsorted(h_ts[idx], bounds, side="left") - 1
    ok = j >= 0
    anchor[ok] = idx[j[ok]]
    a = anchor[ok]
    off[ok] = bounds[ok] - np.where(h_end[a] <= bounds[ok], h_end[a], h_ts[a])
    ends_at = np.zeros(len(bounds), dtype=bool)
    ends_at[ok] = h_end[a] <= bounds[ok]
    last_gpu, last_off, last = -1, 0, len(bounds) - 1
    inwin = np.flatnonzero(~g_fixed & (g_end <= bounds[last]) & (g_end >= bounds[last - 1]))
    if len(inwin):  # a step that ends with its GPU work (markers other than ProfilerStep)
        lg = int(inwin[np.argmax(g_end[inwin])])
        if bounds[last] - g_end[lg] <= CLOCK_TOL_NS:
            last_gpu, last_off = lg, int(bounds[last] - g_end[lg])
    return bounds, anchor, off, ends_at, last_gpu, last_off, int(main)


def main_thread(
    trace: Trace, h_tid: np.ndarray, tid_raw: np.ndarray, h_ts: np.ndarray, lo: int, hi: int
) -> int:
    """The thread the step markers are on (else the one with the most calls in the window)."""
    ann = trace.annotations
    if len(ann) and not trace.meta.synthetic_steps:
        m = ann["name"].astype(str).str.startswith("ProfilerStep#").to_numpy()
        if m.any():
            t = ann["tid"].to_numpy()[m][0]
            hit = np.flatnonzero(tid_raw == t)
            if len(hit):
                return int(h_tid[hit[0]])
    inw = (h_ts >= lo) & (h_ts < hi)
    vals = h_tid[inw] if inw.any() else h_tid
    return int(np.bincount(vals).argmax())
