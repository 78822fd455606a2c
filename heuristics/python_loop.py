"""Per-element tensor work driven from a Python loop (select / index / item storms).

**What it detects.** One line of the user's code issuing hundreds of tiny per-element tensor
ops per step: ``aten::select`` and ``aten::index`` (``x[i]``), ``aten::item`` /
``aten::_local_scalar_dense`` (``.item()``, ``float(t)``) and, with ``record_shapes``,
arithmetic on 0-dim tensors (``total += x[i] * w[i]``). The op must be called directly from
the user's line (the innermost Python frame, past builtin calls): loops inside torch or other
packages are not the user's to vectorize and are not reported. Needs ``with_stack``.

**Why it costs time.** Each op pays the full dispatcher cost (a few microseconds on the host)
for one element of work, plus the interpreter's loop overhead between ops; on a GPU each
``.item()`` also waits for the device (see sync-point). A vectorized expression does the same
work in one op.

**How the saving is estimated.** Vectorizing removes the loop, not only its ops: each run of
a line's per-element ops (consecutive ops no further apart than ``python_loop.gap_x`` times
their typical iteration's spacing) is one loop, and its wall time on the host (the ops, the interpreter
time between them, the waits of the reads inside it and the GPU work it launched) goes, but
for its longest op, which a vectorized version still runs. On GPU traces the steady steps are
replayed without that time (see docs/savings.md): host work hidden behind a busy GPU saves
nothing. On CPU-only traces the figure is that wall time, as measured. The figure is the mean
per steady step ("in k of n steps" when the loop runs in some steps only).

**How to fix.** Vectorize: whole-tensor arithmetic, broadcasting, boolean masks
(``torch.where``), gathers (``x[idx]``, ``torch.gather``), reductions; call ``.item()`` /
``.tolist()`` once on the result.

**Known false positives.** Loops over a few hundred genuinely independent chunks where
vectorizing is not possible; the threshold ``python_loop.min_ops_per_step`` (200 per line)
keeps ordinary indexing out.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import NamedTuple

import numpy as np
import pandas as pd

from advisor.arrays import unique_ints
from advisor.derive.timeline import union
from advisor.detect.draft import Draft
from advisor.detect.registry import Context, detector
from advisor.detect.thresholds import register
from advisor.findings import Evidence, Location
from advisor.replay.fixes import Combined, DropSyncs, Fix, ScaleGpu, ShrinkHost
from advisor.replay.whatif import Saving
from advisor.trace.model import Trace
from advisor.trace.names import name_in

from ._ops import BACKWARD_RE, in_backward, op_names
from ._per_step import fmt_ms, ms, n_steps

ID = "python-loop"
TITLE = "Per-element tensor ops from a Python loop"

register(
    "python_loop.min_ops_per_step",
    200.0,
    "per-element ops one line must issue in a step to be reported",
)
register(
    "python_loop.gap_x",
    10.0,
    "a gap this many times the typical spacing of a line's ops ends its loop",
)

PER_ELEMENT = frozenset(
    {"aten::select", "aten::index", "aten::item", "aten::_local_scalar_dense", "aten::index_put_"}
)
SCALAR_MATH = frozenset(
    f"aten::{n}"
    for n in (
        "add sub mul div add_ sub_ mul_ div_ rsub pow neg abs eq ne lt le gt ge remainder "
        "floor_divide maximum minimum sqrt exp log sin cos tanh sigmoid".split()
    )
)
NOT_TENSOR = frozenset(
    {
        "",
        "Scalar",
        "ScalarList",
        "TensorList",
        "GenericList",
        "String",
        "Device",
        "Layout",
        "ScalarType",
        "MemoryFormat",
    }
)

SNIPPET = """# before: one tiny op (and one .item()) per element
total = 0.0
for i in range(x.shape[0]):
    if x[i] > 0:
        total += (x[i] * w[i]).item()

