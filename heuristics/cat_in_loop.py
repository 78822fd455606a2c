"""A tensor grown by repeated ``torch.cat`` / ``torch.stack`` (quadratic copying).

**What it detects.** Calls of ``aten::cat`` / ``aten::stack`` (and ``concat``, ``hstack``,
``vstack``) from one line whose inputs show the result growing call after call: one input is
the previous call's result (``x = torch.cat([x, new])``), or the list holds the previous call's
tensors plus more (``torch.stack(results)`` inside the loop that appends to ``results``). Calls
are matched by their ``Input Dims`` (``record_shapes``), so chains interleaved on one line (a
KV cache per layer) are followed separately.

**Why it costs time.** Each call allocates a new tensor and copies everything accumulated so
far: n appends of k elements copy about k*n^2/2 elements instead of k*n.

**How the saving is estimated.** Per chain: the measured cost of every call minus the cost of
its last (largest) call, which is about what one ``cat`` of the final list (or filling a
preallocated tensor) costs. A call's cost is the GPU time of the kernels it launched, or its
CPU time when it launched none (CPU tensors; CPU-only traces). Allocator time for the discarded
intermediates is not counted. Divided by the number of steps in the trace. On GPU traces the
steady steps are replayed without those calls and their kernels (see docs/savings.md): the
saving is what the step loses.

**How to fix.** Collect the pieces in a Python list and call ``torch.cat`` once after the loop, or
preallocate the result and write slices into it (for generation: a static KV cache).

**Known false positives.** Architectures that concatenate a growing feature list by design
(DenseNet blocks written by hand): the copying cost is real, but the fix is a memory-efficient
implementation rather than a one-line change. Library code (torchvision's DenseNet) is not
reported when the trace has Python stacks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from advisor.detect.draft import Draft
from advisor.detect.registry import Context, Skip, detector
from advisor.detect.thresholds import register
from advisor.findings import Evidence, Location
from advisor.replay.fixes import Combined, ScaleGpu, ShrinkHost
from advisor.replay.whatif import Saving
from advisor.trace.model import Trace
from advisor.trace.names import name_in

from ._ops import chain_match, gpu_rows_from, inherit, kernel_op, op_names, parent_has
from ._per_step import ms, n_steps

ID = "cat-in-loop"
TITLE = "Tensor grown by repeated torch.cat"

register(
    "cat_in_loop.min_calls",
    5.0,
    "calls a growing cat/stack chain needs (within the profiled window) to be reported",
)

CAT_OPS = frozenset(
    {
        "aten::cat",
        "aten::_cat",
        "aten::concat",
        "aten::concatenate",
        "aten::stack",
        "aten::hstack",
        "aten::vstack",
    }
)

SNIPPET = """# before: every iteration copies everything collected so far
out = torch.empty(0, dim, device=device)
for batch in batches:
    out = torch.cat([out, model(batch)])

