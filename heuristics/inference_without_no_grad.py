"""Inference run with autograd recording: forward passes with no backward, grad mode on.

**What it detects.** Steps whose forward ops build an autograd graph that no backward ever
uses: the ops record autograd sequence numbers (the profiler writes ``Sequence number`` for an
op run with grad mode on, and the number advances each time an autograd node is created) while
no backward work (``autograd::engine::evaluate_function``, ``*Backward`` nodes,
``AccumulateGrad``) appears in that step. ``advisor profile`` also records modules that ran
``forward`` in eval mode with grad enabled (run.json ``forward.eval_with_grad``).

**Why it costs time.** With grad enabled every op on tensors that require grad (a model's
parameters do) creates an autograd node, saves its inputs for a backward that never comes and
bumps version counters: host time on every op, and activations stay alive until the output is
freed, so memory grows with the batch. ``torch.inference_mode()`` (or ``torch.no_grad()``)
skips all of it.

**How the saving is estimated.** Autograd nodes built per step (the distinct sequence numbers
the step's forward ops record, minus one) times ``inference_without_no_grad.host_us_per_node``
(1 us: measured on a 2-vCPU machine, torch 2.13, a 50-layer MLP, grad on vs inference_mode:
0.7-1.2 us per node) is the host time autograd recording adds; as a share of the host time of
those forward ops, it is the fix: on GPU traces the steady steps' dependency graph is replayed
with the forward ops' host time shrunk by that share (range: 0.7x-1.2x the per-node cost) and
the saving is the measured step minus the replayed step, so it is ~0 when the GPU limits the
step. No GPU kernel is removed (autograd recording launches none). On CPU-only traces, or when
nothing can be replayed, the per-node host time is the saving. Memory is not counted in the
saving; with ``[memory]`` events (``profile_memory``) the summary gives how far allocated memory
rises above each such step's start (the activations kept for the unused graph).

From the trace alone, steps building fewer than ``inference_without_no_grad.min_nodes_per_step``
nodes are not reported; with run.json's live fact (a top-level module called in eval mode with
grad enabled) they are, as information when they build that few.

**How to fix.** Wrap evaluation in ``with torch.inference_mode():`` (``torch.no_grad()`` if the
outputs later meet autograd, e.g. are used in a training step).

A model also left in train mode (dropout dropping, BatchNorm on batch statistics) is
``inference-in-train-mode``'s finding.

**Known false positives.** Forward passes whose graph is used by a backward outside the
profiled window (an RL rollout whose loss is back-propagated at the episode's end). When the
trace also holds training steps, the finding is low confidence for that reason. Modules that
run in eval mode on purpose during training (fine-tuning with frozen BatchNorm statistics) show
in run.json without being a problem: that case is reported as information only.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from advisor.derive.locate import aggregate
from advisor.detect.draft import Draft
from advisor.detect.registry import Context, Skip, detector
from advisor.detect.thresholds import register
from advisor.findings import Confidence, Evidence, Location
from advisor.replay.fixes import ShrinkHost
from advisor.runinfo import EvalWithGrad
from advisor.trace.model import Trace

from ._ops import in_backward, op_names
from ._per_step import n_steps

ID = "inference-without-no-grad"
TITLE = "Inference with autograd recording"

register(
    "inference_without_no_grad.min_nodes_per_step",
    20.0,
    "autograd nodes a step without backward must build to be reported",
)
register(
    "inference_without_no_grad.host_us_per_node",
    1.0,
    "host time (us) autograd spends per node it builds (the saving per node)",
)

SNIPPET = """model.eval()
with torch.inference_mode():      # or torch.no_grad() if outputs meet autograd later
    out = model(batch)
