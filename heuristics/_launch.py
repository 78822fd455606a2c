"""Launch-bound kernels (shared by tiny-kernels and gpu-idle).

A kernel is *launch-bound* when the device sat idle right before it (no kernel, copy or memset
running on any stream) because its launch had not arrived: the launch call had not yet returned
when the GPU ran out of work, and the gap is at most ``tiny_kernels.max_gap_us`` (longer gaps
are the host doing something else: gpu-idle), and either

- the kernel is *tiny*: shorter than ``tiny_kernels.max_kernel_us`` or than the runtime call
  that launched it, or
- whatever its length, the device ran out of work while the host was already inside the
  operator that launches it (the outermost ``aten`` operator around the launch call started
  before the previous work ended): the gap is that operator's host cost (Python binding,
  dispatcher, launch: 15-25 us per PyTorch operator), which the kernels before it were too
  short to hide. 10 us GEMMs issued 25 us apart wait for their launches as 3 us kernels do.

A gap whose operator started only after the device had emptied (the host was elsewhere: a sleep,
a blocking copy, Python between calls) is not the launch's.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from advisor.arrays import unique_ints
from advisor.derive.timeline import busy_by_device, union
from advisor.detect.registry import Context
from advisor.detect.thresholds import register
from advisor.replay.graphfix import run_breaks
from advisor.trace.model import Trace
from advisor.trace.names import name_flags

from ._per_step import n_steps

register("tiny_kernels.max_kernel_us", 10.0, "a kernel shorter than this (us) is tiny")
register(
    "tiny_kernels.max_gap_us",
    100.0,
    "idle gaps before a tiny kernel up to this long (us) count as launch overhead",
)

register(
    "tiny_kernels.min_per_step",
    20.0,
    "report only with at least this many launch-bound tiny kernels per step",
)
register(
    "tiny_kernels.min_share_pct",
    1.0,
    "report only when their idle gaps reach this % of the median step",
)

register(
    "tiny_kernels.min_kernel_pct",
    25.0,
    "...or when at least this % of the step's kernels are launch-bound (steps with few kernels), "
    "and at least a quarter of min_per_step",
)

COLUMNS = [
    "k_idx",
    "device",
    "ts_ns",
    "dur_ns",
    "gap_ns",
    "gap_start_ns",
    "launch_idx",
    "step",
    "op_ns",
    "tiny",
]


def launch_gaps(trace: Trace, max_kernel_us: float, max_gap_us: float) -> pd.DataFrame:
    """Tiny, launch-bound kernels inside steps with the idle gap before each (``gap_ns``)."""
    key = f"launch.gaps:{max_kernel_us}:{max_gap_us}"
    return trace.memo(key, lambda: _build(trace, max_kernel_us, max_gap_us))


def reported_gaps(trace: Trace, ctx: Context) -> pd.DataFrame:
    """The launch gaps tiny-kernels reports: empty when they stay under its thresholds."""
    lg = launch_gaps(trace, ctx.t("tiny_kernels.max_kernel_us"), ctx.t("tiny_kernels.max_gap_us"))
    if not len(lg):
        return lg
    steps = n_steps(trace)
    gap_ms = float(lg["gap_ns"].sum()) / 1e6 / steps
    share = 100.0 * gap_ms / ctx.step_ms_median if ctx.step_ms_median > 0 else 0.0
    n_k = int(np.count_nonzero(trace.kernels["step"].to_numpy() >= 0)) or 1
    many = len(lg) / steps >= ctx.t("tiny_kernels.min_per_step")
    most = (
        100.0 * len(lg) / n_k >= ctx.t("tiny_kernels.min_kernel_pct")
        and len(lg) / steps >= ctx.t("tiny_kernels.min_per_step") / 4
    )
    if not (many or most) or share < ctx.t("tiny_kernels.min_share_pct"):
        return lg.iloc[0:0]
    return lg


def _build(trace: Trace, max_kernel_us: float, max_gap_us: float) -> pd.DataFrame:
    k = trace.kernels
    rt = trace.runtime
    if not len(k) or not len(rt):
        return pd.DataFrame(columns=COLUMNS)
    busy = busy_by_device(trace)
    rt_dur = rt["dur_ns"].to_numpy()
    rt_end = rt["end_ns"].to_numpy()
    op_start = _launching_op_start(trace)  # per runtime row: its outermost aten op's start
    out = []
    keep = ~k["is_comm"].to_numpy(dtype=bool) & (k["step"].to_numpy() >= 0)
    for dev, g in k[keep].groupby("device", sort=True):
        b = busy.get(int(dev))
        if b is None or len(b.starts) < 2:
            continue
        ts = g["ts_ns"].to_numpy()
        dur = g["dur_ns"].to_numpy()
        li = g["launch_idx"].to_numpy()
        i = np.searchsorted(b.starts, ts, side="right") - 1
        # the kernel opens a busy interval: the device was idle right before it
        opens = (i > 0) & (b.starts[np.clip(i, 0, None)] == ts)
        prev_end = b.ends[np.clip(i - 1, 0, None)]
        gap = np.where(opens, ts - prev_end, 0)
        linked = li >= 0
        lsafe = np.clip(li, 0, None)
        launch_dur = np.where(linked, rt_dur[lsafe], 0)
        launch_end = np.where(linked, rt_end[lsafe], 0)
        o_start = np.where(linked, op_start[lsafe], NO_OP)
        tiny = (dur < max_kernel_us * 1000) | (linked & (dur < launch_dur))
        # whatever its length: the device emptied while its operator was on the host
        in_op = linked & (o_start != NO_OP) & (o_start <= prev_end)
        bound = linked & (gap > 0) & (gap <= max_gap_us * 1000) & (launch_end > prev_end)
        m = (tiny | in_op) & bound
        if m.any():
            out.append(
                pd.DataFrame(
                    {
                        "k_idx": g.index.to_numpy()[m],
                        "device": int(dev),
                        "ts_ns": ts[m],
                        "dur_ns": dur[m],
                        "gap_ns": gap[m],
                        "gap_start_ns": prev_end[m],
                        "launch_idx": li[m],
                        "step": g["step"].to_numpy()[m],
                        "op_ns": np.where(o_start[m] != NO_OP, launch_end[m] - o_start[m], 0),
                        "tiny": tiny[m],
                    }
                )
            )
    if not out:
        return pd.DataFrame(columns=COLUMNS)
    return pd.concat(out, ignore_index=True)


NO_OP = np.iinfo(np.int64).min  # a launch no operator encloses


def _launching_op_start(trace: Trace) -> np.ndarray:
    """Per runtime row: the start of the outermost ``aten`` operator around it (NO_OP: none)."""
    ops, rt = trace.cpu_ops, trace.runtime
    out = np.full(len(rt), NO_OP, dtype=np.int64)
    if not len(ops) or not len(rt):
        return out
    idx = rt["op_idx"].to_numpy().copy()
    parent = ops["parent_idx"].to_numpy()
    is_aten = name_flags(ops["name"], lambda n: n.startswith("aten::"))
    has = idx >= 0
    ok = has & is_aten[np.clip(idx, 0, None)]
    for _ in range(64):  # climb while the parent is an aten op too (aten calls nest shallowly)
        p = parent[np.clip(idx, 0, None)]
        up = ok & (p >= 0) & is_aten[np.clip(p, 0, None)]
        if not up.any():
            break
        idx = np.where(up, p, idx)
    out[ok] = ops["ts_ns"].to_numpy()[idx[ok]]
    return out


def launching_calls(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Host time spent issuing GPU work: the union of the outermost ``aten::`` call trees that
    launched a kernel, copy or memset (dispatch, framework and launch cost), as disjoint sorted
    intervals. Python between calls and user ranges around them are not part of it."""
    return trace.memo("launch.calls", lambda: _launching_calls(trace))


