"""One-time work in the profiled window: set-up that happens once, not once per step.

**What it detects.** What the window captured that a training loop does only once: CUDA
context and library initialization (the first runtime calls of the process, ``cudaFree(0)``,
``cuInit``, handle and stream creation taking milliseconds to seconds), first-launch module
loading (``cuModuleLoad*``, launch calls lasting a millisecond or more), cuDNN autotuning
(``cudnnFind*``), caching-allocator growth (``cudaMalloc``), torch.compile compilation
(dynamo/inductor compile ranges; or a step marker running on for seconds after the recording
stopped, around a compiled region's calls), a library's host-only set-up inside an op's first
call (about 2 ms inside the first ``aten::mm``, with no long runtime call: ten times its later
calls) and one-off host-to-device uploads such as
``model.to(device)``, when they fall outside the steady steps (see ``advisor.derive.steps``:
the time before the first iteration and leading warm-up iterations are left out).
Compilation inside the steady steps (a recompilation in the loop, see ``compile-recompiles``)
is listed too; it stays in those steps' figures.

**Why it costs time.** Once, not every step: none of this recurs, so none of it is a per-step
cost: the per-step figures of every other finding (the median step, idle time, copies, syncs)
come from the steady steps only. A window without step markers that starts at the top of a script is mostly this work (the
CUDA context alone can take tens of seconds), and would otherwise read as seconds of idle GPU
per step or a weight upload blocking every step.

**How the saving is estimated.** No per-step saving is claimed (``est_savings_ms`` is 0): the
total is shown so you can tell how much of the window was set-up. The finding is listed first
because it says how to read the others.

**How to fix.** Nothing to fix in the model; profile past it: start recording after a few
iterations with a profiler schedule (``wait``/``warmup`` steps) and mark each step with
``prof.step()``, or run ``advisor profile --warmup N``. For torch.compile, let the first calls
compile before the window opens.

**Known false positives.** Work that does recur but happened to fall before the steady steps
(a data pipeline's slow first batches, allocator growth a later shape change repeats) is counted
here as set-up. When nothing splits the trace into iterations, its one step is the recording
without the set-up it starts with; one-time work later in it stays inside that step: the
finding then says so and the other figures include it.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import numpy as np
import pandas as pd

from advisor.derive.onetime import KINDS, LABELS, one_time_events
from advisor.derive.steps import StepSet, steady_steps
from advisor.detect.draft import Draft
from advisor.detect.registry import Context, detector
from advisor.detect.thresholds import register
from advisor.findings import Evidence
from advisor.trace.kernelnames import CONV_WORD
from advisor.trace.links import assign_steps
from advisor.trace.model import Trace

ID = "one-time-init"
TITLE = "One-time set-up captured in the profiled window"

register(
    "one_time_init.min_pct", 10.0, "report one-time work from this % of the median steady step"
)


class _Facts(NamedTuple):
    """The one-time work outside the steady steps (or inside the one step when nothing splits
    the trace), by kind, with the uploads and the compilation inside the steps."""

    ss: StepSet
    ev: pd.DataFrame  # one_time_events counted here
    kept_in: bool  # no iterations, no set-up trimmed: the work stays in the one step
    by_kind: dict[str, tuple[int, int]]  # kind -> (count, ns)
    up: tuple[int, int, float, int] | None  # _uploads
    comp_in: pd.DataFrame  # compile events inside the steady steps
    comp_in_ns: int
    once_ns: int
    step_ms: float


@detector(ID, TITLE)
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    f = _measure(trace)
    if f.once_ns <= 0 or f.once_ns / 1e6 < ctx.t("one_time_init.min_pct") / 100.0 * f.step_ms:
        return []
    excluded_ns = sum(e.dur_ns for e in f.ss.excluded)
    return [
        Draft(
            id=ID,
            title=TITLE,
            est_savings_ms=0.0,
            severity="info",
            confidence="medium" if f.kept_in else "high",
            summary=f"{_opening(f.ev, f.once_ns, _parts(f))} {_where(f, excluded_ns)}",
            recommendation=(
                "Nothing to fix in the model: profile past the set-up. Open the profiler window "
                "after a few iterations with a schedule (wait/warmup steps) and call prof.step() "
                "every iteration, or run `advisor profile --warmup N`; with torch.compile, let the "
                "first calls compile before the window opens."
            ),
            snippet=_SNIPPET,
            evidence=_evidence(trace, f),
            assumptions=(
                "One-time work: long first runtime calls (context creation), module loading and "
                "launches over 1 ms, cudnnFind*, cudaMalloc, compile ranges, a step marker "
                "running on past the recording around compiled-region calls, and host-to-device "
                "copies in the parts of the window left out of the steady steps.",
                "No per-step saving is claimed; the total is the time those events took.",
            ),
            extra={
                "one_time_ms": round(f.once_ns / 1e6, 3),
                "excluded_ms": round(excluded_ns / 1e6, 3),
            },
        )
    ]


def _measure(trace: Trace) -> _Facts:
    ss = steady_steps(trace)
    ev = one_time_events(trace)
    inside = assign_steps(ev["ts_ns"].to_numpy(), ss.steps) >= 0
    # no iterations and no set-up trimmed from the start of the one step: the one-time work
    # stays in it
    first = int(ss.steps["ts_ns"].min()) if len(ss.steps) else 0
    kept_in = ss.synthetic and not any(e.start_ns < first for e in ss.excluded)
    # set-up happens before the last steady step ends; what follows it is teardown
    end = int(ss.steps["end_ns"].max()) if len(ss.steps) else 0
    # compilation inside the steady steps (a recompilation in the loop) is one-time work too,
    # but it stays in those steps' figures (see compile-recompiles)
    comp_in = ev[inside & (ev["kind"] == "compile").to_numpy()] if not kept_in else ev.iloc[0:0]
    comp_in_ns = int(comp_in["dur_ns"].sum())
    late = (ev["kind"] == "unrecorded").to_numpy()  # past the recording: never in a step
    ev = ev if kept_in else ev[(~inside & (ev["ts_ns"].to_numpy() < end)) | late]
    up = _uploads(trace, end) if not kept_in else None
    by_kind = {
        k: (int((ev["kind"] == k).sum()), int(ev.loc[ev["kind"] == k, "dur_ns"].sum()))
        for k in KINDS
    }
    once_ns = sum(ns for _, ns in by_kind.values()) + (up[1] if up else 0) + comp_in_ns
    return _Facts(ss, ev, kept_in, by_kind, up, comp_in, comp_in_ns, once_ns, ss.median_ms())


def _by_size(f: _Facts) -> list[str]:
    """The kinds, largest total first."""
    return sorted(KINDS, key=lambda k: -f.by_kind[k][1])


def _evidence(trace: Trace, f: _Facts) -> tuple[Evidence, ...]:
    ev, up, comp_in = f.ev, f.up, f.comp_in
    evidence = []
    for k in _by_size(f):
        n, ns = f.by_kind[k]
        if n:
            rows = ev[ev["kind"] == k]
            top = rows.iloc[int(np.argmax(rows["dur_ns"].to_numpy()))]
            evidence.append(
                Evidence(
                    f"{LABELS[k]} (longest: {top['name']})",
                    n,
                    round(ns / 1e6, 3),
                    trace.to_trace_us(int(top["ts_ns"])),
                )
            )
    if up and up[0]:
        evidence.append(
            Evidence(
                f"{LABELS['upload']}: {up[2] / 1e6:.1f} MB",
                up[0],
                round(up[1] / 1e6, 3),
                trace.to_trace_us(up[3]),
            )
        )
    if f.comp_in_ns:
        evidence.append(
            Evidence(
                f"{LABELS['compile']} inside the steady steps (recompiling: see compile-recompiles)",
                len(comp_in),
                round(f.comp_in_ns / 1e6, 3),
                trace.to_trace_us(int(comp_in["ts_ns"].min())),
            )
        )
    tried = _tried_once(trace) if not f.kept_in else None
    if tried is not None:
        evidence.append(tried)
    for e in f.ss.excluded:
        evidence.append(
            Evidence(
                f"left out of the steps: {e.reason}",
                1,
                round(e.dur_ns / 1e6, 3),
                trace.to_trace_us(e.start_ns),
            )
        )
    return tuple(evidence)


def _parts(f: _Facts) -> str:
    """The one-time work by kind, in words."""
    parts = ", ".join(
        f"{LABELS[k]} {_fmt(f.by_kind[k][1])}" for k in _by_size(f) if f.by_kind[k][0]
    )
    if f.up and f.up[0]:
        parts += f", {LABELS['upload']} {_fmt(f.up[1])}"
    if f.comp_in_ns:
        parts = (parts + ", " if parts else "") + (
            f"{LABELS['compile']} inside the steady steps {_fmt(f.comp_in_ns)}, which stays in "
            "their figures (see compile-recompiles)"
        )
    return parts


def _where(f: _Facts, excluded_ns: int) -> str:
    """Where the figures stand with that work: left out, kept in, or not recorded."""
    ss, once_ns, comp_in_ns = f.ss, f.once_ns, f.comp_in_ns
    if f.by_kind["unrecorded"][0] and f.by_kind["unrecorded"][1] >= once_ns / 2:
        return (
            "The trace did not record it (the step's marker ran on after the recording "
            "stopped): no figure includes it, and the steps end with the recording."
        )
    if f.kept_in:
        return (
            "The trace has no markers that split it into iterations, so this work is inside "
            "its single step and the per-step figures include it."
        )
    if once_ns == comp_in_ns:
        return f"The {_found(ss, f.step_ms)} hold{'s' if ss.synthetic else ''} it."
    return (
        ("Outside the steady steps it" if comp_in_ns else "It")
        + f" is excluded from the per-step figures: {_fmt(excluded_ns)} of the window "
        f"is left out and the {_found(ss, f.step_ms)} remain{'s' if ss.synthetic else ''}."
    )


def _found(ss: StepSet, step_ms: float) -> str:
    """The steps that remain, in words."""
    if ss.synthetic:
        return f"one step ({ss.unit}, without its set-up: {step_ms:.2f} ms)"
    return f"{len(ss.steps)} steady step(s) found from {ss.source} ranges (median {step_ms:.2f} ms)"


def _opening(ev: pd.DataFrame, once_ns: int, parts: str) -> str:
    late = ev[ev["kind"] == "unrecorded"]
    if len(late) and int(late["dur_ns"].sum()) * 2 >= once_ns:
        top = late.iloc[0]
        return (
            f"{top['name']} ran {_fmt(int(top['dur_ns']))} past the end of the recording, "
            "around a torch.compile region's calls: one-time compilation and first launches, "
            f"most likely ({parts})."
        )
    return f"The window captured {_fmt(once_ns)} of one-time work ({parts})."


def _uploads(trace: Trace, before_ns: int) -> tuple[int, int, float, int] | None:
    """(count, ns, bytes, first ts) of host-to-device copies outside the steady steps, before
    ``before_ns``."""
    m = trace.memcpy
    if not len(m):
        return None
    sel = (m["kind"].astype(str).to_numpy() == "HtoD") & (m["step"].to_numpy() < 0)
    sel &= m["ts_ns"].to_numpy() < before_ns
    if not sel.any():
        return None
    return (
        int(sel.sum()),
        int(m["dur_ns"].to_numpy()[sel].sum()),
        float(m["bytes"].to_numpy()[sel].sum()),
        int(m["ts_ns"].to_numpy()[sel].min()),
    )


_CONV_RE = re.compile(CONV_WORD + r"|cudnn|winograd|implicit_gemm|fft|precomputed", re.IGNORECASE)


def _tried_once(trace: Trace) -> Evidence | None:
    """Convolution kernels that ran only outside the steady steps: cuDNN trying algorithms
    (autotuning) on the first iterations."""
    k = trace.kernels
    if not len(k):
        return None
    names = k["name"].astype(str)
    out = k["step"].to_numpy() < 0
    steady = set(names[~out].unique())
    m = out & names.str.contains(_CONV_RE).to_numpy() & ~names.isin(steady).to_numpy()
    if not m.any():
        return None
    ts = int(k["ts_ns"].to_numpy()[m].min())
    return Evidence(
        "convolution kernels that ran only before the steady steps (cuDNN trying algorithms)",
        int(m.sum()),
        round(float(k["dur_ns"].to_numpy()[m].sum()) / 1e6, 3),
        trace.to_trace_us(ts),
    )


def _fmt(ns: float) -> str:
    ms = ns / 1e6
    return f"{ms / 1000:.1f} s" if ms >= 1000 else f"{ms:.1f} ms"


_SNIPPET = """\
sched = torch.profiler.schedule(wait=1, warmup=2, active=3)  # skip the set-up iterations
with torch.profiler.profile(schedule=sched, on_trace_ready=handler) as prof:
    for batch in loader:
        train_step(batch)
        prof.step()
# or: advisor profile --warmup 3 train.py"""