# after: whole-tensor ops, one .item() at the end
total = torch.where(x > 0, x * w, 0).sum().item()
"""
RECOMMENDATION = (
    "Vectorize the loop: whole-tensor arithmetic with broadcasting, boolean masks "
    "(torch.where), gathers (x[idx], torch.gather) and reductions; call .item()/.tolist() "
    "once on the result instead of per element."
)


def _scalar_math(trace: Trace, names: np.ndarray) -> np.ndarray:
    ops = trace.cpu_ops
    out = np.zeros(len(ops), dtype=bool)
    cand = np.flatnonzero(name_in(ops["name"], SCALAR_MATH))
    dims = ops["input_dims"].to_numpy()
    types = ops["input_types"].to_numpy()
    for r in cand:
        d, t = dims[r], types[r]
        if isinstance(d, list) and d and d[0] == [] and isinstance(t, list) and t:
            out[r] = str(t[0]) not in NOT_TENSOR
    return out


def _candidates(trace: Trace) -> np.ndarray:
    """Rows of per-element ops called from Python (not from inside another op or backward)."""
    ops = trace.cpu_ops
    names = op_names(trace)
    own = np.isin(names, list(PER_ELEMENT)) | _scalar_math(trace, names)
    parent = ops["parent_idx"].to_numpy()
    pnames = pd.Series(np.where(parent >= 0, names[np.clip(parent, 0, None)], ""))
    framework = pnames.str.contains("::", regex=False) | pnames.str.contains(BACKWARD_RE)
    keep = own & ~framework.to_numpy() & ~in_backward(trace) & (ops["step"].to_numpy() >= 0)
    return np.flatnonzero(keep)


class _Facts(NamedTuple):
    """The lines that issue a storm of per-element ops, with per line: ops, loop time, op time,
    most ops in one step, first op's start and a count per op name; the spans a vectorized
    loop drops (rows of start, end, thread) and the steps with a storm."""

    per_line: dict[Location, dict[str, float]]
    order: list[Location]  # most loop time first
    cut: np.ndarray
    steps_with: set[int]
    min_ops: float
    nst: int


@detector(ID, TITLE, needs=("cpu_ops", "stack"))
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    f = _measure(trace, ctx)
    if f is None:
        return []
    saving_ms, rep = _value(trace, ctx, f)
    top = f.per_line[f.order[0]]
    return [
        Draft(
            id=ID,
            title=TITLE,
            est_savings_ms=round(saving_ms, 3),
            saving=rep,
            confidence="high" if top["max_step"] >= 4 * f.min_ops else "medium",
            summary=_summary(f, saving_ms),
            recommendation=RECOMMENDATION,
            snippet=SNIPPET,
            evidence=_evidence(trace, f),
            locations=tuple(replace(loc, count=int(f.per_line[loc]["ops"])) for loc in f.order[:5]),
            assumptions=_assumptions(trace, ctx, f, rep),
        )
    ]


def _measure(trace: Trace, ctx: Context) -> _Facts | None:
    """The storm lines' loops; None when no line issues ``min_ops_per_step`` in a step."""
    rows = _candidates(trace)
    if not len(rows):
        return None
    locs = ctx.locator.calling_lines(rows)
    step = trace.cpu_ops["step"].to_numpy()
    groups: dict[tuple[Location, int], list[int]] = defaultdict(list)
    for r, loc in zip(rows, locs, strict=True):
        if loc is not None:
            groups[(loc, int(step[r]))].append(int(r))
    min_ops = ctx.t("python_loop.min_ops_per_step")
    storm_lines = {loc for (loc, _s), rs in groups.items() if len(rs) >= min_ops}
    if not storm_lines:
        return None
    per_line, cut, steps_with = _lines(trace, ctx, groups, storm_lines)
    order = sorted(per_line, key=lambda k: -per_line[k]["loop_ns"])
    return _Facts(per_line, order, cut, steps_with, min_ops, n_steps(trace))


def _lines(
    trace: Trace,
    ctx: Context,
    groups: dict[tuple[Location, int], list[int]],
    storm_lines: set[Location],
) -> tuple[dict[Location, dict[str, float]], np.ndarray, set[int]]:
    """Per storm line its figures (see :class:`_Facts`), the spans vectorizing drops and the
    steps with a storm."""
    ops = trace.cpu_ops
    names = op_names(trace)
    ts = ops["ts_ns"].to_numpy(np.int64)
    end = ops["end_ns"].to_numpy(np.int64)
    dur = ops["dur_ns"].to_numpy(np.int64)
    tid = ops["tid"].to_numpy()
    per_line: dict[Location, dict[str, float]] = {}
    cut: list[tuple[int, int, int]] = []  # (start, end, thread): what a vectorized loop drops
    steps_with: set[int] = set()
    for (loc, st), rs in groups.items():
        if loc not in storm_lines:
            continue
        a = np.asarray(rs)
        steps_with.add(st)
        acc = per_line.setdefault(
            loc,
            {"ops": 0, "loop_ns": 0.0, "op_ns": 0.0, "max_step": 0, "first": int(ts[a].min())},
        )
        for run in _loops(ts, a, ctx.t("python_loop.gap_x")):
            lo, hi = int(ts[run].min()), int(end[run].max())
            keep = int(run[np.argmax(dur[run])])  # a vectorized version still runs one op
            cut += [(lo, int(ts[keep]), int(tid[keep])), (int(end[keep]), hi, int(tid[keep]))]
            acc["loop_ns"] += float(hi - lo - dur[keep])
        acc["ops"] += len(a)
        acc["op_ns"] += float(dur[a].sum())
        acc["max_step"] = max(acc["max_step"], len(a))
        acc["first"] = min(acc["first"], int(ts[a].min()))
        for n in names[a]:
            acc[n] = acc.get(n, 0) + 1
    return per_line, np.asarray(cut, dtype=np.int64).reshape(-1, 3), steps_with


