"""Launch-bound tiny kernels (shared by tiny-kernels and gpu-idle).

A kernel is *tiny* when it runs shorter than ``tiny_kernels.max_kernel_us`` or shorter than
the runtime call that launched it. Its *launch gap* is the GPU idle time right before it on
its device (no kernel, copy or memset running on any stream) when that gap is caused by the
launch: the launch call had not yet returned when the GPU ran out of work, and the gap is at
most ``tiny_kernels.max_gap_us`` (longer gaps are the host doing something else: gpu-idle).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from advisor.arrays import unique_ints
from advisor.derive.timeline import busy_by_device, union
from advisor.detect.registry import Context
from advisor.detect.thresholds import register
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

COLUMNS = ["k_idx", "device", "ts_ns", "dur_ns", "gap_ns", "gap_start_ns", "launch_idx", "step"]


def launch_gaps(trace: Trace, max_kernel_us: float, max_gap_us: float) -> pd.DataFrame:
    """Tiny, launch-bound kernels inside steps with the idle gap before each (``gap_ns``)."""
    key = f"launch.gaps:{max_kernel_us}:{max_gap_us}"
    return trace.memo(key, lambda: _build(trace, max_kernel_us, max_gap_us))  # type: ignore[no-any-return]


def reported_gaps(trace: Trace, ctx: Context) -> pd.DataFrame:
    """The launch gaps tiny-kernels reports: empty when they stay under its thresholds."""
    lg = launch_gaps(trace, ctx.t("tiny_kernels.max_kernel_us"), ctx.t("tiny_kernels.max_gap_us"))
    if not len(lg):
        return lg
    steps = n_steps(trace)
    gap_ms = float(lg["gap_ns"].sum()) / 1e6 / steps
    share = 100.0 * gap_ms / ctx.step_ms_median if ctx.step_ms_median > 0 else 0.0
    if len(lg) / steps < ctx.t("tiny_kernels.min_per_step") or share < ctx.t(
        "tiny_kernels.min_share_pct"
    ):
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
        tiny = (dur < max_kernel_us * 1000) | (linked & (dur < launch_dur))
        bound = linked & (gap > 0) & (gap <= max_gap_us * 1000) & (launch_end > prev_end)
        m = tiny & bound
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
                    }
                )
            )
    if not out:
        return pd.DataFrame(columns=COLUMNS)
    return pd.concat(out, ignore_index=True)


def launching_calls(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Host time spent issuing GPU work: the union of the outermost ``aten::`` call trees that
    launched a kernel, copy or memset (dispatch, framework and launch cost), as disjoint sorted
    intervals. Python between calls and user ranges around them are not part of it."""
    return trace.memo("launch.calls", lambda: _launching_calls(trace))  # type: ignore[no-any-return]


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
