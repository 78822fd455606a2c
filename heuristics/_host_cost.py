"""Host cost per operator against its typical figure: whether every operator costs the host far
more than it should, and the GPU idle time that costs. Shared by ``host-overhead`` (which
reports it), ``gpu-idle`` (which leaves that idle time out of its own claim) and
``optimizer-host-time`` (which says to fix the host first); not a detector.

The operators read are those that do no device work of their own (``TYPICAL_US``: ``view``,
``as_strided``, ``empty``, ``t``, ``transpose``...), inside the steady steps and not while
torch.compile traces the model; their typical figures and why are in ``host_overhead``'s
docstring. The host is *slow* when at least two of them have ``host_overhead.min_calls``
calls and their median slowdown (mean over typical) is at least ``host_overhead.min_ratio``.

Per-trace results are kept with the trace (:meth:`~advisor.trace.model.Trace.memo`, keys
``host_cost.*``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from advisor.derive.onetime import in_compile
from advisor.derive.timeline import Intervals, busy_by_device, main_device, union
from advisor.detect.registry import Context
from advisor.detect.thresholds import register
from advisor.trace.model import Trace

from ._allocator import allocator_spans
from ._launch import launching_calls

register(
    "host_overhead.min_ratio",
    10.0,
    "report when operators cost the host this many times their typical time (median)",
)
register(
    "host_overhead.min_calls",
    20.0,
    "calls of an operator inside the steps needed to compare it with its typical time",
)

# mean host time per call (us), PyTorch 1.13-2.x with the profiler on (module docstring)
TYPICAL_US = {
    "aten::view": 0.51,
    "aten::as_strided": 0.56,
    "aten::empty": 3.40,
    "aten::slice": 2.02,
    "aten::detach": 1.54,
    "aten::t": 4.32,
    "aten::transpose": 2.09,
    "aten::expand": 3.22,
    "aten::unsqueeze": 1.99,
    "aten::permute": 2.55,
    "aten::reshape": 3.25,
    "aten::_unsafe_view": 0.61,
    "aten::empty_like": 6.55,
    "aten::empty_strided": 7.01,
}


def op_costs(trace: Trace, min_calls: float) -> pd.DataFrame:
    """Per operator of ``TYPICAL_US`` with at least ``min_calls`` calls inside the steps: calls,
    mean host us, typical us, ratio, excess ns (over the typical figure), an example row."""
    cols = ["name", "calls", "mean_us", "typical_us", "ratio", "excess_ns", "row"]
    if not len(trace.cpu_ops):
        return pd.DataFrame(columns=cols)
    rows = [r for r in _op_cost_rows(trace) if r[1] >= min_calls]
    return pd.DataFrame(rows, columns=cols).sort_values("excess_ns", ascending=False)


def _op_cost_rows(trace: Trace) -> list[tuple[Any, ...]]:
    """:func:`op_costs`'s rows for every operator of ``TYPICAL_US`` called inside the steps,
    by name, once per trace (the detectors ask with the same or other minimum calls)."""

    def make() -> list[tuple[Any, ...]]:
        ops = trace.cpu_ops
        sel = ops["name"].isin(list(TYPICAL_US)).to_numpy() & (ops["step"].to_numpy() >= 0)
        # operators run while torch.compile traces the model (fake tensors) are compilation
        sel &= ~in_compile(trace, ops["tid"].to_numpy(), ops["ts_ns"].to_numpy())
        sub = ops.loc[sel, ["name", "dur_ns"]]  # only the columns read (not the shapes, stacks)
        rows = []
        for name, g in sub.groupby(sub["name"].astype(str), sort=True):
            mean_us = float(g["dur_ns"].mean()) / 1e3
            typ = TYPICAL_US[str(name)]
            excess = float(np.maximum(g["dur_ns"].to_numpy() - typ * 1e3, 0).sum())
            rows.append((name, len(g), mean_us, typ, mean_us / typ, excess, int(g.index[0])))
        return rows

    return trace.memo("host_cost.op_cost_rows", make)


def clip_to_steps(s: np.ndarray, e: np.ndarray, trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint intervals clipped to the steps."""
    if not len(s):
        return s, e
    st = trace.steps
    out_s, out_e = [], []
    for lo, hi in zip(st["ts_ns"].to_numpy(), st["end_ns"].to_numpy(), strict=True):
        cs, ce = np.clip(s, lo, hi), np.clip(e, lo, hi)
        keep = ce > cs
        out_s.append(cs[keep])
        out_e.append(ce[keep])
    return union(np.concatenate(out_s), np.concatenate(out_e))


def idle_in_launching_ns(trace: Trace) -> int:
    """GPU idle time inside the steps while the host was in operators that launch GPU work,
    allocator calls excluded."""

    def make() -> int:
        dev = main_device(trace)
        if dev is None:
            return 0
        s, e = clip_to_steps(*launching_calls(trace), trace)
        if not len(s):
            return 0
        busy = busy_by_device(trace)[dev]
        idle = int(np.sum(e - s - busy.covered(s, e)))
        a_s, a_e = allocator_spans(trace)
        if len(a_s):  # allocator time inside those calls is allocator-churn's
            inter = Intervals(a_s, a_e).covered(s, e)
            idle -= int(np.sum(np.minimum(inter, e - s - busy.covered(s, e))))
        return max(idle, 0)

    return trace.memo("host_cost.idle_in_launching", make)


def excess_idle_ns(trace: Trace, ctx: Context) -> int:
    """The GPU idle time (whole trace, ns) due to operators costing more than typical: the idle
    inside launching operators times ``1 - 1/slowdown``; 0 when the host is not slow
    (:func:`fires`). gpu-idle leaves it out of its own claim."""
    costs = op_costs(trace, ctx.t("host_overhead.min_calls"))
    if not fires(costs, ctx):
        return 0
    ratio = float(costs["ratio"].median())
    return int((1 - 1 / ratio) * idle_in_launching_ns(trace))


def fires(costs: pd.DataFrame, ctx: Context) -> bool:
    return len(costs) >= 2 and float(costs["ratio"].median()) >= ctx.t("host_overhead.min_ratio")


def slow_host(trace: Trace, ctx: Context) -> bool:
    """Whether every operator costs far above its typical figure (host-overhead reports it)."""
    return fires(op_costs(trace, ctx.t("host_overhead.min_calls")), ctx)
