"""Optimizer steps whose host time exceeds the GPU work they launch.

**What it detects.** ``Optimizer.step#<Class>.step`` ranges inside the steady steps whose host
time per step is larger than the GPU time of the kernels and copies they launch, and at least
``optimizer_host_time.min_pct`` of the step: the optimizer is bound by Python and the
dispatcher, not by the update math. Typical sources are optimizers with many small blocks or
parameter groups (Shampoo/distributed Shampoo, per-group Python loops), EMA or
gradient-clipping wrappers that walk every parameter in Python, and host-side bookkeeping
(``.item()`` on a norm, state dictionaries rebuilt each step).

An optimizer that runs one small op per parameter without ``foreach``/``fused`` is reported by
``single-tensor-optimizer`` instead (its fix, ``foreach=True``/``fused=True``, comes first, and
its finding carries the same host time): those ranges are not repeated here, so one optimizer
range is never reported twice.

**Why it costs time.** While the host is inside ``step()`` it launches nothing else; when the
step's own kernels take less time than the host needs to issue them, the GPU drains and waits
for the next forward to be launched.

**How the saving is estimated.** From the operators inside the ranges
(``heuristics/_opt_cost.py``): a foreach/fused step runs the update as one operator call per
range, so it removes the host time of the operators recorded there (the update ops and the
per-tensor dispatch they do) except one call, whose cost is measured on this host (the median
of the innermost operators there); the Python around them (group loops, state lookups) stays.
The steady steps are replayed (see docs/savings.md) with that share of the ranges' host time
gone; the range goes from half of it to all but one operator call (``torch.compile`` of the
step removes the Python too). The update kernels keep their GPU time. The saving is what the
step loses in the replay: nothing where the GPU limits the step. Where the replay cannot place
the steps: the GPU idle time inside the ranges, at most the host time removed. Ranges without
operators fall back to ``optimizer_host_time.fraction`` of their host time, said so in the
assumptions.

**How to fix.** ``foreach=True`` or ``fused=True`` where the optimizer has them; fewer
parameter groups (one group per distinct hyper-parameter set, not per layer); merge small
parameters into larger blocks (Shampoo's ``max_preconditioner_dim``/block size, precondition
less often via ``precondition_frequency``); with gradient accumulation, step once every k
micro-batches; compile the step (``torch.compile(optimizer.step)``) or capture it in a CUDA
graph (``capturable=True``).

**Known false positives.** A step that also synchronizes (``.item()`` on a gradient norm,
``clip_grad_norm_`` with ``error_if_nonfinite``) shows that wait as host time: see
``sync-point`` for it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from advisor.derive.locate import aggregate
from advisor.detect.draft import Draft
from advisor.detect.registry import Context, Skip, detector
from advisor.detect.thresholds import register
from advisor.findings import Evidence, Location
from advisor.replay.fixes import ShrinkHost
from advisor.replay.whatif import Saving
from advisor.runinfo import Optimizer
from advisor.trace.model import Trace

from ._host_cost import slow_host
from ._opt_cost import fused_cost
from ._opt_ranges import optimizer_ranges, per_parameter
from ._per_step import fmt_ms, ms, n_steps

ID = "optimizer-host-time"
TITLE = "Optimizer step bound by host time"

register(
    "optimizer_host_time.min_pct",
    5.0,
    "report when optimizer steps hold the host this % of the median step",
)
register(
    "optimizer_host_time.fraction",
    0.5,
    "share of an optimizer range's host time a cheaper step removes, where the trace records "
    "no operator inside it to measure that from",
)


def _gpu_ns(trace: Trace, stats: pd.DataFrame) -> np.ndarray:
    """Per range: GPU time of the kernels, copies and memsets launched from inside it."""
    rt = trace.runtime
    out = np.zeros(len(stats), dtype=np.int64)
    if not len(rt):
        return out
    ts, end, tid = (rt[c].to_numpy() for c in ("ts_ns", "end_ns", "tid"))
    dur = np.zeros(len(rt), dtype=np.int64)  # GPU time each runtime call launched
    for df in (trace.kernels, trace.memcpy):
        if len(df):
            li = df["launch_idx"].to_numpy()
            ok = li >= 0
            np.add.at(dur, li[ok], df["dur_ns"].to_numpy()[ok])
    for i, w in enumerate(stats.itertuples(index=False)):  # a handful of ranges per trace
        m = (tid == w.tid) & (ts >= w.ts_ns) & (end <= w.ts_ns + w.dur_ns)
        out[i] = int(dur[m].sum())
    return out


def _run_opt(ctx: Context, cls: str) -> Optimizer | None:
    return next((o for o in ctx.live.optimizers if o.cls == cls), None)


@dataclass(frozen=True)
class _Ranges:
    """The optimizer ranges this finding counts, with their figures per step."""

    rest: pd.DataFrame  # optimizer_ranges' rows not per-parameter, with their GPU time (gpu_ns)
    steps: int
    host_ms: float
    gpu_ms: float
    share: float  # host_ms as a % of the median step


@dataclass(frozen=True)
class _Cut:
    """What a cheaper step removes: its share of the ranges' host time and the saving."""

    cost: pd.DataFrame  # fused_cost's per range
    by_rule: bool  # no operator recorded in the ranges: optimizer_host_time.fraction
    frac: float
    cut: float  # share of the host time removed (the estimate)
    cut_hi: float  # ...at the top of the range
    saving_ms: float  # without a replay: the GPU idle the cut may fill, per step
    rep: Saving