def _value(trace: Trace, ctx: Context, f: _Facts) -> tuple[float, Saving | None]:
    """The saving per step and its replay (None: not replayed): on GPU traces the loops
    vectorized, replayed; else (or when nothing replays) the loops' wall time."""
    saving_ms = sum(v["loop_ns"] for v in f.per_line.values()) / 1e6 / f.nst
    if not trace.has_gpu:
        return saving_ms, None
    rep = ctx.whatif(_vectorized(trace, f.cut))
    return (rep.ms, rep) if rep.replayed else (saving_ms, None)


def _some(f: _Facts) -> str:
    n = len(f.steps_with)
    return f" in {n} of {f.nst} steps" if 0 < n < f.nst else ""


def _summary(f: _Facts, saving_ms: float) -> str:
    first, top = f.order[0], f.per_line[f.order[0]]
    return (
        f"{len(f.order)} line(s) drive per-element tensor ops from a Python loop: "
        f"{first.file}:{first.line} issues up to {int(top['max_step'])} tiny ops in "
        f"one step{_some(f)}; vectorizing removes the loop, about {fmt_ms(saving_ms)} per step."
    )


def _evidence(trace: Trace, f: _Facts) -> tuple[Evidence, ...]:
    evidence = []
    for loc in f.order[:5]:
        v = f.per_line[loc]
        kinds = sorted(
            ((k, int(c)) for k, c in v.items() if k.startswith("aten::")), key=lambda kc: -kc[1]
        )
        mix = ", ".join(f"{k.removeprefix('aten::')} x{c}" for k, c in kinds[:3])
        evidence.append(
            Evidence(
                f"{loc.file}:{loc.line} ({loc.function}): up to {int(v['max_step'])} per-element "
                f"ops in one step ({mix}); the loop runs {fmt_ms(v['loop_ns'] / 1e6 / f.nst)} "
                "per step",
                int(v["ops"]),
                ms(v["loop_ns"]),
                trace.to_trace_us(v["first"]),
            )
        )
    return tuple(evidence)


def _assumptions(trace: Trace, ctx: Context, f: _Facts, rep: Saving | None) -> tuple[str, ...]:
    assumptions = [
        "Each run of a line's per-element ops in a step (consecutive ops at most "
        f"{ctx.t('python_loop.gap_x'):g} times their typical spacing apart: "
        "python_loop.gap_x) is one loop; vectorizing removes its wall time (the ops, the "
        "interpreter time between them, the waits of its reads, the GPU work it launched) but "
        "for its longest op, which a vectorized version still runs. Mean per step over the "
        f"{f.nst} step(s){_some(f)}.",
        f"Only lines issuing at least {f.min_ops:g} such ops in a step "
        "(python_loop.min_ops_per_step), called directly from the user's code.",
    ]
    if rep is not None:
        assumptions.append(rep.assumption)
        assumptions.append("The reads inside the loop are also sync-point's; one row holds both.")
    elif not trace.has_gpu:
        assumptions.append("CPU-only trace: this is measured CPU time.")
    return tuple(assumptions)


def _loops(ts: np.ndarray, rows: np.ndarray, gap_x: float) -> list[np.ndarray]:
    """A line's ops in one step as loops: runs of consecutive ops (by start) whose spacing is
    at most ``gap_x`` times their typical iteration's (the 90th percentile of the spacings: a
    line may issue several ops an iteration, close together, and one longer gap to the next
    iteration); a longer gap is other code, not an iteration. A single op is no loop."""
    o = rows[np.argsort(ts[rows], kind="stable")]
    if len(o) < 2:
        return []
    spacing = np.diff(ts[o])
    lim = gap_x * max(float(np.percentile(spacing, 90)), 1.0)
    return [r for r in np.split(o, np.flatnonzero(spacing > lim) + 1) if len(r) >= 2]


def _vectorized(trace: Trace, cut: np.ndarray) -> Fix:
    """The loops vectorized (``cut``: rows of start, end, thread): their host time removed, the
    syncs inside them no longer waiting, the GPU work launched inside them gone."""
    rt = trace.runtime
    inside = np.zeros(len(rt), dtype=bool)
    rts, rtid = rt["ts_ns"].to_numpy(np.int64), rt["tid"].to_numpy()
    for t in unique_ints(cut[:, 2]):
        lo, hi = union(cut[cut[:, 2] == t, 0], cut[cut[:, 2] == t, 1])
        on = rtid == t
        k = np.searchsorted(lo, rts[on], side="right") - 1
        inside[np.flatnonzero(on)] = (k >= 0) & (rts[on] < hi[np.clip(k, 0, None)])
    calls = np.flatnonzero(inside)
    return Combined(
        [
            ShrinkHost(cut[:, 0], cut[:, 1], cut[:, 2], keep=0.0),
            DropSyncs(calls),
            ScaleGpu(
                kernels=np.flatnonzero(np.isin(trace.kernels["launch_idx"].to_numpy(), calls)),
                memcpy=np.flatnonzero(np.isin(trace.memcpy["launch_idx"].to_numpy(), calls)),
                speedup=float("inf"),
            ),
        ],
        label="vectorized loops",
    )
