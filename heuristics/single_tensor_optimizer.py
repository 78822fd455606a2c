"""Optimizer step running one small op per parameter where foreach/fused kernels exist.

**What it detects.** ``Optimizer.step#<Class>.step`` ranges that issue many per-parameter
elementwise ops (``aten::add_``, ``mul_``, ``addcdiv_``, ``lerp_``, ``sqrt`` ...) and no
multi-tensor op (``aten::_foreach_*``, ``aten::_fused_*``, ``multi_tensor_apply`` or Triton
kernels). On GPU traces only ops that launched a kernel count (FusedAdam's per-parameter step
counters on the CPU do not). run.json ``optimizers`` ({class, foreach, fused}) names the
setting when ``advisor profile`` recorded it.

**Why it costs time.** A single-tensor optimizer launches several kernels per parameter: a
ResNet-50 SGD step with momentum is ~480 launches. Each costs host time (~5-20 us) while the
GPU runs a few microseconds of work, so the GPU idles through most of the step. The foreach
implementation batches every parameter into a few multi-tensor kernels and the fused one into
one; PyTorch uses foreach by default on CUDA, so this pattern means ``foreach=False``, an old
PyTorch, parameters on the CPU or a custom optimizer.

**How the saving is estimated.** The steady steps are replayed (see docs/savings.md) with the
host time inside the optimizer's ranges cut to a tenth (``single_tensor_optimizer.residual_pct``,
left for the foreach/fused launches); the update kernels keep their GPU time. The saving is
what the step loses in the replay: the whole host time saved when the host limits the step
(the GPU drains its queue meanwhile), less when backward's kernels are still running. On
traces the replay cannot place, the GPU idle time inside the ranges, capped at 90% of them,
is used instead. On CPU-only traces
the per-parameter ops are reported as information only when run.json shows ``foreach=False`` set
explicitly (PyTorch's default is the per-parameter loop on a CPU but foreach on CUDA; ``fused=True``
runs a fused CPU kernel for Adam, AdamW, SGD and Adagrad).

**Manual update loops.** A loop over the parameters after backward, with no optimizer
(``for p in model.parameters(): p.data.add_(p.grad, alpha=-lr)``), is the same per-parameter
pattern without an ``Optimizer.step`` range: after the step's last backward op, a run of at least
``single_tensor_optimizer.min_loop_ops`` consecutive top-level in-place updates, each reading a
tensor of its own shape, on two or more shapes (see ``_manual_opt``). No default rescues it on a
GPU, so it is reported on CPU runs too (as information: no saving claimed without GPU work); on
GPU traces the loop's host time is cut to a tenth in the replay, as for an optimizer range.

**How to fix.** ``foreach=True``, or ``fused=True`` for Adam, AdamW, SGD and Adagrad on CUDA; a
manual loop becomes one ``torch._foreach_add_(params, grads, alpha=-lr)`` (or an optimizer).

**Known false positives.** Optimizers with no multi-tensor implementation (LBFGS, SparseAdam,
most third-party ones): the fix is then a different optimizer or ``torch.compile`` of the step.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np
import pandas as pd

from advisor.derive.locate import aggregate
from advisor.detect.draft import Draft
from advisor.detect.registry import Context, Skip, detector
from advisor.detect.thresholds import register
from advisor.findings import Evidence, Location
from advisor.replay.fixes import ShrinkHost
from advisor.trace.model import Trace

from ._manual_opt import manual_loops
from ._ops import ranges
from ._opt_ranges import STEP_RE, optimizer_ranges, per_parameter, run_optimizers
from ._per_step import ms, n_steps

ID = "single-tensor-optimizer"
TITLE = "Optimizer step without foreach/fused kernels"

register(
    "single_tensor_optimizer.min_loop_ops",
    8.0,
    "per-parameter updates a manual loop (no optimizer) must run in a step to be reported",
)
register(
    "single_tensor_optimizer.residual_pct",
    10.0,
    "% of the optimizer step's range assumed left after switching to foreach/fused",
)

FUSED_OK = {"Adam", "AdamW", "SGD", "Adagrad"}


def _snippet(cls: str) -> str:
    arg = "fused=True" if cls in FUSED_OK else "foreach=True"
    name = cls if cls.isidentifier() else "SGD"
    return (
        f"optimizer = torch.optim.{name}(model.parameters(), lr=lr, {arg})\n"
        f"# fused (Adam, AdamW, SGD, Adagrad) = one kernel for all parameters;\n"
        f"# foreach = a few multi-tensor kernels (the default on CUDA since PyTorch 2.0)\n"
    )


def _window_stacks(trace: Trace, flagged: pd.DataFrame) -> list[tuple[int, int, object]]:
    """(tid, ts, legacy call stack) of each flagged range, to find the user's step() line."""
    ops = trace.cpu_ops
    out = []
    for w in flagged.itertuples(index=False):
        m = np.flatnonzero((ops["ts_ns"].to_numpy() == w.ts_ns) & (ops["tid"].to_numpy() == w.tid))
        stack = ops["call_stack"].iat[int(m[0])] if len(m) else None
        out.append((int(w.tid), int(w.ts_ns), stack))
    return out