# after: collect, then one cat
parts = [model(batch) for batch in batches]
out = torch.cat(parts)
# or preallocate and fill: out = torch.empty(n, dim, device=device); out[i:i + b] = ...
"""
RECOMMENDATION = (
    "Append the pieces to a Python list and call torch.cat once after the loop, or preallocate "
    "the result and write slices into it (a static KV cache for generation): each repeated cat "
    "copies everything accumulated so far."
)


@dataclass
class Chain:
    key: object
    rows: list[int] = field(default_factory=list)
    totals: list[int] = field(default_factory=list)
    shapes: list[tuple[tuple[int, ...], ...]] = field(default_factory=list)


def _shapes(dims: object) -> tuple[tuple[int, ...], ...] | None:
    if not isinstance(dims, list) or not dims or not isinstance(dims[0], list):
        return None
    first = dims[0]
    if not first or not all(
        isinstance(s, list) and all(isinstance(v, int) for v in s) for s in first
    ):
        return None
    return tuple(tuple(s) for s in first)


def _grows(ch: Chain, shapes: tuple[tuple[int, ...], ...], total: int) -> bool:
    last_total, last_shapes = ch.totals[-1], ch.shapes[-1]
    if total <= last_total:
        return False
    if any(math.prod(s) == last_total for s in shapes):
        return True  # x = cat([x, new])
    n = len(last_shapes)
    return len(shapes) > n and shapes[:n] == last_shapes  # cat(growing_list)


def _chains(trace: Trace, rows: np.ndarray, keys: list[object]) -> list[Chain]:
    dims = trace.cpu_ops["input_dims"].to_numpy()
    open_chains: dict[object, list[Chain]] = {}
    done: list[Chain] = []
    for r, key in zip(rows, keys, strict=True):
        shapes = _shapes(dims[r])
        if shapes is None:
            continue
        total = sum(math.prod(s) for s in shapes)
        cands = open_chains.setdefault(key, [])
        match = next((c for c in reversed(cands) if _grows(c, shapes, total)), None)
        if match is None:
            match = Chain(key)
            cands.append(match)
            done.append(match)
        match.rows.append(int(r))
        match.totals.append(total)
        match.shapes.append(shapes)
        if len(cands) > 64:  # keep the search short on lines with many unrelated cats
            cands.pop(0)
    return done


def _call_costs(trace: Trace, rows: np.ndarray, is_cat: np.ndarray) -> dict[int, float]:
    """Per cat row: GPU time of the kernels it launched, else its CPU time (ns)."""
    ops = trace.cpu_ops
    cost = {int(r): 0.0 for r in rows}
    if len(trace.kernels):
        top = chain_match(trace, kernel_op(trace), is_cat, limit=256)
        k = pd.DataFrame({"top": top, "dur": trace.kernels["dur_ns"].to_numpy()})
        k = k[k["top"] >= 0].groupby("top")["dur"].sum()
        for r, d in k.items():
            if int(r) in cost:
                cost[int(r)] = float(d)
    dur = ops["dur_ns"].to_numpy()
    return {r: (c if c > 0 else float(dur[r])) for r, c in cost.items()}


@dataclass
class _Line:
    """The growing chains of one line (or, without stacks, one thread and op name)."""

    first: float  # the first call's start (ns)
    start: int  # the fewest elements a chain starts from
    calls: int = 0
    chains: int = 0
    saving: float = 0.0  # ns: every call but the last of each chain
    time: float = 0.0  # ns: every call
    end: int = 0  # the most elements a chain reaches
    longest: int = 0


@detector(ID, TITLE, needs=("cpu_ops", "shapes"))
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    found = _measure(trace, ctx)
    if found is None:
        return []
    chains, outer = found
    lines = _by_line(trace, chains, outer)
    nst = n_steps(trace)
    saving_ms, rep = _value(trace, ctx, chains, lines, nst)
    order = sorted(lines, key=lambda k: -lines[k].saving)
    top = lines[order[0]]
    return [
        Draft(
            id=ID,
            title=TITLE,
            est_savings_ms=round(saving_ms, 3),
            saving=rep,
            confidence="high" if trace.has_stack else "medium",
            summary=(
                f"{_label(order[0])} grows a tensor by repeated cat/stack ({top.longest} "
                f"calls, {top.start} -> {top.end} elements), copying everything so "
                f"far each time: about {saving_ms:.3f} ms per step to save."
            ),
            recommendation=RECOMMENDATION,
            snippet=SNIPPET,
            evidence=_evidence(trace, lines, order),
            locations=tuple(
                replace(k, count=lines[k].calls) for k in order[:5] if isinstance(k, Location)
            ),
            assumptions=_assumptions(rep, nst),
        )
    ]


def _measure(trace: Trace, ctx: Context) -> tuple[list[Chain], np.ndarray] | None:
    """The growing chains of at least ``cat_in_loop.min_calls`` calls, and which ops are
    outermost cat/stack calls (None: no such chain)."""
    ops = trace.cpu_ops
    names = op_names(trace)
    is_cat = name_in(ops["name"], CAT_OPS)
    parent = ops["parent_idx"].to_numpy()
    nested = parent_has(is_cat, parent)
    rows = np.flatnonzero(is_cat & ~nested)
    if not len(rows):
        return None
    dims = ops["input_dims"].to_numpy()
    if not any(_shapes(dims[r]) is not None for r in rows):
        raise Skip(
            "cat/stack inputs have no recorded shapes (this PyTorch version records "
            "TensorList inputs without dims)"
        )
    rows = rows[np.argsort(ops["ts_ns"].to_numpy()[rows], kind="stable")]
    if trace.has_stack:
        locs: list[Location | None] = ctx.locator.calling_lines(rows)
        keep = [i for i, loc in enumerate(locs) if loc is not None]
        rows = rows[keep]
        keys: list[object] = [locs[i] for i in keep]
    else:
        tid = ops["tid"].to_numpy()
        keys = [(int(tid[r]), str(names[r])) for r in rows]
    min_calls = int(ctx.t("cat_in_loop.min_calls"))
    chains = [c for c in _chains(trace, rows, keys) if len(c.rows) >= min_calls]
    if not chains:
        return None
    return chains, is_cat & ~nested  # a stack's kernels come from the cat inside it


def _by_line(trace: Trace, chains: list[Chain], outer: np.ndarray) -> dict[object, _Line]:
    """The chains' calls, costs and sizes per line, in the order lines first grow."""
    costs = _call_costs(trace, np.asarray([r for c in chains for r in c.rows]), outer)
    ts = trace.cpu_ops["ts_ns"]
    lines: dict[object, _Line] = {}
    for c in chains:
        cc = [costs[r] for r in c.rows]
        acc = lines.setdefault(c.key, _Line(float(ts.iat[c.rows[0]]), c.totals[0]))
        acc.calls += len(c.rows)
        acc.chains += 1
        acc.saving += sum(cc) - cc[-1]
        acc.time += sum(cc)
        acc.start = min(acc.start, c.totals[0])
        acc.end = max(acc.end, c.totals[-1])
        acc.longest = max(acc.longest, len(c.rows))
    return lines


