"""torch.compile graph breaks: compiled code that returns to Python inside every call.

**What it detects.** Code under ``torch.compile`` that dynamo cannot put in one graph: at
each graph break the compiled graph ends, Python runs the unsupported part eagerly, and a
*resume function* (the rest of the function) enters compiled code again, after its own guard
checks. With ``advisor profile``, run.json lists each break dynamo logged with its reason and
the user's line (``compile.graph_breaks``). In a trace, the entries into resume functions'
compiled regions (``Torch-Compiled Region: N/M`` whose frame N is a resume function: run.json's
frames, the region around a ``torch_dynamo_resume_in_<fn>_at_<line>`` Python frame, or a region
entered inside another frame's region, ``1/0`` .. ``3/0`` nested in ``0/0``) count the breaks
per step, with or without Python stacks (without them, no line is named); the ``TorchDynamo
Cache Lookup`` before each is its guard check.

**Why it costs time.** Every break splits the model into smaller graphs (fewer fusions, each
graph's own launches), runs Python and eager operators between them and checks guards before
entering the next graph; a break on a tensor's value (``.item()``, ``if tensor:``) also waits
for the GPU there (see ``sync-point``).

**How the saving is estimated.** The host time each break adds per step, from the end of the
previous compiled work to the start of the resume function's graph (the eager code between the
graphs, the cache lookup, the region's entry), is replayed (see docs/savings.md) at half its
length (range: a quarter of it kept to all of it removed): fixed, that code runs inside one
graph. Fewer, larger fused kernels on the GPU are not counted, so the figure is low. Without
GPU work (a CPU run), half of that host time per step is the saving. A break known only from
run.json (the trace shows no resume region) is information with no saving.

**How to fix.** Per reason: data-dependent control flow (``if x.sum() > 0``) -> ``torch.where``
or ``torch.cond``; ``.item()`` / ``.tolist()`` -> keep values as tensors (or
``torch._dynamo.config.capture_scalar_outputs = True``); an unsupported call (``print``,
logging, NumPy, a C extension) -> move it out of the compiled function or
``torch.compiler.disable`` it on purpose; operators with data-dependent output shapes
(``nonzero``, boolean masks) -> ``capture_dynamic_output_shape_ops = True`` or fixed-size
alternatives. ``torch._dynamo.explain(fn)(*args)`` or ``TORCH_LOGS=graph_breaks`` list them all.

**Known false positives.** A break placed on purpose (``torch.compiler.disable`` around code
that must stay eager) is reported too; its cost is still real.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from advisor.detect.draft import Draft
from advisor.detect.registry import Context, detector
from advisor.findings import Evidence, Location
from advisor.replay.fixes import ShrinkHost
from advisor.trace.model import Trace
from advisor.trace.names import name_mask

from ._compile import (
    Advice,
    advice_for,
    location,
    lookups,
    nested_frames,
    regions,
    resume_frame_ids,
    resume_frames,
    user_rows,
)
from ._per_step import fmt_ms, n_steps

ID = "compile-graph-breaks"
TITLE = "torch.compile graph breaks"

# (pattern over the break's class and reason, advice)
ADVICE: Advice = (
    (
        re.compile(r"data-dependent branch|generic_jump|jump|if .* tensor", re.I),
        "data-dependent control flow: compute both sides with torch.where(cond, a, b) or use "
        "torch.cond; or move the branch out of the compiled function",
    ),
    (
        re.compile(r"item\(\)|capture_scalar_outputs|tolist|local_scalar", re.I),
        "a tensor read back to Python (.item(), .tolist()): keep the value as a tensor, or set "
        "torch._dynamo.config.capture_scalar_outputs = True",
    ),
    (
        re.compile(r"dynamic shape|dynamic_output_shape|nonzero|data dependent output", re.I),
        "an operator whose output shape depends on the data (nonzero, boolean masks, unique): "
        "set torch._dynamo.config.capture_dynamic_output_shape_ops = True or use a fixed-size "
        "alternative (masked arithmetic, torch.where)",
    ),
    (
        re.compile(r"numpy|ndarray", re.I),
        "NumPy inside the compiled code: use torch operators on tensors instead",
    ),
    (
        re.compile(
            r"skipped|builtin|unsupported|call_function|print|logging|not supported|"
            r"Failed to trace|C extension|user-defined",
            re.I,
        ),
        "an unsupported call (print, logging, a C extension, a skipped library function): move "
        "it out of the compiled function, or register it (torch.library custom op, "
        "torch._dynamo.allow_in_graph) so dynamo can keep it in the graph",
    ),
)
DEFAULT_ADVICE = (
    "see the reason: torch._dynamo.explain(fn)(*args) or TORCH_LOGS=graph_breaks shows each "
    "break with its stack"
)

SNIPPET = """\
# data-dependent branch -> tensor ops (one graph)
# was:  if h.norm() > limit: h = h * (limit / h.norm())
h = h * torch.clamp(limit / h.norm(), max=1.0)
# .item() -> keep it a tensor, or: torch._dynamo.config.capture_scalar_outputs = True
# list every break:  TORCH_LOGS=graph_breaks python train.py"""