@detector(ID, TITLE, gpu_only=True, needs=("cpu_ops",))
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    found = _measure(trace, ctx)
    if found is None:
        return []
    cut = _value(trace, ctx, found)
    rep = cut.rep
    fields = rep.draft_fields() if rep.replayed else {"est_savings_ms": round(cut.saving_ms, 3)}
    by_cls = _by_class(found.rest)
    top = str(by_cls.index[0])
    opt = _run_opt(ctx, top)
    groups = opt.param_groups if opt is not None else None
    return [
        Draft(
            id=ID,
            title=TITLE,
            **fields,
            confidence="medium" if found.host_ms > 2 * found.gpu_ms else "low",
            summary=_summary(found, cut, by_cls, opt),
            snippet=_snippet(top),
            recommendation=(
                ("Every operator is slow on this host (see host-overhead): fix that first. ")
                if slow_host(trace, ctx)
                else ""
            )
            + _advice(top, groups),
            evidence=_evidence(trace, found, by_cls),
            locations=_locations(trace, ctx, found.rest, opt),
            assumptions=_assumptions(found, cut),
        )
    ]


def _measure(trace: Trace, ctx: Context) -> _Ranges | None:
    """The ranges not per-parameter, when their host time reaches
    ``optimizer_host_time.min_pct`` of the step and exceeds their GPU work (else None)."""
    stats = optimizer_ranges(trace)
    if not len(stats):
        raise Skip("no Optimizer.step ranges in this trace")
    stats = stats[stats["step"] >= 0]
    covered = per_parameter(stats, trace, ctx)  # single-tensor-optimizer's ranges
    rest = stats.drop(index=covered.index).reset_index(drop=True)
    if not len(rest):
        return None
    rest = rest.assign(gpu_ns=_gpu_ns(trace, rest))
    steps = n_steps(trace)
    host_ms = float(rest["dur_ns"].sum()) / 1e6 / steps
    gpu_ms = float(rest["gpu_ns"].sum()) / 1e6 / steps
    share = 100.0 * host_ms / ctx.step_ms_median if ctx.step_ms_median > 0 else 0.0
    if share < ctx.t("optimizer_host_time.min_pct") or host_ms <= gpu_ms:
        return None
    return _Ranges(rest, steps, host_ms, gpu_ms, share)