"""
RECOMMENDATION = (
    "Run evaluation and inference under `torch.inference_mode()` (or `torch.no_grad()`): no "
    "autograd graph is built, no activations are kept for a backward, and each op is cheaper."
)


def _run_modules(ctx: Context) -> list[EvalWithGrad]:
    return list(ctx.live.forward.eval_with_grad)


def _module(m: EvalWithGrad) -> str:
    return "?" if m.module is None else m.module


def _run_locations(mods: list[EvalWithGrad]) -> list[Location]:
    out = []
    for m in mods:
        file, line, count = m.file, m.line, m.count
        if isinstance(file, str) and isinstance(line, int):
            func = str(m.function or m.module or "forward")
            n = int(count) if isinstance(count, int) and count > 0 else 1
            out.append(Location(file, line, func, n))
    return out


def _inference_steps(trace: Trace, ctx: Context, min_nodes: float) -> tuple[pd.DataFrame, bool]:
    """Per step without backward building at least ``min_nodes`` autograd nodes: nodes built,
    forward ops with a sequence number, first op."""
    ops = trace.cpu_ops
    cols = ["step", "nodes", "ops", "first_row"]
    if not len(ops):
        return pd.DataFrame(columns=cols), False
    bw = in_backward(trace)
    step = ops["step"].to_numpy()
    seq = ops["seq"].to_numpy()
    train_steps = set(step[bw & (step >= 0)].tolist())
    fwd = ~bw & (seq >= 0) & (step >= 0)
    f = pd.DataFrame({"step": step[fwd], "seq": seq[fwd], "row": np.flatnonzero(fwd)})
    f = f[~f["step"].isin(train_steps)]
    if train_steps and len(trace.steps) > 1:
        # in a training trace the last step may be cut short before its backward
        f = f[f["step"] != int(trace.steps["step"].iloc[-1])]
    if not len(f):
        return pd.DataFrame(columns=cols), bool(bw.any())
    g = f.groupby("step", sort=True)
    out = pd.DataFrame(
        {"nodes": g["seq"].nunique() - 1, "ops": g.size(), "first_row": g["row"].min()}
    ).reset_index()
    out = out[out["nodes"] >= max(min_nodes, 1)]
    return out.reset_index(drop=True), bool(bw.any())


def _trace_locations(trace: Trace, ctx: Context, rows: np.ndarray) -> list[Location | None]:
    ops = trace.cpu_ops
    parent = ops["parent_idx"].to_numpy()
    top = rows[parent[rows] < 0] if len(rows) else rows
    return [ctx.locator.for_op(int(r)) for r in (top if len(top) else rows)[:400]]


def _from_run_only(mods: list[EvalWithGrad], training: bool) -> list[Draft]:
    names = sorted({_module(m) for m in mods})
    shown = ", ".join(names[:4]) + (" ..." if len(names) > 4 else "")
    if training:
        summary = (
            f"{len(names)} module(s) ran forward in eval mode with grad enabled during "
            f"training steps ({shown}); if they are not being trained (a teacher, EMA or "
            f"reference model), their autograd graph and saved activations are waste."
        )
        conf: Confidence = "low"
    else:
        summary = (
            f"{len(names)} module(s) ran forward in eval mode with grad enabled ({shown}); "
            f"the trace cannot show the cost (no operator events for those passes)."
        )
        conf = "medium"
    return [
        Draft(
            id=ID,
            title=TITLE,
            est_savings_ms=0.0,
            confidence=conf,
            summary=summary,
            recommendation=RECOMMENDATION,
            snippet=SNIPPET,
            latent=True,
            evidence=tuple(
                Evidence(f"run.json: {n} forward in eval mode, grad enabled", 1, 0.0)
                for n in names[:5]
            ),
            locations=tuple(_run_locations(mods)[:5]),
            assumptions=("From run.json only: no saving is claimed without trace evidence.",),
        )
    ]


def _replay(trace: Trace, ctx: Context, rows: np.ndarray, autograd_ns: float) -> tuple[Any, float]:
    """The replayed saving of removing autograd's share of the forward ops' host time, and that
    share; (None, 0) when there is nothing to replay."""
    ops = trace.cpu_ops
    parent = ops["parent_idx"].to_numpy()
    outer = rows[~np.isin(parent[rows], rows)] if len(rows) else rows
    if not len(outer):
        return None, 0.0
    ts, end = ops["ts_ns"].to_numpy()[outer], ops["end_ns"].to_numpy()[outer]
    host_ns = float((end - ts).sum())
    if host_ns <= 0:
        return None, 0.0
    share = min(autograd_ns / host_ns, 1.0)
    keep = [max(0.0, 1.0 - share * f) for f in (1.0, 0.7, 1.2)]
    rep = ctx.whatif(
        ShrinkHost(
            ts,
            end,
            ops["tid"].to_numpy()[outer],
            keep=keep[0],
            low=keep[1],
            high=keep[2],
            label="torch.inference_mode()",
        )
    )
    return (rep if rep.replayed else None), share


class _Facts(NamedTuple):
    """run.json's modules called in eval mode with grad on, and the steps without backward
    that build autograd nodes: their forward ops (``rows``) and the nodes built."""

    mods: list[EvalWithGrad]
    steps: pd.DataFrame  # step, nodes, ops, first_row (see _inference_steps)
    training: bool  # the trace also holds steps with backward
    min_nodes: float
    us: float  # host time per node
    nodes: int
    rows: np.ndarray


@detector(ID, TITLE)
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    f = _measure(trace, ctx)
    if not len(f.steps):
        return _from_run_only(f.mods, f.training) if f.mods else []
    fields, per_step_ms, how = _value(trace, ctx, f)
    held = _held_bytes(trace, f.steps["step"].to_numpy())
    conf: Confidence = "low" if f.training else ("high" if f.mods else "medium")
    return [
        Draft(
            id=ID,
            title=TITLE,
            **fields,
            confidence=conf,
            summary=_summary(trace, f, per_step_ms, how, held),
            recommendation=RECOMMENDATION,
            snippet=SNIPPET,
            evidence=_evidence(trace, f),
            locations=_locations(trace, ctx, f),
            assumptions=_assumptions(f, how, held),
            latent=_small(f),
            extra={
                **({"held_bytes": int(held)} if held is not None else {}),
            },
        )
    ]


def _measure(trace: Trace, ctx: Context) -> _Facts:
    mods = _run_modules(ctx)
    if not len(trace.cpu_ops) and not mods:
        raise Skip("no CPU operator events in this trace and no run.json forward facts")
    # run.json's live fact (a module called in eval mode with grad on) is reported at any size;
    # from the trace alone, only steps building min_nodes_per_step nodes or more
    min_nodes = ctx.t("inference_without_no_grad.min_nodes_per_step")
    steps, training = _inference_steps(trace, ctx, 1 if mods else min_nodes)
    us = ctx.t("inference_without_no_grad.host_us_per_node")
    if not len(steps):
        return _Facts(mods, steps, training, min_nodes, us, 0, np.zeros(0, np.int64))
    ops = trace.cpu_ops
    seqv = ops["seq"].to_numpy()
    bw = in_backward(trace)
    stepv = ops["step"].to_numpy()
    rows = np.flatnonzero(~bw & (seqv >= 0) & np.isin(stepv, steps["step"].to_numpy()))
    return _Facts(mods, steps, training, min_nodes, us, int(steps["nodes"].sum()), rows)


def _small(f: _Facts) -> bool:
    """Fewer nodes per step than reported from the trace alone (run.json's fact reports it)."""
    return float(f.steps["nodes"].mean()) < f.min_nodes


def _value(trace: Trace, ctx: Context, f: _Facts) -> tuple[dict[str, Any], float, str]:
    """The saving fields, the saving per step and how it was found: autograd's share of the
    forward ops' host time removed, replayed on GPU traces; else the nodes' host cost."""
    us = f.us
    per_step_ms = f.nodes * us / 1e3 / n_steps(trace)
    fields: dict[str, Any] = {"est_savings_ms": round(per_step_ms, 3)}
    how = (
        f"Host cost {us:g} us per node (inference_without_no_grad.host_us_per_node), "
        f"divided by the {n_steps(trace)} step(s) in the trace."
    )
    if trace.has_gpu:
        rep, share = _replay(trace, ctx, f.rows, f.nodes * us * 1e3)
        if rep is not None:
            return (
                rep.draft_fields(),
                rep.ms,
                f"Autograd recording is {share:.0%} of the host time of these forward ops "
                f"({us:g} us per node; range 0.7x-1.2x); their host time shrinks by that "
                "share. " + rep.assumption,
            )
    return fields, per_step_ms, how


def _locations(trace: Trace, ctx: Context, f: _Facts) -> tuple[Location, ...]:
    locs = list(aggregate(_trace_locations(trace, ctx, f.rows)))
    return tuple((_run_locations(f.mods) + locs)[:5])


def _evidence(trace: Trace, f: _Facts) -> tuple[Evidence, ...]:
    ops = trace.cpu_ops
    first = int(f.steps["first_row"].min())
    names = op_names(trace)
    top_ops = pd.Series(names[f.rows]).value_counts().head(3)
    evidence = [
        Evidence(
            f"autograd nodes built in {len(f.steps)} step(s) with no backward",
            f.nodes,
            round(f.nodes * f.us / 1e3, 3),
            trace.to_trace_us(int(ops["ts_ns"].iloc[first])),
        )
    ]
    evidence += [Evidence(f"{n} run with grad mode on", int(c), 0.0) for n, c in top_ops.items()]
    evidence += [
        Evidence(f"run.json: {_module(m)} forward in eval mode, grad enabled", 1, 0.0)
        for m in f.mods[:2]
    ]
    return tuple(evidence[:5])


def _summary(trace: Trace, f: _Facts, per_step_ms: float, how: str, held: float | None) -> str:
    nsteps = len(f.steps)
    per_node = round(f.nodes / nsteps)
    summary = (
        f"{nsteps} step(s) run forward with autograd recording and no backward: about "
        f"{per_node} autograd nodes built per step: about {per_step_ms:.3f} ms per step "
        f"of host time to save, and activations kept alive for a backward that never "
        f"runs."
    )
    if trace.has_gpu and "Replayed:" in how and per_step_ms <= 0:
        summary += " Replayed without it, the steps are no shorter: the GPU limits them."
    if held is not None:
        summary += (
            f" While they run, allocated memory rises up to {held / 2**20:.1f} MB above each "
            "step's start: activations saved for the unused graph, freed only with the output."
        )
    if _small(f):
        summary += (
            f" Few nodes per step (under inference_without_no_grad.min_nodes_per_step = "
            f"{f.min_nodes:g}): reported from run.json as information."
        )
    return summary


def _assumptions(f: _Facts, how: str, held: float | None) -> tuple[str, ...]:
    assumptions = [
        "Nodes per step = distinct autograd sequence numbers of the step's forward ops minus one.",
        how,
        "Memory held for the unused graph: the peak of [memory] events' allocated total over "
        "each such step's start (its median over the steps; includes the outputs and any "
        "temporaries alive at the peak); not counted in the saving."
        if held is not None
        else "Memory held for the unused graph (saved activations) is not in this trace "
        "(profile_memory) and is not counted.",
    ]
    if f.training:
        assumptions.append(
            "The trace also holds steps with backward: these forward passes "
            "may feed a backward outside the profiled window."
        )
    return tuple(assumptions)


def _held_bytes(trace: Trace, steps: np.ndarray) -> float | None:
    """Median over ``steps`` of the peak allocated memory (``[memory]`` events) above the
    allocated total at the step's start; None without memory events in those steps."""
    mem = trace.memory
    if not len(mem) or mem["total_allocated"].isna().all():
        return None
    rows = []
    for st in trace.steps[trace.steps["step"].isin(steps)].itertuples():
        g = mem[(mem["ts_ns"] >= st.ts_ns) & (mem["ts_ns"] < st.end_ns)]
        for _, d in g.groupby(["device_type", "device_id"], sort=False):
            alloc = d["total_allocated"].to_numpy(dtype=float)
            if len(alloc) and np.isfinite(alloc).any():
                first = d["bytes"].to_numpy(dtype=float)[0]
                base = alloc[0] - first  # before the step's first event
                rows.append(max(0.0, float(np.nanmax(alloc)) - base))
    return float(np.median(rows)) if rows else None
