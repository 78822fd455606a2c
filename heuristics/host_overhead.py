"""Every operator costs the host far more time than it should: the CPU cannot launch fast enough.

**What it detects.** Operators that do no device work of their own (``aten::view``,
``as_strided``, ``empty``, ``slice``, ``t``, ``transpose``, ``detach``...) cost the host about a
microsecond on a healthy machine: their time is pure framework overhead (Python binding,
dispatcher, autograd bookkeeping, the caching allocator). This detector compares their mean host
time inside the steady steps (not while torch.compile traces the model inside its compile ranges:
that is compilation, counted once by ``one-time-init``) with typical figures and reports a trace
whose median slowdown is at
least ``host_overhead.min_ratio`` (10x), together with the share of the step the host spends
inside ``aten`` operators outside CUDA runtime calls (framework overhead).

Typical figures (mean host time per call, profiler on, shapes recorded) are the medians over nine
GPU traces of PyTorch 1.13-2.x on Xeon/EPYC hosts (HTA's ns_resolution, trace_diff and
negative_queue traces on V100/A100, TraceLens' five H100 and one MI300X trace): ``view`` 0.5 us,
``as_strided`` 0.6, ``empty`` 3.4, ``t`` 4.3, ``transpose`` 2.1, ``slice`` 2.0 (see
``TYPICAL_US``). A profiler that records memory (``profile_memory``) or, before torch 1.11,
Python stacks adds a few microseconds per op (5-6x on the shared traces that do): the threshold
leaves that out.

**Why it costs time.** A step issues thousands of operators; at 25 us instead of 0.6 us each,
the host takes longer to issue a kernel than the GPU takes to run it, and the GPU waits. Usual
causes: a starved or throttled CPU (too few cores for the data-loader workers and the training
process, CPU frequency scaling, a noisy neighbour in a VM), debug modes
(``torch.autograd.set_detect_anomaly(True)``, sanitizers, ``CUDA_LAUNCH_BLOCKING=1``, a
profiler recording memory), or too many small Python-level operators.

**How the saving is estimated.** The steady steps are replayed (see docs/savings.md) with the
host time inside ``aten`` operators (outermost, every thread) cut by ``host_overhead.fraction``
(0.5) of the share above the typical figures (``1 - 1/slowdown``): the trace cannot tell how much
of the slowdown is the profiler's own. The range goes from a quarter of that share to all of it
(operators back at their typical cost). The saving is what the step loses in the replay: nothing
where the GPU limits the step. Where the replay cannot place the steps: the same share of the
GPU idle time while the host was inside operators that launch GPU work (allocator calls
excluded: ``allocator-churn``). ``gpu-idle``'s launch-overhead replay shrinks the same operators:
the two overlap, and the combined replay counts that time once. On a launch-bound step
``gpu-idle`` values the whole step in CUDA graphs, which removes this time too: the finding is
listed under that row.

**How to fix.** Check the machine first: CPU affinity and isolation (``taskset``/``numactl``,
one core set per rank, DataLoader workers away from the main process), the CPU governor, other
jobs on the host. Turn debug modes off (``torch.autograd.set_detect_anomaly(False)``, unset
``CUDA_LAUNCH_BLOCKING``). Then issue fewer operators: ``torch.compile`` (fused kernels, no
per-op dispatch), CUDA graphs (``mode="reduce-overhead"``; for a model already compiled, that
is the advice), larger batches.

**Known false positives.** Traces recorded by very old profilers may inflate every operator;
re-profile with a current torch to confirm.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from advisor.derive.locate import aggregate
from advisor.derive.onetime import in_compile
from advisor.derive.timeline import Intervals, union
from advisor.detect.draft import Draft
from advisor.detect.registry import Context, detector
from advisor.detect.thresholds import register
from advisor.findings import Evidence
from advisor.replay.fixes import ShrinkHost
from advisor.replay.whatif import Saving
from advisor.trace.model import Trace
from advisor.trace.names import name_flags

from ._allocator import without_allocator
from ._compile import model_compiled
from ._host_cost import clip_to_steps, excess_idle_ns, fires, idle_in_launching_ns, op_costs
from ._ops import parent_has
from ._per_step import fmt_ms, n_steps

ID = "host-overhead"
TITLE = "High host cost per operator (CPU cannot launch fast enough)"

register(
    "host_overhead.fraction",
    0.5,
    "share of the excess host time (GPU idle inside launching operators) claimed",
)


def _framework_ns(trace: Trace) -> int:
    """Host time inside the steps in outermost aten operators, CUDA runtime calls excluded."""
    ops = trace.cpu_ops
    is_aten = name_flags(ops["name"], lambda n: n.startswith("aten::"))
    s, e = clip_to_steps(
        *union(ops["ts_ns"].to_numpy()[is_aten], ops["end_ns"].to_numpy()[is_aten]), trace
    )
    rt = trace.runtime
    inside = 0
    if len(rt) and len(s):
        rs, re_ = union(rt["ts_ns"].to_numpy(), rt["end_ns"].to_numpy())
        inside = int(Intervals(rs, re_).covered(s, e).sum())
    return int(np.sum(e - s)) - inside


def _outer_aten(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Starts, ends and threads of the outermost aten operators (no aten parent)."""
    ops = trace.cpu_ops
    is_aten = name_flags(ops["name"], lambda n: n.startswith("aten::"))
    par = ops["parent_idx"].to_numpy()
    outer = is_aten & ~parent_has(is_aten, par)
    outer &= ops["step"].to_numpy() >= 0
    outer &= ~in_compile(trace, ops["tid"].to_numpy(), ops["ts_ns"].to_numpy())
    return tuple(ops[c].to_numpy()[outer] for c in ("ts_ns", "end_ns", "tid"))