def _launching_calls(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    ops, rt = trace.cpu_ops, trace.runtime
    empty = np.zeros(0, np.int64)
    if not len(ops) or not len(rt):
        return empty, empty
    used = np.zeros(len(rt), dtype=bool)
    for df in (trace.kernels, trace.memcpy):
        li = df["launch_idx"].to_numpy()
        used[li[li >= 0]] = True
    idx = rt["op_idx"].to_numpy()[used]
    idx = unique_ints(idx[idx >= 0])
    parent = ops["parent_idx"].to_numpy()
    is_aten = name_flags(ops["name"], lambda n: n.startswith("aten::"))
    for _ in range(64):  # climb while the parent is an aten op too (aten calls nest shallowly)
        p = parent[idx]
        up = (p >= 0) & is_aten[np.clip(p, 0, None)] & is_aten[idx]
        if not up.any():
            break
        idx = unique_ints(np.where(up, p, idx))
    return union(ops["ts_ns"].to_numpy()[idx], ops["end_ns"].to_numpy()[idx])


def after_drain(trace: Trace, lg: pd.DataFrame, max_gap_us: float) -> np.ndarray:
    """Per launch-bound kernel of ``lg``: the runtime row of the call that waited for the GPU
    (a sync, a blocking copy: :func:`advisor.replay.fixes.run_breaks`) whose drained queue it
    follows (-1: none). After such a call the launch queue is empty, and every kernel the host
    issues next runs launch-bound until the host gets ahead again: a kernel follows the drain
    when it was launched on the same thread after the call returned and every kernel the
    device started since then found it idle (the queue never refilled) after a gap of at most
    ``max_gap_us`` (a longer one: the host was elsewhere)."""
    out = np.full(len(lg), -1, dtype=np.int64)
    breaks = run_breaks(trace)
    if not len(lg) or not len(breaks):
        return out
    rt = trace.runtime
    b_end = rt["end_ns"].to_numpy()[breaks]
    b_tid = rt["tid"].to_numpy()[breaks]
    li = lg["launch_idx"].to_numpy()
    l_ts, l_tid = rt["ts_ns"].to_numpy()[li], rt["tid"].to_numpy()[li]
    k = trace.kernels
    busy = busy_by_device(trace)
    for dev in unique_ints(lg["device"].to_numpy()).tolist():
        kts = np.sort(k["ts_ns"].to_numpy()[k["device"].to_numpy() == dev])
        opened, closed = busy[int(dev)].starts, busy[int(dev)].ends
        long_gap = np.r_[False, opened[1:] - closed[:-1] > max_gap_us * 1000]
        n_long = np.cumsum(long_gap)
        for j in np.flatnonzero(lg["device"].to_numpy() == dev).tolist():
            mine = np.flatnonzero((b_tid == l_tid[j]) & (b_end <= l_ts[j]))
            if not len(mine):
                continue
            w = mine[np.argmax(b_end[mine])]
            lo, hi = b_end[w], int(lg["ts_ns"].iat[j])
            started = np.searchsorted(kts, hi, "right") - np.searchsorted(kts, lo, "left")
            a, b = np.searchsorted(opened, lo, "left"), np.searchsorted(opened, hi, "right")
            longs = n_long[b - 1] - n_long[a] if b > a else 0  # after the first one
            if started == b - a and not longs:
                out[j] = breaks[w]
    return out
