"""``Optimizer.step`` ranges and which of them update the parameters one by one. Shared by
``single-tensor-optimizer`` (which reports the per-parameter ranges) and
``optimizer-host-time`` (which reports the host time of the others); not a detector.

Per innermost ``Optimizer.step#<Class>.step`` range (a range enclosing another, such as a
combined optimizer around Adam, is left out): its per-parameter elementwise ops (``PER_PARAM``;
on GPU traces only those that launched a kernel, the outer one of an in-place op recorded
twice), the kernels its ops launched, whether it shows a multi-tensor op or kernel
(``_foreach_*``, ``_fused_*``, ``multi_tensor_apply``, fused Adam/SGD, Triton) and the GPU's
idle time inside it. A range runs *per parameter* when it has at least
``single_tensor_optimizer.min_ops_per_step`` such ops, no multi-tensor evidence, a class name
without ``Fused`` and no ``foreach``/``fused`` set in run.json's ``optimizers``; on a CPU-only
trace only when run.json shows ``foreach=False`` set explicitly (torch's default differs
between CPU and CUDA).

Per-trace results are kept with the trace (:meth:`~advisor.trace.model.Trace.memo`, keys
``opt_ranges.*``).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from advisor.derive.timeline import main_busy
from advisor.detect.registry import Context
from advisor.detect.thresholds import register
from advisor.runinfo import Optimizer
from advisor.trace.model import Trace
from advisor.trace.names import name_in, name_mask

from ._ops import kernel_op, parent_has, ranges

register(
    "single_tensor_optimizer.min_ops_per_step",
    30.0,
    "per-parameter elementwise ops an optimizer step must issue to be reported",
)

STEP_RE = re.compile(r"^Optimizer\.step#(\w+)\.step")
MULTI_OP_RE = re.compile(r"_foreach_|_fused_")
MULTI_KERNEL_RE = re.compile(r"multi_tensor_apply|fused_adam|fused_sgd|^triton_", re.I)
PER_PARAM = frozenset(
    f"aten::{n}"
    for n in (
        "add add_ sub sub_ mul mul_ div div_ addcdiv addcdiv_ addcmul addcmul_ lerp lerp_ "
        "sqrt sqrt_ maximum maximum_ neg neg_ sign sign_ pow pow_ clamp clamp_ copy_".split()
    )
)


def run_optimizers(ctx: Context) -> dict[str, Optimizer]:
    """run.json's ``optimizers`` entries (``class``, ``foreach``, ``fused``...) by class name
    (the last of a class), when recorded."""
    return {str(o.cls): o for o in ctx.live.optimizers}


def _window_stats(trace: Trace, win: pd.DataFrame) -> pd.DataFrame:
    """Per optimizer range: per-parameter ops, multi-tensor evidence, GPU idle inside it."""
    ops = trace.cpu_ops
    ts, end, tid = (ops[c].to_numpy() for c in ("ts_ns", "end_ns", "tid"))
    launched = np.zeros(len(ops), dtype=bool)
    # per-row flags, each name tested once (names are categorical)
    multi_op = name_mask(ops["name"], MULTI_OP_RE)
    multi_kernel = (
        name_mask(trace.kernels["name"], MULTI_KERNEL_RE)
        if len(trace.kernels)
        else np.zeros(0, dtype=bool)
    )
    kop = kernel_op(trace) if len(trace.kernels) else np.zeros(0, np.int64)
    kend = trace.kernels["end_ns"].to_numpy() if len(trace.kernels) else np.zeros(0, np.int64)
    if len(kop):
        launched[kop[kop >= 0]] = True
        # a kernel launched from a child op (add_ -> copy_) counts for the parent too
        parent = ops["parent_idx"].to_numpy()
        for _ in range(3):
            child = np.flatnonzero(launched & (parent >= 0))
            launched[parent[child]] = True
    # old traces record an in-place op twice (aten::add_ inside aten::add_): count the outer
    pp = name_in(ops["name"], PER_PARAM)
    par = ops["parent_idx"].to_numpy()
    nested_pp = parent_has(pp, par)
    rows = []
    for w in win.itertuples(index=False):  # a handful of ranges per trace
        in_win = (tid == w.tid) & (ts >= w.ts_ns) & (end <= w.end_ns)
        inside = np.flatnonzero(in_win)
        multi = bool(multi_op[inside].any())
        per = inside[pp[inside] & ~nested_pp[inside]]
        if trace.has_gpu:
            per = per[launched[per]]
        # kernels launched by an op inside the range
        k_in = (
            np.flatnonzero((kop >= 0) & in_win[np.clip(kop, 0, None)])
            if len(kop) and len(ops)
            else np.zeros(0, np.int64)
        )
        if len(k_in) and multi_kernel[k_in].any():
            multi = True
        hi = max(int(w.end_ns), int(kend[k_in].max()) if len(k_in) else 0)
        idle = main_busy(trace).idle_ns(int(w.ts_ns), hi) if trace.has_gpu else 0
        m = STEP_RE.match(str(w.name))
        rows.append(
            (
                m.group(1) if m else "?",
                int(w.step),
                int(w.tid),
                int(w.ts_ns),
                int(w.end_ns) - int(w.ts_ns),
                len(per),
                len(k_in),
                multi,
                idle,
            )
        )
    return pd.DataFrame(
        rows,
        columns=[
            "cls",
            "step",
            "tid",
            "ts_ns",
            "dur_ns",
            "per_param",
            "kernels",
            "multi",
            "idle_ns",
        ],
    )


def _innermost(win: pd.DataFrame) -> pd.DataFrame:
    """Drop ranges that enclose another optimizer range (CombinedOptimizer around Adam)."""
    if len(win) < 2:
        return win
    ts, end, tid = (win[c].to_numpy() for c in ("ts_ns", "end_ns", "tid"))
    outer = [
        bool(np.any((tid == tid[i]) & (ts >= ts[i]) & (end <= end[i]) & (np.arange(len(win)) != i)))
        for i in range(len(win))
    ]
    return win[~np.asarray(outer)].reset_index(drop=True)


def optimizer_ranges(trace: Trace) -> pd.DataFrame:
    """Per innermost ``Optimizer.step`` range: see :func:`_window_stats` (shared with
    optimizer-host-time, computed once per trace)."""
    return trace.memo(
        "opt_ranges.ranges",
        lambda: _window_stats(trace, _innermost(ranges(trace, STEP_RE))),
    )


def per_parameter(stats: pd.DataFrame, trace: Trace, ctx: Context) -> pd.DataFrame:
    """The ranges single-tensor-optimizer reports: per-parameter ops and no foreach/fused
    evidence."""
    run_opts = run_optimizers(ctx)
    min_ops = ctx.t("single_tensor_optimizer.min_ops_per_step")
    flagged = stats[
        ~stats["multi"]
        & (stats["per_param"] >= min_ops)
        & ~stats["cls"].str.contains("Fused|fused", regex=True)
    ]
    declared = flagged["cls"].map(
        lambda c: bool((o := run_opts.get(c)) is not None and (o.foreach or o.fused))
    )
    flagged = flagged[~declared.astype(bool)]
    if not trace.has_gpu:
        # torch's default is the per-parameter loop on the CPU but foreach on CUDA: on a CPU run
        # only an explicit foreach=False (run.json) says the GPU run will loop per parameter too
        forced = flagged["cls"].map(
            lambda c: (o := run_opts.get(c)) is not None and o.foreach is False
        )
        flagged = flagged[forced.astype(bool)]
    return flagged
