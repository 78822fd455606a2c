"""`zero_grad()` that fills gradients with zeros instead of setting them to None.

**What it detects.** `Optimizer.zero_grad` ranges (the profiler's
`Optimizer.zero_grad#SGD.zero_grad` annotation) that run `aten::zero_`/`aten::fill_` on the
gradients (one op, and on a GPU one fill kernel, per parameter) or `aten::_foreach_zero_` (one
op per device and dtype, a few multi-tensor kernels). This is
`zero_grad(set_to_none=False)`, or the default before torch 2.0. With run.json, `zero_grad`
calls recorded with `set_to_none=False` (including `model.zero_grad`, which has no profiler
annotation) are named even when the trace cannot measure them.

**Why it costs time.** Every step pays a host-side op and a kernel launch per parameter plus a
write of every gradient byte, and the next backward then reads and adds into those zeros
instead of writing the gradient once.

**How the saving is estimated.** The steady steps are replayed (see docs/savings.md) without
these ops: their host time and the kernels and memsets they launched are gone; the saving is
what the step loses. Where the replay cannot place the steps: the GPU time of those kernels and
memsets plus the time the GPU sat idle while the host was inside the ops (on a CPU-only run: the
ops' own CPU time). The extra read in the next backward is not counted, so the estimate is low.

**How to fix.** `optimizer.zero_grad(set_to_none=True)` (the default since torch 2.0), or
`model.zero_grad(set_to_none=True)`.

**Known false positives.** Code that reads `.grad` right after zeroing and expects a tensor of
zeros (not None) needs a change; gradient accumulation works the same with None.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from advisor.derive.locate import aggregate, merge_locations, run_locations
from advisor.derive.timeline import main_busy
from advisor.detect.draft import Draft
from advisor.detect.registry import Context, detector
from advisor.findings import Evidence, Location
from advisor.replay.fixes import Combined, ScaleGpu, ShrinkHost
from advisor.trace.model import Trace
from advisor.trace.names import name_flags

from ._ops import arg_dims, gpu_rows_from, inherit, parent_has
from ._per_step import ms, n_steps, per_step_words, rows_in_steps

ID = "zero-grad-not-none"
TITLE = "zero_grad() writes zeros instead of setting gradients to None"
ZERO_OPS = frozenset({"aten::zero_", "aten::fill_", "aten::_foreach_zero_"})
FOREACH = "aten::_foreach_zero_"
PREFIX = "Optimizer.zero_grad"
SNIPPET = (
    "optimizer.zero_grad(set_to_none=True)  # the default since torch 2.0\n"
    "# or, for the module API\n"
    "model.zero_grad(set_to_none=True)"
)


def _ranges(trace: Trace) -> pd.DataFrame:
    """zero_grad ranges on the host: annotations (current traces) or cpu ops (legacy)."""
    parts = []
    an = trace.annotations
    if len(an):
        a = an[an["name"].str.startswith(PREFIX) & ~an["on_gpu"].astype(bool)]
        parts.append(a[["name", "tid", "ts_ns", "end_ns", "step"]])
    ops = trace.cpu_ops
    if len(ops):
        parts.append(
            ops[ops["name"].str.startswith(PREFIX)][["name", "tid", "ts_ns", "end_ns", "step"]]
        )
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame(columns=["name", "tid", "ts_ns", "end_ns", "step"])
    return rows_in_steps(pd.concat(parts, ignore_index=True), trace)


def _zero_ops(trace: Trace, ranges: pd.DataFrame) -> np.ndarray:
    """Rows of the outermost zero_/fill_ ops inside the ranges (same thread)."""
    ops = trace.cpu_ops
    if not len(ops) or not len(ranges):
        return np.zeros(0, dtype=np.int64)
    parent = ops["parent_idx"].to_numpy()
    is_zero = name_flags(ops["name"], ZERO_OPS.__contains__)
    outer = is_zero & ~parent_has(is_zero, parent)
    cand = np.flatnonzero(outer)
    ts = ops["ts_ns"].to_numpy()[cand]
    end = ops["end_ns"].to_numpy()[cand]
    tid = ops["tid"].to_numpy()[cand]
    keep = np.zeros(len(cand), dtype=bool)
    for r in ranges.itertuples(index=False):
        keep |= (tid == r.tid) & (ts >= r.ts_ns) & (end <= r.end_ns)
    return cand[keep]


def _gradient_count(trace: Trace, zops: np.ndarray) -> tuple[int, bool]:
    """Gradients zeroed: one per zero_/fill_, the list length for _foreach_zero_ (when shapes
    were recorded). Also whether the count is known."""
    ops = trace.cpu_ops
    foreach = name_flags(ops["name"], FOREACH.__eq__)[zops]
    n, known = int(np.count_nonzero(~foreach)), True  # one gradient per zero_/fill_
    dims = ops["input_dims"].to_numpy()
    for r in zops[foreach]:  # a few per step: one per device and dtype
        first = arg_dims(dims[int(r)], 0)
        if first and all(isinstance(x, list) for x in first):
            n += len(first)
        else:
            n, known = n + 1, False
    return n, known


def _run_sites(ctx: Context) -> list[Location]:
    bad = [r for r in ctx.live.zero_grad if r.set_to_none is False]
    return run_locations(bad, lambda r: f"{r.owner or ''}.zero_grad(set_to_none=False)")


class _Facts(NamedTuple):
    """The zeroing ops inside the zero_grad ranges and the GPU work they launch."""

    ranges: pd.DataFrame  # the zero_grad ranges of the steps
    zops: np.ndarray  # the outermost zero_/fill_ ops inside them (cpu_ops rows)
    host_ns: int  # their host time
    k_rows: np.ndarray  # their kernels (a mask over kernels)
    m_rows: np.ndarray  # their memsets/copies (a mask over memcpy)
    k_sel: pd.DataFrame
    m_sel: pd.DataFrame
    gpu_ns: int
    steps: int


@detector(ID, TITLE)
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    ranges = _ranges(trace)
    zops = _zero_ops(trace, ranges)
    sites = _run_sites(ctx)
    if not len(zops):
        if not sites:
            return []
        return [_latent(sites)]
    f = _measure(trace, ranges, zops)
    fields, how = _value(trace, ctx, f)
    return [
        Draft(
            id=ID,
            title=TITLE,
            **fields,
            confidence="high" if trace.has_gpu else "medium",
            summary=_summary(trace, f),
            recommendation=(
                "Call optimizer.zero_grad(set_to_none=True) (the default since torch 2.0): the "
                "gradients become None, nothing is launched, and the next backward writes them "
                "instead of adding into zeros."
            ),
            snippet=SNIPPET,
            evidence=_evidence(trace, f),
            locations=merge_locations(sites, aggregate(ctx.locator.for_ops(zops[:2000]))),
            assumptions=(
                how,
                "the extra read of the zeroed gradients in the next backward is not counted",
                f"divided over {f.steps} step(s)",
            ),
        )
    ]


def _measure(trace: Trace, ranges: pd.DataFrame, zops: np.ndarray) -> _Facts:
    """The zeroing ops' host time and the kernels and memsets they launched."""
    ops = trace.cpu_ops
    host_ns = int(ops["dur_ns"].to_numpy()[zops].sum())
    mask = np.zeros(len(ops), dtype=bool)
    mask[zops] = True
    mask = inherit(trace, mask)
    k = trace.kernels
    mcp = trace.memcpy
    k_rows = gpu_rows_from(trace, k, mask) if len(k) else np.zeros(0, dtype=bool)
    m_rows = gpu_rows_from(trace, mcp, mask) if len(mcp) else np.zeros(0, dtype=bool)
    k_sel = k[k_rows] if len(k) else k
    m_sel = mcp[m_rows] if len(mcp) else mcp
    gpu_ns = int(k_sel["dur_ns"].sum()) + int(m_sel["dur_ns"].sum())
    return _Facts(ranges, zops, host_ns, k_rows, m_rows, k_sel, m_sel, gpu_ns, n_steps(trace))