def _value(trace: Trace, ctx: Context, found: _Ranges) -> _Cut:
    """The share of host time a fused step removes (the operators inside the ranges but one
    call; the rule where none is recorded), replayed; the GPU idle it may fill without."""
    rest = found.rest
    cost = fused_cost(trace, rest)
    range_ns = rest["dur_ns"].to_numpy().astype(float)
    gone = (cost["op_ns"] - cost["kept_ns"]).to_numpy().astype(float)
    by_rule = not gone.any()  # no operators recorded: the rule is all there is
    frac = ctx.t("optimizer_host_time.fraction")
    mid = np.full(len(rest), frac) if by_rule else gone / np.maximum(range_ns, 1.0)
    high = 1.0 - cost["kept_ns"].to_numpy() / np.maximum(range_ns, 1.0)
    cut = float((mid * range_ns).sum() / max(range_ns.sum(), 1.0))
    cut_hi = max(cut, float((high * range_ns).sum() / max(range_ns.sum(), 1.0)))
    if by_rule:
        cut_hi = min(1.0, 1.5 * frac)
    excess = np.maximum(rest["dur_ns"].to_numpy() - rest["gpu_ns"].to_numpy(), 0)
    claim = np.minimum(rest["idle_ns"].to_numpy(), np.minimum(excess, mid * range_ns))
    saving_ms = float(claim.sum()) / 1e6 / found.steps
    r_ts = rest["ts_ns"].to_numpy()
    rep = ctx.whatif(
        ShrinkHost(
            r_ts,
            r_ts + rest["dur_ns"].to_numpy(),
            rest["tid"].to_numpy(),
            keep=1.0 - cut,
            low=1.0 - cut / 2,
            high=1.0 - cut_hi,
            label="cheaper optimizer step",
        )
    )
    return _Cut(cost, by_rule, frac, cut, cut_hi, saving_ms, rep)


def _by_class(rest: pd.DataFrame) -> pd.DataFrame:
    """Per optimizer class, most host time first: ranges, host, GPU and idle time."""
    by_cls = rest.groupby("cls", sort=False).agg(
        n=("dur_ns", "size"),
        host=("dur_ns", "sum"),
        gpu=("gpu_ns", "sum"),
        idle=("idle_ns", "sum"),
        ts=("ts_ns", "min"),
        k=("kernels", "sum"),
    )
    return by_cls.sort_values("host", ascending=False)


def _evidence(trace: Trace, found: _Ranges, by_cls: pd.DataFrame) -> tuple[Evidence, ...]:
    ev = []
    for cls, r in by_cls.iterrows():
        ev.append(
            Evidence(
                f"Optimizer.step#{cls}.step: host time (GPU work launched {ms(r['gpu'])} ms)",
                int(r["n"]),
                ms(r["host"]),
                trace.to_trace_us(int(r["ts"])),
            )
        )
    rest = found.rest
    ev.append(Evidence("GPU idle inside those ranges", len(rest), ms(rest["idle_ns"].sum())))
    return tuple(ev)


def _summary(found: _Ranges, cut: _Cut, by_cls: pd.DataFrame, opt: Optimizer | None) -> str:
    host_ms, steps, rep = found.host_ms, found.steps, cut.rep
    names = " and ".join(f"{c}.step" for c in by_cls.index[:3])
    setting = ""
    if opt is not None:
        n_tensors = opt.param_tensors
        groups = opt.param_groups
        setting = (
            f" (run.json: {'?' if n_tensors is None else n_tensors} parameter tensors"
            + (f" in {groups} group(s)" if isinstance(groups, int) else "")
            + f", foreach={opt.foreach}, fused={opt.fused})"
        )
    verb = "holds" if len(by_cls) == 1 else "hold"
    tensors = int((opt.param_tensors if opt else 0) or 0) or int(cut.cost["tensors"].max())
    per_tensor = (
        f"{fmt_ms(host_ms / tensors)} of host time per parameter tensor ({tensors} tensors); "
        if tensors > 1
        else ""
    )
    return (
        f"{names} {verb} the host {fmt_ms(host_ms)} per step ({found.share:.0f}% of the step) "
        f"while launching {fmt_ms(found.gpu_ms)} of GPU work{setting}; the GPU idles "
        f"{fmt_ms(float(found.rest['idle_ns'].sum()) / 1e6 / steps)} per step inside them"
        + (
            f"; {per_tensor}replayed with {cut.cut:.0%} of that host time gone (a fused "
            f"step), the step is {fmt_ms(rep.ms)} shorter."
            if rep.replayed
            else "."
        )
    )