def _value(
    trace: Trace, ctx: Context, chains: list[Chain], lines: dict[object, _Line], nst: int
) -> tuple[float, Saving | None]:
    """The steps replayed without every call but the last of each chain, with its kernels;
    without a replay (or GPU), the measured cost of those calls per step."""
    saving_ms = sum(v.saving for v in lines.values()) / 1e6 / nst
    if not trace.has_gpu:
        return saving_ms, None
    ops = trace.cpu_ops
    gone = np.asarray([r for c in chains for r in c.rows[:-1]], dtype=np.int64)
    mask = np.zeros(len(ops), dtype=bool)
    mask[gone] = True
    mask = inherit(trace, mask)
    k = trace.kernels
    rep = ctx.whatif(
        Combined(
            [
                ShrinkHost(
                    ops["ts_ns"].to_numpy()[gone],
                    ops["end_ns"].to_numpy()[gone],
                    ops["tid"].to_numpy()[gone],
                    keep=0.0,
                ),
                ScaleGpu(
                    kernels=gpu_rows_from(trace, k, mask) if len(k) else [],
                    speedup=float("inf"),
                ),
            ],
            label="one cat after the loop",
        )
    )
    return (rep.ms, rep) if rep.replayed else (saving_ms, None)


def _label(key: object) -> str:
    if isinstance(key, Location):
        return f"{key.file}:{key.line} ({key.function})"
    return f"thread {key[0]} {key[1]}" if isinstance(key, tuple) else str(key)


def _evidence(
    trace: Trace, lines: dict[object, _Line], order: list[object]
) -> tuple[Evidence, ...]:
    return tuple(
        Evidence(
            f"{_label(k)}: {v.chains} growing chain(s), up to {v.longest} calls, "
            f"{v.start} -> {v.end} elements",
            v.calls,
            ms(v.time),
            trace.to_trace_us(v.first),
        )
        for k, v in ((k, lines[k]) for k in order[:5])
    )


def _assumptions(rep: Saving | None, nst: int) -> tuple[str, ...]:
    return (
        (
            "Per chain: every call but the last (largest), about what one cat of the final list "
            "costs, removed with its kernels. " + rep.assumption
        )
        if rep is not None
        else (
            "Per chain: measured cost of all calls minus the last (largest) call, about what "
            f"one cat of the final list costs; divided by the {nst} step(s) in the trace."
        ),
        "A call's cost is the GPU time of its kernels, or its CPU time when it launched none; "
        "allocation of the discarded intermediates is not counted.",
    )