def _value(trace: Trace, ctx: Context, f: _Facts) -> tuple[dict[str, Any], str]:
    """The zeroing ops, their host time and GPU work removed, replayed; without a replay, their
    GPU time plus the GPU idle under them (their CPU time on a CPU trace)."""
    ops = trace.cpu_ops
    zops = f.zops
    if trace.has_gpu:
        busy = main_busy(trace)
        _, idle_ns = busy.idle_in_spans(
            ops["ts_ns"].to_numpy()[zops], ops["end_ns"].to_numpy()[zops]
        )
        save_ns = f.gpu_ns + idle_ns
        how = (
            "saving = GPU time of the zeroing kernels/memsets + GPU idle time while the host "
            "ran the zero_/fill_ ops"
        )
    else:
        save_ns = f.host_ns
        how = "CPU-only run: saving = CPU time of the zero_/fill_ ops"
    fields: dict[str, Any] = {"est_savings_ms": save_ns / 1e6 / f.steps}
    if not trace.has_gpu:
        return fields, how
    rep = ctx.whatif(
        Combined(
            [
                ShrinkHost(
                    ops["ts_ns"].to_numpy()[zops],
                    ops["end_ns"].to_numpy()[zops],
                    ops["tid"].to_numpy()[zops],
                    keep=0.0,
                ),
                ScaleGpu(kernels=f.k_rows, memcpy=f.m_rows, speedup=float("inf")),
            ],
            label="zero_grad(set_to_none=True)",
        )
    )
    if rep.replayed:
        return rep.draft_fields(), rep.assumption + (
            " (the zeroing ops, their host time and GPU work removed)"
        )
    return fields, how