class _Facts(NamedTuple):
    """The optimizer ranges with per-parameter ops and no multi-tensor op, and their class."""

    flagged: pd.DataFrame  # per_parameter's rows
    cls: str  # the most common optimizer class among them
    per_step_ops: float  # per-parameter ops per range
    opt_ms: float  # mean range
    setting: str  # run.json's foreach/fused for the class, in words ("" when not recorded)


@detector(ID, TITLE, needs=("cpu_ops",))
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    stats = optimizer_ranges(trace)
    loops = manual_loops(trace, ranges(trace, STEP_RE))
    loops = loops[
        (loops["ops"] >= ctx.t("single_tensor_optimizer.min_loop_ops")) & (loops["shapes"] >= 2)
    ]
    if not len(stats) and not len(loops):
        raise Skip("no Optimizer.step ranges and no manual update loop in this trace")
    if not len(stats):
        return _manual(trace, ctx, loops)
    f = _measure(trace, ctx, stats)
    if f is None:
        return []
    info = Draft(
        id=ID,
        title=TITLE,
        est_savings_ms=0.0,
        confidence="medium",
        latent=True,
        summary=f"{f.cls}.step runs about {f.per_step_ops:.0f} per-parameter ops per optimizer "
        f"step ({f.opt_ms:.3f} ms of host time){f.setting}; on a GPU each is a kernel "
        f"launch. No GPU activity in this trace: no saving claimed.",
        recommendation=(
            f"Create the optimizer with {'fused=True' if f.cls in FUSED_OK else 'foreach=True'}: "
            f"all parameters are updated by one (fused) or a few (foreach) multi-tensor kernels "
            f"instead of several kernels per parameter."
        ),
        snippet=_snippet(f.cls),
        evidence=_evidence(trace, f.flagged, f.cls),
        locations=_locations(trace, ctx, f),
        assumptions=(
            "No GPU activity: foreach gives little on a CPU and fused=True (Adam, "
            "AdamW, SGD, Adagrad) runs a fused CPU kernel; not estimated.",
        ),
    )
    return [info] if not trace.has_gpu else [_on_gpu(trace, ctx, f, info)]


def _measure(trace: Trace, ctx: Context, stats: pd.DataFrame) -> _Facts | None:
    run_opts = run_optimizers(ctx)
    flagged = per_parameter(stats, trace, ctx)
    if not len(flagged):
        return None
    cls = str(flagged["cls"].mode().iloc[0])
    setting = ""
    if cls in run_opts:
        o = run_opts[cls]
        setting = f" (run.json: foreach={o.foreach}, fused={o.fused})"
    per_step_ops = float(flagged["per_param"].mean())
    return _Facts(flagged, cls, per_step_ops, float(flagged["dur_ns"].mean()) / 1e6, setting)


def _evidence(trace: Trace, flagged: pd.DataFrame, cls: str) -> tuple[Evidence, ...]:
    evidence = [
        Evidence(
            f"Optimizer.step#{cls}.step ranges with per-parameter ops and no foreach/fused op",
            len(flagged),
            ms(flagged["dur_ns"].sum()),
            trace.to_trace_us(int(flagged["ts_ns"].min())),
        )
    ]
    if trace.has_gpu:
        evidence.append(
            Evidence("GPU idle inside those ranges", len(flagged), ms(flagged["idle_ns"].sum()))
        )
        evidence.append(
            Evidence("kernels launched by those ranges", int(flagged["kernels"].sum()), 0.0)
        )
    return tuple(evidence)


def _locations(trace: Trace, ctx: Context, f: _Facts) -> tuple[Location, ...]:
    """The user's step() lines, after the line that created the optimizer (run.json)."""
    stacks = _window_stacks(trace, f.flagged)
    locs = aggregate(ctx.locator.near(int(t), int(ts), st) for t, ts, st in stacks)
    made = run_optimizers(ctx).get(f.cls)
    if made is not None and isinstance(made.file, str) and isinstance(made.line, int):
        locs = (Location(made.file, made.line, "optimizer created here"), *locs)[:5]
    return locs


