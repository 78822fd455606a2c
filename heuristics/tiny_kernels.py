"""Tiny kernels: the GPU waits for the CPU to launch many short kernels.

**What it detects.** Stretches of kernels with the GPU idle between them because the next launch
had not arrived yet: kernels that each run for only a few microseconds (under
``tiny_kernels.max_kernel_us``, default 10 us, or shorter than the ``cudaLaunchKernel`` call
that launched them), and kernels of any length whose operator was already on the host when
the GPU ran out of work (10 us GEMMs issued by 20 us operators wait as 3 us kernels do; see
``heuristics/_launch.py``). Grouped by the op (and the optimizer / annotation around it) and
your source line; kernels that run launch-bound because a sync or blocking copy had drained the
queue before them are named with that call.

**Why it costs time.** Every eager PyTorch op costs the CPU roughly 5-20 us (Python, dispatcher,
launch). When the kernels themselves are shorter than that, the GPU finishes each one before
the host has launched the next: it is *launch-bound* and sits idle between kernels, whatever its
speed. Typical sources: per-parameter optimizer loops, elementwise chains on small tensors,
small batches, Python loops over tensors.

**How the saving is estimated.** The idle gaps on the device right before each such kernel
(no kernel, copy or memset running on any stream), counted only when the kernel's launch call
was still in progress when the GPU ran dry and the gap is at most ``tiny_kernels.max_gap_us``
(default 100 us; longer gaps are the host doing other work and belong to gpu-idle). Reported
with at least ``tiny_kernels.min_per_step`` such kernels per step, or, in a step of few
kernels, ``tiny_kernels.min_kernel_pct`` of them (and a quarter of that count). The steps are
replayed with these kernels in CUDA graphs (each stretch of their launches a graph: a sync ends
it; half the host time between the launches kept, range all to none). On a launch-bound step
this time is part of gpu-idle's whole-step graph and is listed under it.

**How to fix.** ``torch.compile(model)`` fuses chains of small ops into fewer kernels;
``torch.compile(model, mode="reduce-overhead")`` also captures them in CUDA graphs, which replay
hundreds of kernels with one launch (static shapes needed). For optimizers use
``foreach=True`` or ``fused=True``; replace per-tensor Python loops by ``torch._foreach_*`` or
batched ops; a larger batch makes each kernel longer for the same launch cost. A model that is
already compiled (compiled regions or Inductor's kernels in the trace, or run.json) is told
``mode="reduce-overhead"`` and its graph breaks, not "use torch.compile".

**Known false positives.** Gaps before a tiny kernel that waits for something other than its
launch (an event on another stream, a peer's collective) are excluded only when the launch
finished before the GPU ran dry. Kernels inside CUDA graphs (one ``cudaGraphLaunch``) are not
launch-bound and rarely show gaps.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from advisor.arrays import unique_ints
from advisor.derive.locate import aggregate
from advisor.detect.draft import Draft
from advisor.detect.registry import Context, detector
from advisor.findings import Evidence, Location
from advisor.replay.fixes import GraphLaunch
from advisor.replay.whatif import Saving
from advisor.trace.model import Trace
from advisor.trace.names import name_flags

from ._compile import model_compiled
from ._launch import after_drain, reported_gaps
from ._ops import chain_match, op_names
from ._per_step import fmt_ms, n_steps

ID = "tiny-kernels"
TITLE = "Launch-bound tiny kernels"


_OPT = "Optimizer.step"
_ZERO = "zero_grad"
_AUTOGRAD = ("autograd::", "torch::autograd::")


def _us(v: float) -> str:
    return "<1 us" if v < 1.0 else f"{v:.1f} us"


def _groups_of(trace: Trace, op_idx: np.ndarray, opn: np.ndarray) -> list[tuple[str, int]]:
    """Per launching op row: (label, op row for the source line): the outermost op under the
    step, plus the outermost aten op inside it when that is a different op."""
    ops = trace.cpu_ops
    out = [("(no CPU op recorded)", -1)] * len(op_idx)
    if not len(op_idx) or not len(ops):
        return out
    names = ops["name"]
    not_step = ~name_flags(names, lambda n: n.startswith("ProfilerStep#"))
    is_aten = not_step & name_flags(names, lambda n: "::" in n and not n.startswith(_AUTOGRAD))
    outer = chain_match(trace, op_idx, not_step, outermost=True)
    aten = chain_match(trace, op_idx, is_aten, outermost=True)
    # each distinct (outer, aten) pair labelled once
    rows = np.flatnonzero(outer >= 0)
    pairs, which = np.unique(outer[rows] * (len(ops) + 1) + (aten[rows] + 1), return_inverse=True)
    hits = []
    for o, a in zip(
        (pairs // (len(ops) + 1)).tolist(), (pairs % (len(ops) + 1) - 1).tolist(), strict=True
    ):
        name = opn[o].replace("autograd::engine::evaluate_function: ", "backward: ")
        hits.append((f"{opn[a]} in {name}", a) if a >= 0 and a != o else (name, o))
    for j, k in zip(rows.tolist(), which.ravel().tolist(), strict=True):
        out[j] = hits[k]
    return out


def _contexts(trace: Trace, tids: np.ndarray, ts: np.ndarray) -> list[str]:
    """Innermost CPU annotation around each launch (e.g. ``Optimizer.step#AdamW.step``)."""
    out = [""] * len(ts)
    a = trace.annotations
    if not len(a):
        return out
    names = a["name"].astype(str)
    keep = ~a["on_gpu"].to_numpy(dtype=bool) & ~names.str.startswith("ProfilerStep#").to_numpy()
    a = a[keep]
    tids = np.asarray(tids)
    ts = np.asarray(ts, dtype=np.int64)
    for t, g in a.groupby("tid"):
        sel = np.flatnonzero(tids == int(t))
        if not len(sel):
            continue
        g = g.sort_values("ts_ns", kind="stable")
        starts, ends = g["ts_ns"].to_numpy(), g["end_ns"].to_numpy()
        at = ts[sel]
        i = np.searchsorted(starts, at, side="right") - 1
        for _ in range(64):  # nested ranges: walk back to the innermost one that encloses t
            back = (i >= 0) & (ends[np.clip(i, 0, None)] < at)
            if not back.any():
                break
            i[back] -= 1
        inside = (i >= 0) & (ends[np.clip(i, 0, None)] >= at)
        gnames = g["name"].astype(str).to_numpy()
        for j, k in zip(sel[inside].tolist(), i[inside].tolist(), strict=True):
            out[j] = str(gnames[k])
    return out


class _Facts(NamedTuple):
    """The launch gaps reported (``_launch.reported_gaps``), grouped by the op and context that
    launched their kernels."""

    lg: pd.DataFrame
    steps: int
    gap_ms: float  # idle per step before the kernels
    groups: dict[str, list[int]]  # label -> rows of lg
    src: dict[str, int]  # label -> op row for its source line
    order: list[str]  # labels, most idle first
    med_launch_us: float  # median launch call
    in_opt: float  # share of the kernels under Optimizer.step / zero_grad
    in_zero: float


@detector(ID, TITLE, needs=("kernels",), gpu_only=True)
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    f = _measure(trace, ctx)
    if f is None:
        return []
    drained = after_drain(trace, f.lg, ctx.t("tiny_kernels.max_gap_us"))
    evidence = [*_evidence(trace, f), *_drain_evidence(trace, f.lg, drained, f.steps)]
    rec, snippet = _advice(trace, ctx, f)
    rep = ctx.whatif(
        GraphLaunch(
            f.lg["k_idx"].to_numpy(),
            host_keep=0.5,
            low=1.0,
            high=0.0,
            label="CUDA graphs for the tiny kernels",
        )
    )
    fields = rep.draft_fields() if rep.replayed else {"est_savings_ms": f.gap_ms}
    return [
        Draft(
            id=ID,
            title=TITLE,
            **fields,
            confidence="medium" if f.in_opt < 0.5 else "high",
            summary=_summary(ctx, f),
            recommendation=rec,
            snippet=snippet,
            evidence=tuple(evidence),
            locations=aggregate(_locations(ctx, f)),
            assumptions=_assumptions(ctx, f, rep),
        )
    ]


def _measure(trace: Trace, ctx: Context) -> _Facts | None:
    lg = reported_gaps(trace, ctx)
    if not len(lg):
        return None
    steps = n_steps(trace)
    gap_ms = float(lg["gap_ns"].sum()) / 1e6 / steps
    rt = trace.runtime
    li = lg["launch_idx"].to_numpy()
    launch_us = rt["dur_ns"].to_numpy()[li] / 1000.0
    groups, src = _grouped(trace, lg)
    order = sorted(groups, key=lambda g: -int(lg["gap_ns"].to_numpy()[groups[g]].sum()))
    in_opt = sum(len(groups[g]) for g in groups if _OPT in g) / len(lg)
    in_zero = sum(len(groups[g]) for g in groups if _ZERO in g) / len(lg)
    med_launch = float(np.median(launch_us))
    return _Facts(lg, steps, gap_ms, groups, src, order, med_launch, in_opt, in_zero)


def _grouped(trace: Trace, lg: pd.DataFrame) -> tuple[dict[str, list[int]], dict[str, int]]:
    """Rows of ``lg`` by label (the op, and the annotation around its launch), with each
    label's op row for the source line."""
    rt = trace.runtime
    li = lg["launch_idx"].to_numpy()
    op_idx = rt["op_idx"].to_numpy()[li]
    groups: dict[str, list[int]] = {}
    src: dict[str, int] = {}
    where_all = _contexts(trace, rt["tid"].to_numpy()[li], rt["ts_ns"].to_numpy()[li])
    for j, (label, row) in enumerate(_groups_of(trace, op_idx, op_names(trace))):
        where = where_all[j]
        if where and where not in label:
            label = f"{label} in {where}"
        groups.setdefault(label, []).append(j)
        src.setdefault(label, row)
    return groups, src


def _evidence(trace: Trace, f: _Facts) -> list[Evidence]:
    lg, steps = f.lg, f.steps
    evidence = []
    for label in f.order[:5]:
        idx = np.array(f.groups[label])
        gaps = lg["gap_ns"].to_numpy()[idx]
        durs = lg["dur_ns"].to_numpy()[idx]
        evidence.append(
            Evidence(
                what=f"{label}: {len(idx) / steps:.0f} kernels/step, median "
                f"{_us(float(np.median(durs)) / 1000)} each, idle {fmt_ms(gaps.sum() / 1e6 / steps)}/step before them",
                count=len(idx),
                total_ms=round(float(gaps.sum()) / 1e6, 3),
                example_ts_us=trace.to_trace_us(int(lg["ts_ns"].iat[int(idx[np.argmax(gaps)])])),
            )
        )
    return evidence


def _locations(ctx: Context, f: _Facts) -> list[Location | None]:
    locs: list[Location | None] = []
    for label in f.order:
        loc = ctx.locator.for_op(f.src[label]) if f.src[label] >= 0 else None
        locs.extend([loc] * len(f.groups[label]))
    return locs


def _advice(trace: Trace, ctx: Context, f: _Facts) -> tuple[str, str]:
    """The recommendation and snippet: fusion and graphs, the optimizer's or zero_grad's
    own fix first when most kernels come from there."""
    rec = (
        "Fuse the small ops: `torch.compile(model)`; with static shapes use "
        '`torch.compile(model, mode="reduce-overhead")` so CUDA graphs replay the kernels '
        "with one launch. Replace per-tensor Python loops with `torch._foreach_*` or batched "
        "ops, and consider a larger batch (longer kernels for the same launch cost)."
    )
    snippet = 'model = torch.compile(model, mode="reduce-overhead")  # fusion + CUDA graphs'
    if model_compiled(trace, ctx):
        rec = (
            "The model is already compiled: capture it in CUDA graphs so the kernels replay "
            'with one launch, `torch.compile(model, mode="reduce-overhead")` (static shapes), '
            "and look for graph breaks that leave code eager (compile-graph-breaks). Consider "
            "a larger batch (longer kernels for the same launch cost)."
        )
    if f.in_opt >= 0.5:
        rec = (
            "Most of these kernels come from the optimizer step: use the multi-tensor or "
            "fused implementation (`foreach=True` / `fused=True`), see also "
            "single-tensor-optimizer. " + rec
        )
        snippet = (
            "optimizer = torch.optim.AdamW(model.parameters(), lr=lr, fused=True)\n"
            "# or foreach=True; and for the model itself:\n" + snippet
        )
    elif f.in_zero >= 0.3:
        rec = (
            "Many of these kernels zero gradients one parameter at a time: "
            "`optimizer.zero_grad(set_to_none=True)` drops them (see zero-grad-not-none). " + rec
        )
        snippet = "optimizer.zero_grad(set_to_none=True)\n" + snippet
    return rec, snippet


def _summary(ctx: Context, f: _Facts) -> str:
    lg, steps, gap_ms = f.lg, f.steps, f.gap_ms
    per_step = len(lg) / steps
    share = 100.0 * gap_ms / ctx.step_ms_median if ctx.step_ms_median > 0 else 0.0
    med_k = float(np.median(lg["dur_ns"])) / 1000.0
    n_tiny = int(lg["tiny"].to_numpy(dtype=bool).sum())
    if n_tiny == len(lg):
        return (
            f"{per_step:.0f} tiny kernels per step (median {_us(med_k)}; their launch calls "
            f"take {_us(f.med_launch_us)}) leave the GPU idle {fmt_ms(gap_ms)} per step "
            f"({share:.1f}% of the step) waiting for the next launch."
        )
    return (
        f"{per_step:.0f} launch-bound kernels per step ({n_tiny / steps:.0f} of "
        f"them tiny; median {_us(med_k)}, while the operator that launches each "
        f"takes {_us(float(np.median(lg['op_ns'])) / 1000)} of host time) leave the GPU "
        f"idle {fmt_ms(gap_ms)} per step ({share:.1f}% of the step) waiting for the "
        "next launch."
    )


def _assumptions(ctx: Context, f: _Facts, rep: Saving) -> tuple[str, ...]:
    return (
        f"Launch-bound = shorter than {ctx.t('tiny_kernels.max_kernel_us'):g} us or than its "
        "own launch call, or of any length when the GPU ran dry while the operator that "
        f"launches it was on the host; only gaps of at most "
        f"{ctx.t('tiny_kernels.max_gap_us'):g} us whose launch was still in progress when the "
        "GPU ran dry are counted.",
        (rep.assumption + " The kernels' own run time is not claimed.")
        if rep.replayed
        else (
            f"Saving = those gaps summed and divided by the {f.steps} step(s): CUDA graphs "
            "remove them; fusion removes most. The kernels' own run time is not claimed."
        ),
        "These gaps are part of gpu-idle's 'host launch' share; gpu-idle does not claim them.",
    )


def _drain_evidence(
    trace: Trace, lg: pd.DataFrame, drained: np.ndarray, steps: int
) -> list[Evidence]:
    """A row per call that drained the queue before launch-bound kernels (a sync or a
    blocking copy: the host waited, then issued the next kernels one by one)."""
    rt = trace.runtime
    opn = op_names(trace)
    aten = name_flags(trace.cpu_ops["name"], lambda n: n.startswith("aten::"))
    by: dict[str, list[int]] = {}  # label of the draining call -> its runtime rows
    for row in unique_ints(drained[drained >= 0]).tolist():
        op = int(rt["op_idx"].iat[row])
        top = chain_match(trace, np.array([op]), aten, outermost=True)[0] if op >= 0 else -1
        what = str(opn[top if top >= 0 else op]) if op >= 0 else str(rt["name"].iat[row])
        by.setdefault(f"{what} ({rt['name'].iat[row]})", []).append(row)
    out = []
    for label, rows in by.items():
        sel = np.flatnonzero(np.isin(drained, rows))
        gap_ns = float(lg["gap_ns"].to_numpy()[sel].sum())
        out.append(
            Evidence(
                what=f"after {label} waited for the GPU and drained the queue: "
                f"{len(sel) / steps:.0f} kernels/step ran launch-bound, idle "
                f"{fmt_ms(gap_ns / 1e6 / steps)}/step",
                count=len(sel),
                total_ms=round(gap_ns / 1e6, 3),
                example_ts_us=trace.to_trace_us(int(rt["ts_ns"].iat[rows[0]])),
            )
        )
    return sorted(out, key=lambda e: -e.total_ms)[:3]