class _Facts(NamedTuple):
    """The operators' slowdown against the typical figures and the host and GPU time it
    shows in."""

    costs: pd.DataFrame  # op_costs' rows, slowest first
    steps: int
    ratio: float  # median slowdown
    frac: float  # host_overhead.fraction
    saving_ms: float  # the closed-form saving per step
    fw_ms: float  # framework overhead per step
    idle_ms: float  # GPU idle per step while the host launches


@detector(ID, TITLE, gpu_only=True, needs=("cpu_ops",))
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    f = _measure(trace, ctx)
    if f is None:
        return []
    over = 1 - 1 / f.ratio  # share of operator time above the typical figures
    st, en, tids = without_allocator(trace, *_outer_aten(trace))  # allocator-churn's time
    rep = ctx.whatif(
        ShrinkHost(
            st,
            en,
            tids,
            keep=1 - f.frac * over,
            low=1 - f.frac * over / 2,
            high=1 - over,
            label="operators at their typical host cost",
        )
    )
    fields = rep.draft_fields() if rep.replayed else {"est_savings_ms": round(f.saving_ms, 3)}
    causes = _causes(trace, ctx)
    top = f.costs.head(3)
    rows = trace.cpu_ops.index[trace.cpu_ops["name"].isin(list(top["name"]))][:300]
    return [
        Draft(
            id=ID,
            title=TITLE,
            **fields,
            confidence="medium" if f.ratio >= 2 * ctx.t("host_overhead.min_ratio") else "low",
            summary=_summary(ctx, f, top, rep, over) + (f" {causes}" if causes else ""),
            recommendation=_advice(causes, model_compiled(trace, ctx)),
            snippet=SNIPPET,
            evidence=_evidence(trace, f),
            locations=aggregate(ctx.locator.for_ops(rows)),
            assumptions=_assumptions(f, rep),
        )
    ]


def _measure(trace: Trace, ctx: Context) -> _Facts | None:
    costs = op_costs(trace, ctx.t("host_overhead.min_calls"))
    if not fires(costs, ctx):
        return None
    frac = ctx.t("host_overhead.fraction")
    claim = frac * excess_idle_ns(trace, ctx)
    steps = n_steps(trace)
    ratio = float(costs["ratio"].median())
    fw_ms = _framework_ns(trace) / 1e6 / steps
    idle_ms = idle_in_launching_ns(trace) / 1e6 / steps
    return _Facts(costs, steps, ratio, frac, claim / 1e6 / steps, fw_ms, idle_ms)