# the compiled work of a region: AOT autograd's graph, inductor's graph call, a nested region
_GRAPH_RE = re.compile(r"^CompiledFunction$|CompiledFxGraph|^Torch-Compiled Region: ")


def _break_ranges(trace: Trace, resume: set[int]) -> pd.DataFrame:
    """Per entry into a resume function's region in the steady steps: the host range from the
    end of the compiled work before it (the previous graph, under the same parent) to the
    region's first child: the eager code between the graphs, the guard check and the entry
    (ts_ns, end_ns, tid, step)."""
    reg = regions(trace)
    reg = reg[reg["frame"].isin(sorted(resume))]
    cols = ["ts_ns", "end_ns", "tid", "step"]
    if not len(reg):
        return pd.DataFrame(columns=cols)
    ops = trace.cpu_ops
    parent = ops["parent_idx"].to_numpy()
    tid, ts, end = ops["tid"].to_numpy(), ops["ts_ns"].to_numpy(), ops["end_ns"].to_numpy()
    graph = name_mask(ops["name"], _GRAPH_RE)
    out = []
    for r in reg.itertuples():
        p = parent[r.row]
        prev = (tid == r.tid) & (parent == p) & graph & (end <= r.ts_ns)
        if p >= 0:
            prev &= ts >= ts[p]
        start = int(end[prev].max()) if prev.any() else int(ts[p] if p >= 0 else r.ts_ns)
        kids = np.flatnonzero(parent == r.row)
        first = int(ts[kids].min()) if len(kids) else int(r.end_ns)
        out.append((start, max(first, start), r.tid, r.step))
    return pd.DataFrame(out, columns=cols)


def _why(row: dict[str, Any]) -> str:
    kind, reason = str(row.get("type") or ""), str(row.get("reason") or "")
    return kind if reason in ("", kind) else f"{kind}: {reason}" if kind else reason


def _lines(trace: Trace, ctx: Context) -> tuple[list[dict[str, Any]], bool]:
    """The breaks with reasons and lines (run.json), else the resume frames' lines (trace),
    else the compiled frames entered inside another frame's region (no lines)."""
    live = user_rows(ctx.live.compile.graph_breaks)
    if live:
        return live, True
    rf = resume_frames(trace)
    rows = []
    for (file, line, fn), g in rf.groupby(["file", "line", "function"], sort=False):
        rows.append({"file": file, "line": int(line), "function": fn, "count": len(g)})
    if not rows:
        rows = [
            {"frame": f, "count": n, "function": f"Torch-Compiled Region: {f}/*"}
            for f, n in sorted(nested_frames(trace).items())
        ]
    return rows, False


def _where(r: dict[str, Any]) -> str:
    """A break's line, or the resume graph's region when the trace has no lines."""
    if "frame" in r:
        return f"resume graph {r['function']}"
    return f"{str(r.get('file', '?')).rsplit('/', 1)[-1]}:{r.get('line', '?')}"


@dataclass(frozen=True)
class _Breaks:
    """The breaks (with their lines, or the resume graphs) and their measured host time."""

    rows: list[dict[str, Any]]  # per line (or resume graph), most costly first
    live: bool  # rows from run.json (dynamo's log), with reasons
    ranges: pd.DataFrame  # entries into resume functions' regions in the steady steps
    steps: int

    @property
    def lined(self) -> bool:
        """Whether the rows name lines (else resume graphs: the trace has no stacks)."""
        return "frame" not in self.rows[0]

    @property
    def host_ns(self) -> int:
        br = self.ranges
        return int((br["end_ns"] - br["ts_ns"]).sum()) if len(br) else 0

    @property
    def host_ms(self) -> float:
        return self.host_ns / 1e6 / self.steps

    @property
    def per_step(self) -> float:
        return len(self.ranges) / self.steps


@detector(ID, TITLE, needs=("cpu_ops",))
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    found = _measure(trace, ctx)
    if found is None:
        return []
    fields, how = _value(trace, ctx, found)
    measured = bool(len(found.ranges))
    locs = [location(r, str(r.get("function") or "")) for r in found.rows]
    return [
        Draft(
            id=ID,
            title=TITLE,
            **fields,
            confidence="high" if found.live and measured else "medium",
            summary=_summary(found),
            recommendation=_recommendation(found),
            snippet=SNIPPET,
            evidence=_evidence(trace, found),
            locations=tuple(loc for loc in locs if isinstance(loc, Location))[:5],
            assumptions=_assumptions(found, how),
            latent=not measured,
            extra={
                "breaks_per_step": round(found.per_step, 2),
                "host_ms_per_step": round(found.host_ms, 3),
            },
        )
    ]


def _measure(trace: Trace, ctx: Context) -> _Breaks | None:
    rows, live = _lines(trace, ctx)
    if not rows:
        return None
    br = _break_ranges(trace, resume_frame_ids(trace, ctx))
    return _Breaks(rows, live, br, n_steps(trace))


