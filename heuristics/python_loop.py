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

**How the saving is estimated.** Those ops, but the longest one per line and step (a
vectorized version still runs about one op), are removed: Python interpreter time between the
ops is not counted, so the estimate is low. On GPU traces the steady steps are replayed without
them (see docs/savings.md): host work hidden behind a busy GPU saves nothing. On CPU-only traces
this is measured CPU time.

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

import numpy as np
import pandas as pd

from advisor.derive.timeline import main_busy
from advisor.detect.registry import Context, detector
from advisor.detect.thresholds import register
from advisor.findings import Draft, Evidence, Location
from advisor.replay.fixes import ShrinkHost
from advisor.trace.model import Trace
from advisor.trace.names import name_in

from ._ops import BACKWARD_RE, in_backward, op_names
from ._per_step import ms, n_steps

ID = "python-loop"
TITLE = "Per-element tensor ops from a Python loop"

register(
    "python_loop.min_ops_per_step",
    200.0,
    "per-element ops one line must issue in a step to be reported",
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


@detector(ID, TITLE, needs=("cpu_ops", "stack"))
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    rows = _candidates(trace)
    if not len(rows):
        return []
    locs = ctx.locator.calling_lines(rows)
    ops = trace.cpu_ops
    names = op_names(trace)
    step = ops["step"].to_numpy()
    ts = ops["ts_ns"].to_numpy()
    end = ops["end_ns"].to_numpy()
    dur = ops["dur_ns"].to_numpy()
    groups: dict[tuple[Location, int], list[int]] = defaultdict(list)
    for r, loc in zip(rows, locs, strict=True):
        if loc is not None:
            groups[(loc, int(step[r]))].append(int(r))
    min_ops = ctx.t("python_loop.min_ops_per_step")
    storm_lines = {loc for (loc, _s), rs in groups.items() if len(rs) >= min_ops}
    if not storm_lines:
        return []

    per_line: dict[Location, dict[str, float]] = {}
    cut: list[np.ndarray] = []  # the ops a vectorized version would not run
    for (loc, _s), rs in groups.items():
        if loc not in storm_lines:
            continue
        a = np.asarray(rs)
        cut.append(np.delete(a, int(np.argmax(dur[a]))))
        cost = float(dur[a].sum() - dur[a].max())
        if trace.has_gpu:
            cost = min(cost, float(main_busy(trace).idle_ns(int(ts[a].min()), int(end[a].max()))))
        acc = per_line.setdefault(
            loc,
            {"ops": 0, "saving_ns": 0.0, "op_ns": 0.0, "max_step": 0, "first": int(ts[a].min())},
        )
        acc["ops"] += len(a)
        acc["saving_ns"] += cost
        acc["op_ns"] += float(dur[a].sum())
        acc["max_step"] = max(acc["max_step"], len(a))
        acc["first"] = min(acc["first"], int(ts[a].min()))
        for n in names[a]:
            acc[n] = acc.get(n, 0) + 1

    nst = n_steps(trace)
    order = sorted(per_line, key=lambda k: -per_line[k]["saving_ns"])
    saving_ms = sum(v["saving_ns"] for v in per_line.values()) / 1e6 / nst
    rep = None
    if trace.has_gpu:
        c = np.concatenate(cut)
        rep = ctx.whatif(
            ShrinkHost(ts[c], end[c], ops["tid"].to_numpy()[c], keep=0.0, label="vectorized loops")
        )
        saving_ms = rep.ms if rep.replayed else saving_ms
    evidence = []
    for loc in order[:5]:
        v = per_line[loc]
        kinds = sorted(
            ((k, int(c)) for k, c in v.items() if k.startswith("aten::")), key=lambda kc: -kc[1]
        )
        mix = ", ".join(f"{k.removeprefix('aten::')} x{c}" for k, c in kinds[:3])
        evidence.append(
            Evidence(
                f"{loc.file}:{loc.line} ({loc.function}): up to {int(v['max_step'])} per-element "
                f"ops in one step ({mix})",
                int(v["ops"]),
                ms(v["op_ns"]),
                trace.to_trace_us(v["first"]),
            )
        )
    top = per_line[order[0]]
    summary = (
        f"{len(order)} line(s) drive per-element tensor ops from a Python loop: "
        f"{order[0].file}:{order[0].line} issues up to {int(top['max_step'])} tiny ops in "
        f"one step; vectorizing saves about {saving_ms:.3f} ms per step of measured op "
        f"time."
    )
    assumptions = [
        "Saving = measured duration of the per-element ops from each line in each step, minus "
        f"the longest one (a vectorized version still runs about one op), divided by the {nst} "
        "step(s) in the trace; Python interpreter time between the ops is not counted.",
        f"Only lines issuing at least {min_ops:g} such ops in a step "
        "(python_loop.min_ops_per_step), called directly from the user's code.",
    ]
    if rep is not None and rep.replayed:
        assumptions[0] = (
            "The per-element ops from each line in each step, but the longest "
            "(a vectorized version still runs about one op), removed from the "
            "host; Python interpreter time between them is kept. " + rep.assumption
        )
        assumptions.append("Waits inside .item() overlap the sync-point finding.")
    elif trace.has_gpu:
        assumptions.append(
            "GPU trace: each loop's saving is capped at the GPU idle time while "
            "it ran; waits inside .item() overlap the sync-point finding."
        )
    else:
        assumptions.append("CPU-only trace: this is measured CPU time.")
    return [
        Draft(
            id=ID,
            title=TITLE,
            est_savings_ms=round(saving_ms, 3),
            extra={"fix": rep.fix} if rep is not None and rep.replayed else {},
            confidence="high" if top["max_step"] >= 4 * min_ops else "medium",
            summary=summary,
            recommendation=RECOMMENDATION,
            snippet=SNIPPET,
            evidence=tuple(evidence),
            locations=tuple(replace(loc, count=int(per_line[loc]["ops"])) for loc in order[:5]),
            assumptions=tuple(assumptions),
        )
    ]