def _summary(trace: Trace, f: _Facts) -> str:
    grads, known = _gradient_count(trace, f.zops)
    per_range = grads / max(1, len(f.ranges))
    what = f"{per_range:.0f} gradient(s)" if known else "the gradients"
    summary = (
        f"zero_grad() fills {what} with zeros each call: "
        f"{len(f.zops) / f.steps:.0f} zeroing op(s) {per_step_words(trace)} take "
        f"{f.host_ns / 1e6 / f.steps:.2f} ms on the host"
    )
    n_gpu = len(f.k_sel) + len(f.m_sel)
    if n_gpu:
        summary += (
            f" and launch {n_gpu / f.steps:.0f} kernels/memsets taking "
            f"{f.gpu_ns / 1e6 / f.steps:.2f} ms on the GPU"
        )
    return summary + "."


def _evidence(trace: Trace, f: _Facts) -> tuple[Evidence, ...]:
    ops = trace.cpu_ops
    ev = [
        Evidence(
            f"zero_/fill_/_foreach_zero_ inside {f.ranges['name'].iloc[0]}",
            len(f.zops),
            ms(f.host_ns),
            trace.to_trace_us(int(ops["ts_ns"].iat[int(f.zops[0])])),
        )
    ]
    for label, g in (("zeroing kernels", f.k_sel), ("memsets", f.m_sel)):
        if len(g):
            ev.append(
                Evidence(
                    f"{label} launched by zero_grad",
                    len(g),
                    ms(g["dur_ns"].sum()),
                    trace.to_trace_us(int(g["ts_ns"].min())),
                )
            )
    return tuple(ev)


def _latent(sites: list[Location]) -> Draft:
    return Draft(
        id=ID,
        title=TITLE,
        est_savings_ms=0.0,
        latent=True,
        confidence="medium",
        summary=(
            f"{len(sites)} zero_grad call(s) pass set_to_none=False (run.json); the trace has "
            "no Optimizer.zero_grad range with zeroing ops to measure their cost."
        ),
        recommendation="Call zero_grad(set_to_none=True), the default since torch 2.0.",
        snippet=SNIPPET,
        locations=tuple(sites[:5]),
        assumptions=("seen by advisor profile's zero_grad hook; cost not measured in this trace",),
    )