def _value(trace: Trace, ctx: Context, found: _Breaks) -> tuple[dict[str, Any], str]:
    """The host time between the graphs replayed at half its length; without GPU work, half of
    it; nothing without a resume region to measure. The draft's fields, and how."""
    br = found.ranges
    if not len(br):
        return (
            {"est_savings_ms": 0.0},
            "No saving is claimed: the trace shows no entry into a resume function's graph.",
        )
    rep = ctx.whatif(
        ShrinkHost(
            br["ts_ns"].to_numpy(),
            br["end_ns"].to_numpy(),
            br["tid"].to_numpy(),
            keep=0.5,
            low=0.75,
            high=0.0,
            label="no graph breaks",
        )
    )
    if rep.replayed and trace.has_gpu:
        return rep.draft_fields(), rep.assumption
    host_ms = found.host_ms
    return (
        {
            "est_savings_ms": round(host_ms / 2, 3),
            "est_savings_range_ms": (round(host_ms / 4, 3), round(host_ms, 3)),
        },
        "Not replayed (no GPU work the replay can place): half of that host time.",
    )


def _summary(found: _Breaks) -> str:
    rows, first = found.rows, found.rows[0]
    why = f": {first.get('type') or first.get('reason')}" if found.live else ""
    n_lines = len(rows)
    measured = bool(len(found.ranges))
    counted = (
        f"{found.per_step:.0f} graph break(s) per step in compiled code"
        if measured
        else f"{n_lines} graph break(s) where compiled code falls back to Python"
    )
    return (
        f"{counted} ({_where(first)}{why}"
        + (f", and {n_lines - 1} more line(s)" if n_lines > 1 else "")
        + ")"
        + (
            f": each ends a graph, runs Python and checks guards before the next one; "
            f"{fmt_ms(found.host_ms)} of host time per step between the graphs."
            if measured
            else "; the trace shows no resume region to measure them."
        )
    )


def _evidence(trace: Trace, found: _Breaks) -> tuple[Evidence, ...]:
    """The first five lines, the entries into resume regions, the compiled regions entered."""
    live, lined, br, steps = found.live, found.lined, found.ranges, found.steps
    evidence = [
        Evidence(
            _where(r)
            + (
                " entered inside another compiled region (no Python stacks: no line)"
                if not lined
                else " " + (_why(r) if live else f"resume in {r.get('function')}")
            ),
            int(r.get("count") or 1),
            0.0,
        )
        for r in found.rows[:5]
    ]
    if len(br):
        evidence.append(
            Evidence(
                "entries into a resume function's compiled region (guard check, region entry, "
                "eager code before it)",
                len(br),
                round(found.host_ns / 1e6, 3),
                trace.to_trace_us(int(br["ts_ns"].min())),
            )
        )
    reg, lu = regions(trace), lookups(trace)
    if len(reg):
        evidence.append(
            Evidence(
                f"compiled regions entered: {len(reg) / steps:.0f} per step, "
                f"{reg['frame'].nunique()} compiled frame(s) "
                f"({len(lu) / steps:.0f} cache lookups per step)",
                len(reg),
                round(float((lu["end_ns"] - lu["ts_ns"]).sum()) / 1e6, 3) if len(lu) else 0.0,
                trace.to_trace_us(int(reg["ts_ns"].min())),
            )
        )
    return tuple(evidence)


def _recommendation(found: _Breaks) -> str:
    """The three first lines with the advice for their reasons."""
    rows = found.rows
    kinds = []
    for r in rows:
        text = f"{r.get('type', '')} {r.get('reason', '')}"
        kinds.append(advice_for(ADVICE, text, DEFAULT_ADVICE) if found.live else DEFAULT_ADVICE)
    return (
        "Remove the graph breaks, most costly first: "
        + "; ".join(f"{_where(r)}: {k}" for r, k in list(zip(rows, kinds, strict=True))[:3])
        + ". TORCH_LOGS=graph_breaks prints every break with its stack"
        + (
            "; this trace has no Python stacks to name the lines (profile with "
            "with_stack=True, or run `advisor profile`, which records each break's reason)."
            if not found.lined
            else "."
        )
    )


def _assumptions(found: _Breaks, how: str) -> tuple[str, ...]:
    return (
        "Breaks: "
        + (
            "run.json's compile.graph_breaks (dynamo's own log, user lines)"
            if found.live
            else "Python frames of dynamo's resume functions in the trace"
            if found.lined
            else "compiled regions entered inside another frame's compiled region "
            "(a resume function's graph; the trace has no Python stacks)"
        )
        + "; per step: entries into resume functions' compiled regions in the steady "
        "steps.",
        "Saving: the host time from the end of the graph before each break to the start "
        "of the next graph, replayed at half its length (range: a quarter kept to all "
        "removed); kernel fusion across the break is not counted. " + how,
    )