def _evidence(trace: Trace, f: _Facts) -> tuple[Evidence, ...]:
    ev = [
        Evidence(
            f"{r.name}: {r.mean_us:.1f} us per call (typical {r.typical_us:g} us, {r.ratio:.0f}x)",
            int(r.calls),
            round(r.calls * r.mean_us / 1e3, 3),
            trace.to_trace_us(int(trace.cpu_ops["ts_ns"].iat[int(r.row)])),
        )
        for r in f.costs.head(6).itertuples(index=False)
    ]
    ev.append(
        Evidence(
            "host time in aten operators outside CUDA runtime calls (framework)",
            f.steps,
            round(f.fw_ms * f.steps, 3),
        )
    )
    ev.append(
        Evidence(
            "GPU idle while the host was in operators that launch GPU work",
            f.steps,
            round(f.idle_ms * f.steps, 3),
        )
    )
    return tuple(ev)


def _summary(ctx: Context, f: _Facts, top: pd.DataFrame, rep: Saving, over: float) -> str:
    pairs = ", ".join(
        f"{str(r.name).removeprefix('aten::')} {r.mean_us:.1f} us vs {r.typical_us:g}"
        for r in top.itertuples(index=False)
    )
    fw_pct = 100.0 * f.fw_ms / ctx.step_ms_median if ctx.step_ms_median > 0 else 0.0
    return (
        f"Operators cost the host {f.ratio:.0f}x their typical time ({pairs}); the host "
        f"spends {fmt_ms(f.fw_ms)} per step ({fw_pct:.0f}% of the step) in framework "
        f"overhead, and the GPU idles {fmt_ms(f.idle_ms)} per step while it launches"
        + (
            f"; replayed with {f.frac * over:.0%} of the operators' host time gone, the "
            f"step is {fmt_ms(rep.ms)} shorter."
            if rep.replayed
            else "."
        )
    )


def _assumptions(f: _Facts, rep: Saving) -> tuple[str, ...]:
    frac, ratio = f.frac, f.ratio
    return (
        "Typical figures: median mean host time per call over nine PyTorch 1.13-2.x GPU "
        "traces (V100, A100, H100, MI300X hosts) with the profiler on; slowdown = the median "
        f"over the {len(f.costs)} operator kinds with enough calls here.",
        f"The fix removes {frac:g} x (1 - 1/{ratio:.0f}) of the host time inside aten "
        f"operators (range {frac / 2:g}x to all of the excess): the profiler's own share of "
        "the slowdown is unknown.",
        rep.assumption
        if rep.replayed
        else f"Saving = {frac:g} x (1 - 1/{ratio:.0f}) x the GPU idle time while the host was in "
        f"operators that launch GPU work ({fmt_ms(f.idle_ms)} per step, allocator calls "
        "excluded), over the steady steps.",
        "gpu-idle's launch-overhead replay shrinks the same operators: the savings overlap.",
    )


def _causes(trace: Trace, ctx: Context) -> str:
    out = []
    if ctx.live.backends.detect_anomaly is True:
        out.append("anomaly detection is on (run.json: torch.is_anomaly_enabled())")
    if ctx.live.backends.cuda_launch_blocking is True:
        out.append("CUDA_LAUNCH_BLOCKING=1 is set (run.json)")
    if len(trace.memory):
        out.append(
            "the profiler recorded memory events (profile_memory=True), which adds "
            "host time to every operator"
        )
    cpus = ctx.live.host.cpu_count
    if isinstance(cpus, int) and cpus <= 2:
        out.append(f"the process may use only {cpus} CPU core(s) (run.json)")
    return ("Seen: " + "; ".join(out) + ".") if out else ""


def _advice(causes: str, compiled: bool = False) -> str:
    first = "Turn off what run.json shows first. " if "run.json" in causes else ""
    fewer = (
        'the model is already compiled: mode="reduce-overhead" adds CUDA graphs (one launch '
        "for many kernels)."
        if compiled
        else 'torch.compile fuses them and skips per-op dispatch, mode="reduce-overhead" adds '
        "CUDA graphs."
    )
    return (
        first + "Check the host: CPU affinity and isolation (taskset/numactl, one core set "
        "per rank, DataLoader workers away from the training process), the CPU governor "
        "and other jobs on the machine; turn off debug modes (set_detect_anomaly, "
        "CUDA_LAUNCH_BLOCKING). Then issue fewer operators: " + fewer
    )


SNIPPET = (
    "torch.autograd.set_detect_anomaly(False)      # anomaly mode costs every op\n"
    'model = torch.compile(model, mode="reduce-overhead")  # fewer ops, CUDA graphs\n'
    "# pin the process to its own cores, away from DataLoader workers:\n"
    "#   numactl --physcpubind=0-15 python train.py\n"
)
