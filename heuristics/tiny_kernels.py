"""Tiny kernels: the GPU waits for the CPU to launch many very short kernels.

**What it detects.** Stretches of kernels that each run for only a few microseconds (under
``tiny_kernels.max_kernel_us``, default 10 us, or shorter than the ``cudaLaunchKernel`` call
that launched them) with the GPU idle between them because the next launch had not arrived
yet. Grouped by the op (and the optimizer / annotation around it) and your source line.

**Why it costs time.** Every eager PyTorch op costs the CPU roughly 5-20 us (Python, dispatcher,
launch). When the kernels themselves are shorter than that, the GPU finishes each one before
the host has launched the next: it is *launch-bound* and sits idle between kernels, whatever its
speed. Typical sources: per-parameter optimizer loops, elementwise chains on small tensors,
small batches, Python loops over tensors.

**How the saving is estimated.** The idle gaps on the device right before each such kernel
(no kernel, copy or memset running on any stream), counted only when the kernel's launch call
was still in progress when the GPU ran dry and the gap is at most ``tiny_kernels.max_gap_us``
(default 100 us; longer gaps are the host doing other work and belong to gpu-idle). Summed per
step. CUDA graphs remove these gaps entirely; fusion removes most of them.

**How to fix.** ``torch.compile(model)`` fuses chains of small ops into fewer kernels;
``torch.compile(model, mode="reduce-overhead")`` also captures them in CUDA graphs, which replay
hundreds of kernels with one launch (static shapes needed). For optimizers use
``foreach=True`` or ``fused=True``; replace per-tensor Python loops by ``torch._foreach_*`` or
batched ops; a larger batch makes each kernel longer for the same launch cost.

**Known false positives.** Gaps before a tiny kernel that waits for something other than its
launch (an event on another stream, a peer's collective) are excluded only when the launch
finished before the GPU ran dry. Kernels inside CUDA graphs (one ``cudaGraphLaunch``) are not
launch-bound and rarely show gaps.
"""

from __future__ import annotations

import numpy as np

from advisor.findings import Draft, Evidence, Location
from advisor.locate import aggregate
from advisor.registry import Context, detector
from advisor.trace.model import Trace
from heuristics._gpu_timeline import fmt_ms, n_steps, op_chain, op_names
from heuristics._launch import reported_gaps

ID = "tiny-kernels"
TITLE = "Launch-bound tiny kernels"


_OPT = "Optimizer.step"
_ZERO = "zero_grad"
_AUTOGRAD = ("autograd::", "torch::autograd::")


def _us(v: float) -> str:
    return "<1 us" if v < 1.0 else f"{v:.1f} us"


def _group_of(trace: Trace, op_idx: int, opn: np.ndarray) -> tuple[str, int]:
    """(label, op row for the source line): the outermost op under the step, plus its
    optimizer/annotation context."""
    if op_idx < 0:
        return "(no CPU op recorded)", -1
    chain = [i for i in op_chain(trace, op_idx) if not opn[i].startswith("ProfilerStep#")]
    if not chain:
        return "(no CPU op recorded)", -1
    aten = [i for i in chain if "::" in opn[i] and not opn[i].startswith(_AUTOGRAD)]
    outer = chain[-1]
    name = opn[outer].replace("autograd::engine::evaluate_function: ", "backward: ")
    if aten and aten[-1] != outer:
        return f"{opn[aten[-1]]} in {name}", aten[-1]
    return name, outer


def _contexts(trace: Trace, tids: np.ndarray, ts: np.ndarray) -> list[str]:
    """Innermost CPU annotation around each launch (e.g. ``Optimizer.step#AdamW.step``)."""
    out = [""] * len(ts)
    a = trace.annotations
    if not len(a):
        return out
    names = a["name"].astype(str)
    keep = ~a["on_gpu"].to_numpy(dtype=bool) & ~names.str.startswith("ProfilerStep#").to_numpy()
    a = a[keep]
    by_tid = {int(t): g.sort_values("ts_ns", kind="stable") for t, g in a.groupby("tid")}
    for j, (tid, t) in enumerate(zip(tids, ts, strict=True)):
        g = by_tid.get(int(tid))
        if g is None:
            continue
        starts = g["ts_ns"].to_numpy()
        ends = g["end_ns"].to_numpy()
        i = int(np.searchsorted(starts, t, side="right")) - 1
        for _ in range(64):  # nested ranges: walk back to the innermost one that encloses t
            if i < 0 or ends[i] >= t:
                break
            i -= 1
        if i >= 0 and ends[i] >= t:
            out[j] = str(g["name"].iat[i])
    return out