def _assumptions(found: _Ranges, cut: _Cut) -> tuple[str, ...]:
    frac, steps, cost = cut.frac, found.steps, cut.cost
    return (
        f"Host time = the Optimizer.step ranges inside the {steps} steady step(s); GPU work "
        "= the kernels, copies and memsets launched from inside them.",
        (
            f"A cheaper step removes {frac:.0%} of the host time inside the ranges "
            f"(range {frac / 2:.0%}-{min(1.0, 1.5 * frac):.0%}; "
            "optimizer_host_time.fraction): a rule, as no operator is recorded in them."
        )
        if cut.by_rule
        else (
            f"A foreach/fused step runs the update as one operator call: the operators "
            f"inside the ranges ({fmt_ms(float(cost['op_ns'].sum()) / 1e6 / steps)} per "
            f"step) go but one call ({fmt_ms(float(cost['call_ns'].median()) / 1e3 / 1e3)}"
            f", the median innermost operator here), {cut.cut:.0%} of the ranges' host "
            f"time; the Python around them stays (range: half of that to "
            f"{cut.cut_hi:.0%}, a compiled step). The update kernels keep their GPU time."
        ),
        cut.rep.assumption
        if cut.rep.replayed
        else "Saving = the GPU idle time inside the ranges (start to the end of their last "
        "kernel), at most the host time removed and the host time above the GPU work.",
        "Ranges with per-parameter ops and no foreach/fused kernel are single-tensor-"
        "optimizer's and are not counted here.",
    )


def _locations(
    trace: Trace, ctx: Context, rest: pd.DataFrame, opt: Optimizer | None
) -> tuple[Location, ...]:
    locs = aggregate(
        ctx.locator.at(int(t), int(ts)) for t, ts in zip(rest["tid"], rest["ts_ns"], strict=True)
    )
    if opt is not None and isinstance(opt.file, str) and isinstance(opt.line, int):
        locs = (Location(opt.file, opt.line, "optimizer created here"), *locs)[:5]
    return locs


def _advice(cls: str, groups: object) -> str:
    grp = (
        f" Merge its {groups} parameter groups into as few as the hyper-parameters need."
        if isinstance(groups, int) and groups > 4
        else " Use fewer parameter groups."
    )
    return (
        f"Make {cls}.step cheaper on the host: foreach=True or fused=True where it has "
        f"them, larger parameter blocks (for Shampoo a larger max_preconditioner_dim and a "
        f"lower precondition_frequency).{grp} With gradient accumulation, step once every k "
        f"micro-batches; or compile the step (torch.compile(optimizer.step)) so it runs as "
        f"a few fused kernels."
    )


def _snippet(cls: str) -> str:
    return (
        "# one step per k micro-batches (gradient accumulation)\n"
        "loss = loss / k; loss.backward()\n"
        "if (i + 1) % k == 0:\n"
        "    optimizer.step(); optimizer.zero_grad(set_to_none=True)\n"
        "\n"
        f"# or compile the step of {cls} into a few fused kernels\n"
        "@torch.compile(fullgraph=False)\n"
        "def opt_step():\n"
        "    optimizer.step()\n"
    )