def _on_gpu(trace: Trace, ctx: Context, f: _Facts, info: Draft) -> Draft:
    """The finding with the optimizer's host time cut to its residual, replayed; without a
    replayable step the GPU idle time inside the ranges, capped."""
    flagged, nst = f.flagged, n_steps(trace)
    keep = 1.0 - ctx.t("single_tensor_optimizer.residual_pct") / 100.0
    f_ts = flagged["ts_ns"].to_numpy()
    rep = ctx.whatif(
        ShrinkHost(
            f_ts,
            f_ts + flagged["dur_ns"].to_numpy(),
            flagged["tid"].to_numpy(),
            keep=1.0 - keep,
            label="foreach/fused optimizer",
        )
    )
    saving_ns = np.minimum(flagged["idle_ns"].to_numpy(), keep * flagged["dur_ns"].to_numpy())
    saving_ms = float(saving_ns.sum()) / 1e6 / nst
    per_opt_ms = float(saving_ns.mean()) / 1e6
    also = "" if len(flagged) == nst else f", {saving_ms:.3f} ms per profiled step"
    tail = (
        f"about {per_opt_ms:.3f} ms to save per optimizer step{also}"
        if not rep.replayed
        else f"replayed with {keep:.0%} of that host time gone, the step is {rep.ms:.3f} ms shorter"
    )
    fields = rep.draft_fields() if rep.replayed else {"est_savings_ms": round(saving_ms, 3)}
    min_ops = ctx.t("single_tensor_optimizer.min_ops_per_step")
    return dataclasses.replace(
        info,
        **fields,
        latent=False,
        confidence="high" if f.per_step_ops >= 3 * min_ops else "medium",
        summary=f"{f.cls}.step launches about {f.per_step_ops:.0f} per-parameter ops with no "
        f"foreach/fused kernel{f.setting}; the GPU idles {ms(flagged['idle_ns'].mean())} ms "
        f"of the {f.opt_ms:.3f} ms optimizer range: {tail}.",
        assumptions=(
            (
                rep.assumption
                if rep.replayed
                else "Saving per optimizer range = GPU idle time inside it (start to the end of "
                f"its last kernel), at most {keep:.0%} of the range; summed and divided by the "
                f"{nst} step(s)."
            ),
            f"{keep:.0%} of the host time inside the optimizer ranges goes away "
            "(single_tensor_optimizer.residual_pct is left for the multi-tensor launches).",
            "GPU time of the update kernels themselves is assumed unchanged (fused kernels are "
            "usually faster too).",
        ),
    )


MANUAL_SNIPPET = (
    "with torch.no_grad():\n"
    "    params = [p for p in model.parameters() if p.grad is not None]\n"
    "    torch._foreach_add_(params, [p.grad for p in params], alpha=-lr)\n"
    "# or: optimizer = torch.optim.SGD(model.parameters(), lr=lr, foreach=True)\n"
)


def _manual(trace: Trace, ctx: Context, loops: pd.DataFrame) -> list[Draft]:
    """A manual per-parameter update loop (no optimizer): one finding."""
    per = float(loops["ops"].mean())
    span = loops["end_ns"].to_numpy() - loops["ts_ns"].to_numpy()
    ops = trace.cpu_ops
    first = loops["first_op"].to_numpy()
    locs = aggregate(
        ctx.locator.near(int(ops["tid"].iat[i]), int(ops["ts_ns"].iat[i]), ops["call_stack"].iat[i])
        for i in first
    )
    name = str(ops["name"].iat[int(first[0])])
    evidence = (
        Evidence(
            f"runs of per-parameter {name} (and like updates) after backward, no optimizer",
            int(loops["ops"].sum()),
            ms(span.sum()),
            trace.to_trace_us(int(loops["ts_ns"].min())),
        ),
    )
    what = (
        f"A Python loop updates the parameters one at a time after backward: about {per:.0f} "
        f"in-place updates ({name}) per step, {ms(span.mean())} ms of host time, with no "
        f"optimizer to set foreach on"
    )
    rec = (
        "Update all parameters with one multi-tensor call, torch._foreach_add_(params, grads, "
        "alpha=-lr), or use torch.optim.SGD(..., foreach=True): a few kernels instead of one "
        "per parameter."
    )
    info = Draft(
        id=ID,
        title=TITLE,
        est_savings_ms=0.0,
        confidence="medium",
        latent=True,
        summary=f"{what}; on a GPU each is a kernel launch. No GPU activity in this trace: "
        "no saving claimed.",
        recommendation=rec,
        snippet=MANUAL_SNIPPET,
        evidence=evidence,
        locations=locs,
        assumptions=("No GPU activity: a foreach update gives little on a CPU; not estimated.",),
    )
    return [info] if not trace.has_gpu else _manual_on_gpu(ctx, loops, info, what)


def _manual_on_gpu(ctx: Context, loops: pd.DataFrame, info: Draft, what: str) -> list[Draft]:
    """The manual loop's finding with its host time cut to the residual, replayed; nothing
    without a replayable step."""
    keep = ctx.t("single_tensor_optimizer.residual_pct") / 100.0
    span = loops["end_ns"].to_numpy() - loops["ts_ns"].to_numpy()
    ts = loops["ts_ns"].to_numpy()
    rep = ctx.whatif(
        ShrinkHost(ts, ts + span, loops["tid"].to_numpy(), keep=keep, label="foreach update")
    )
    if not rep.replayed:
        return []  # no claim the replay cannot support
    return [
        dataclasses.replace(
            info,
            **rep.draft_fields(),
            latent=False,
            summary=f"{what}; replayed with {1 - keep:.0%} of that host time gone, the step is "
            f"{rep.ms:.3f} ms shorter.",
            assumptions=(rep.assumption, f"{1 - keep:.0%} of the loop's host time goes away."),
        )
    ]