@detector(ID, TITLE, needs=("kernels",), gpu_only=True)
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    max_k = ctx.t("tiny_kernels.max_kernel_us")
    lg = reported_gaps(trace, ctx)
    if not len(lg):
        return []
    steps = n_steps(trace)
    per_step = len(lg) / steps
    gap_ms = float(lg["gap_ns"].sum()) / 1e6 / steps
    share = 100.0 * gap_ms / ctx.step_ms_median if ctx.step_ms_median > 0 else 0.0
    rt = trace.runtime
    opn = op_names(trace)
    li = lg["launch_idx"].to_numpy()
    op_idx = rt["op_idx"].to_numpy()[li]
    rt_tid = rt["tid"].to_numpy()[li]
    rt_ts = rt["ts_ns"].to_numpy()[li]
    launch_us = rt["dur_ns"].to_numpy()[li] / 1000.0
    groups: dict[str, list[int]] = {}
    src: dict[str, int] = {}
    memo: dict[int, tuple[str, int]] = {}
    where_all = _contexts(trace, rt_tid, rt_ts)
    for j, oi in enumerate(op_idx):
        if int(oi) not in memo:
            memo[int(oi)] = _group_of(trace, int(oi), opn)
        label, row = memo[int(oi)]
        where = where_all[j]
        if where and where not in label:
            label = f"{label} in {where}"
        groups.setdefault(label, []).append(j)
        src.setdefault(label, row)
    order = sorted(groups, key=lambda g: -int(lg["gap_ns"].to_numpy()[groups[g]].sum()))
    evidence = []
    for label in order[:5]:
        idx = np.array(groups[label])
        gaps = lg["gap_ns"].to_numpy()[idx]
        durs = lg["dur_ns"].to_numpy()[idx]
        evidence.append(Evidence(
            what=f"{label}: {len(idx) / steps:.0f} kernels/step, median "
                 f"{_us(float(np.median(durs)) / 1000)} each, idle {fmt_ms(gaps.sum() / 1e6 / steps)}/step before them",
            count=len(idx), total_ms=round(float(gaps.sum()) / 1e6, 3),
            example_ts_us=trace.to_trace_us(int(lg["ts_ns"].iat[int(idx[np.argmax(gaps)])])),
        ))  # fmt: skip
    locs: list[Location | None] = []
    for label in order:
        loc = ctx.locator.for_op(src[label]) if src[label] >= 0 else None
        locs.extend([loc] * len(groups[label]))
    in_opt = sum(len(groups[g]) for g in groups if _OPT in g) / len(lg)
    in_zero = sum(len(groups[g]) for g in groups if _ZERO in g) / len(lg)
    med_k = float(np.median(lg["dur_ns"])) / 1000.0
    med_launch = float(np.median(launch_us))
    rec = ("Fuse the small ops: `torch.compile(model)`; with static shapes use "
           '`torch.compile(model, mode="reduce-overhead")` so CUDA graphs replay the kernels '
           "with one launch. Replace per-tensor Python loops with `torch._foreach_*` or batched "
           "ops, and consider a larger batch (longer kernels for the same launch cost).")  # fmt: skip
    snippet = 'model = torch.compile(model, mode="reduce-overhead")  # fusion + CUDA graphs'
    if in_opt >= 0.5:
        rec = ("Most of these kernels come from the optimizer step: use the multi-tensor or "
               "fused implementation (`foreach=True` / `fused=True`), see also "
               "single-tensor-optimizer. " + rec)  # fmt: skip
        snippet = ("optimizer = torch.optim.AdamW(model.parameters(), lr=lr, fused=True)\n"
                   "# or foreach=True; and for the model itself:\n" + snippet)  # fmt: skip
    elif in_zero >= 0.3:
        rec = ("Many of these kernels zero gradients one parameter at a time: "
               "`optimizer.zero_grad(set_to_none=True)` drops them (see zero-grad-not-none). "
               + rec)  # fmt: skip
        snippet = "optimizer.zero_grad(set_to_none=True)\n" + snippet
    return [Draft(
        id=ID, title=TITLE,
        est_savings_ms=gap_ms,
        confidence="medium" if in_opt < 0.5 else "high",
        summary=(f"{per_step:.0f} tiny kernels per step (median {_us(med_k)}; their launch calls "
                 f"take {_us(med_launch)}) leave the GPU idle {fmt_ms(gap_ms)} per step "
                 f"({share:.1f}% of the step) waiting for the next launch."),
        recommendation=rec,
        snippet=snippet,
        evidence=tuple(evidence),
        locations=aggregate(locs),
        assumptions=(
            f"Tiny = shorter than {max_k:g} us or than its own launch call; only gaps of at "
            f"most {ctx.t('tiny_kernels.max_gap_us'):g} us whose launch was still in progress "
            "when the GPU ran dry are counted.",
            f"Saving = those gaps summed and divided by the {steps} step(s): CUDA graphs remove "
            "them; fusion removes most. The kernels' own run time is not claimed.",
            "These gaps are part of gpu-idle's 'host launch' share; gpu-idle does not claim them.",
        ),
    )]  # fmt: skip
