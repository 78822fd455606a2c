"""Steps and steady state: which iterations of the window the per-step figures come from.

The iterations are the ``ProfilerStep#N`` ranges when the trace has them. A micro-benchmark
(:mod:`advisor.derive.kind`: one op called again and again, no model) is one step, its
measured window: its calls are iterations of the benchmark, not steps of a model. Otherwise
the iteration finder (:mod:`advisor.derive.iterations`) picks the unit of work that repeats:
an engine's step, a batch fetch, an optimizer step, the outermost call that repeats and covers
most of the recorded work (a forward range, a compiled function, a range of the user's, a
module call). A trace where no unit repeats is one step: the recording.

Leading iterations that are slow and hold one-time work (:mod:`advisor.derive.onetime`:
context creation, module loading, autotuning, allocator growth, compilation: longer than
``FIRST_STEP_SLOW`` times the median of the rest, with one-time work of at least
``FIRST_STEP_ONE_TIME`` of it), or are cold (every kernel of the next iteration, at
``COLD_SLOW`` times that median: the first run of the code, whose lazy set-up the trace may not
name; a serving engine's prefill runs other kernels than its decodes and stays), are left out
(at most half of them), as is
everything before the first iteration; the rest are the *steady steps*. A step that is not an
iteration (the recording, a micro-benchmark's window) loses its leading set-up and the
profiler's own start and stop frames (:mod:`advisor.derive.setup`; a micro-benchmark's cold
first call counts as set-up).

:class:`StepSet` says which unit was used and why (``run.step_unit``,
``run.step_unit_evidence``). :func:`steady_trace` gives the trace with its ``steps`` table and
every table's ``step`` column set from the steady steps: the one place the pipeline switches
over, so every detector, the run summary and the views read steady steps only (work outside
them has ``step == -1``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from advisor.derive.iterations import STEP_MARK as STEP_MARK
from advisor.derive.iterations import find_iterations
from advisor.derive.kind import trace_kind
from advisor.derive.onetime import one_time_events, total_ns
from advisor.derive.setup import MIN_SHARE, leading_setup, trailing_harness
from advisor.trace.links import assign_steps, gpu_steps
from advisor.trace.model import Trace

MICRO_BENCHMARK = "micro-benchmark"
FIRST_STEP_SLOW = 1.2  # a leading iteration this much longer than the median of the rest...
FIRST_STEP_ONE_TIME = MIN_SHARE  # ...holding one-time work of this share of that median
COLD_SLOW = 2.0  # a leading iteration (or a micro-benchmark's first call) this much slower


@dataclass(frozen=True)
class Excluded:
    """A part of the window kept out of the per-step figures."""

    start_ns: int
    end_ns: int
    reason: str
    step: int | None = None  # the iteration's number, None for time outside every iteration

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(frozen=True)
class StepSet:
    """The steady steps (``steps``: step, ts_ns, dur_ns, end_ns, synthetic) and what was left
    out; ``source`` names the markers the iterations came from, ``unit`` the range that carries
    them and ``why`` the evidence; ``synthetic``: one step that is not an iteration (the
    recording, a micro-benchmark's window)."""

    source: str
    steps: pd.DataFrame
    excluded: tuple[Excluded, ...]
    unit: str = ""
    why: str = ""
    synthetic: bool = False

    @property
    def ids(self) -> list[int]:
        return [int(s) for s in self.steps["step"]]

    def median_ms(self) -> float:
        d = self.steps["dur_ns"].to_numpy()
        return float(np.median(d)) / 1e6 if len(d) else 0.0


def steady_steps(trace: Trace) -> StepSet:
    """The steady steps of ``trace`` (computed once per trace)."""
    return trace.memo("steps.step_set", lambda: _steady(trace))


def steady_trace(trace: Trace) -> Trace:
    """``trace`` with its steps and ``step`` columns from :func:`steady_steps` (itself when the
    steps are unchanged)."""
    return trace.memo("steps.steady_trace", lambda: _retag(trace, steady_steps(trace)))


def _steady(trace: Trace) -> StepSet:
    kind = trace_kind(trace)
    lo, hi = int(trace.steps["ts_ns"].iloc[0]), int(trace.steps["end_ns"].iloc[-1])
    if not trace.meta.synthetic_steps:
        its, source = trace.steps, "ProfilerStep"
        why = f"{len(its)} ProfilerStep#N range(s), the profiler's own step markers"
        carrier = "ProfilerStep#N"
    elif kind.kind == "micro-benchmark":
        # each call of the op is an iteration of the benchmark, not a step of a model: the
        # step is the measured window (every iteration), set-up and harness trimmed
        source = f"{MICRO_BENCHMARK}: {kind.iterations} calls of {kind.op}"
        why = (
            f"a micro-benchmark ({kind.iterations} calls of {kind.op}): its calls are "
            "iterations of the benchmark, the step is the measured window"
        )
        return _window(trace, lo, hi, source, why, _cold_calls(trace, kind.op))
    else:
        found = find_iterations(trace)
        if found is None:
            why = "no unit of work repeats and covers most of the recorded work"
            return _window(trace, lo, hi, "whole trace", why)
        its, source, why, carrier = found.iterations, found.unit, found.why, found.carrier
    # a trace's last ProfilerStep is often cut short by the profiler's stop: keep two
    keep, excluded = _drop_warmup(trace, its, 2 if source == "ProfilerStep" else 1)
    out: list[Excluded] = []
    if len(keep) and source != "ProfilerStep":
        first = int(its["ts_ns"].iloc[0])
        if first > 0:
            out.append(Excluded(0, first, "before the first iteration"))
    return StepSet(source, keep, tuple(out + excluded), carrier, why)


def _window(
    trace: Trace,
    lo: int,
    hi: int,
    source: str,
    why: str,
    cold: tuple[tuple[int, int, str], ...] = (),
) -> StepSet:
    """One step that is not an iteration: [lo, hi) without its leading set-up and the
    profiler's trailing stop (:mod:`advisor.derive.setup`)."""
    head = leading_setup(trace, lo, hi, cold)
    start = head.end_ns if head is not None else lo
    tail = trailing_harness(trace, start, hi)
    end = tail.start_ns if tail is not None else hi
    excluded = []
    if head is not None:
        excluded.append(Excluded(lo, start, f"set-up before the step: {head.words()}"))
    if tail is not None:
        excluded.append(Excluded(end, hi, f"after the program's work: {tail.words()}"))
    carrier = "the recording" if source == "whole trace" else source
    if not excluded:
        return StepSet(source, trace.steps, (), carrier, why, synthetic=True)
    why += "; what it starts or ends with that is not the program's steady work is trimmed"
    st = pd.DataFrame(
        {
            "step": [int(trace.steps["step"].iloc[0])],
            "ts_ns": [start],
            "dur_ns": [end - start],
            "end_ns": [end],
            "synthetic": [True],
        }
    ).astype({"step": np.int64, "ts_ns": np.int64, "dur_ns": np.int64, "end_ns": np.int64})
    return StepSet(source, st, tuple(excluded), carrier, why, synthetic=True)


def _cold_calls(trace: Trace, op: str) -> tuple[tuple[int, int, str], ...]:
    """A micro-benchmark's first top-level call of ``op`` when it is ``COLD_SLOW`` times slower
    than the median of its repeats: lazy set-up (library handles, workspaces, kernel
    selection) the trace may not name."""
    ops = trace.cpu_ops
    m = (ops["depth"].to_numpy() == 0) & (ops["name"].astype(str).to_numpy() == op)
    dur = ops["dur_ns"].to_numpy()[m]
    if len(dur) < 3 or dur[0] < COLD_SLOW * float(np.median(dur[1:])):
        return ()
    first = int(np.flatnonzero(m)[0])
    ts, end = int(ops["ts_ns"].iat[first]), int(ops["end_ns"].iat[first])
    return ((ts, end, f"the first, cold {op} call"),)


def _same_work(trace: Trace, its: pd.DataFrame, i: int) -> bool:
    """Iteration ``i`` runs every kernel the next one runs (by name; on a trace without kernels,
    every top-level operator): the same work, done cold, not other work (a serving engine's
    prefill before its decodes)."""
    k = trace.kernels
    if len(k) and len(trace.runtime) and (k["launch_idx"].to_numpy() >= 0).any():
        li = k["launch_idx"].to_numpy()
        at = np.where(li >= 0, trace.runtime["ts_ns"].to_numpy()[np.clip(li, 0, None)], -1)
        names = k["name"].to_numpy()
    else:
        ops = trace.cpu_ops
        top = ops["depth"].to_numpy() == 0
        at, names = ops["ts_ns"].to_numpy()[top], ops["name"].to_numpy()[top]

    def work(j: int) -> set[str]:
        lo, hi = int(its["ts_ns"].iloc[j]), int(its["end_ns"].iloc[j])
        return {str(n) for n in names[(at >= lo) & (at < hi)]}

    nxt = work(i + 1)
    return bool(nxt) and nxt <= work(i)


def _drop_warmup(
    trace: Trace, its: pd.DataFrame, min_left: int
) -> tuple[pd.DataFrame, list[Excluded]]:
    """Leave out leading iterations that are slow and hold one-time work, or are cold (the
    next iteration's work and ``COLD_SLOW`` times the median of the rest): at most half of
    them, keeping ``min_left``."""
    ev = one_time_events(trace)
    dur = its["dur_ns"].to_numpy()
    i, out = 0, []
    while len(its) - i > min_left and i < max(1, len(its) // 2):
        rest = float(np.median(dur[i + 1 :]))
        lo, hi = int(its["ts_ns"].iloc[i]), int(its["end_ns"].iloc[i])
        once = total_ns(ev, lo, hi)
        warm = once > 0 and dur[i] > FIRST_STEP_SLOW * rest and once >= FIRST_STEP_ONE_TIME * rest
        cold = dur[i] >= COLD_SLOW * rest and _same_work(trace, its, i)
        if rest <= 0 or not (warm or cold):
            break
        kinds = sorted(set(ev.loc[(ev["ts_ns"] >= lo) & (ev["ts_ns"] < hi), "kind"]))
        what = f": {once / 1e6:.1f} ms of one-time work ({', '.join(kinds)})" if once else ""
        why = (
            "warm-up iteration"
            if warm
            else f"cold iteration ({dur[i] / rest:.1f}x the median of the rest)"
        )
        out.append(Excluded(lo, hi, why + what, int(its["step"].iloc[i])))
        i += 1
    return (its.iloc[i:].reset_index(drop=True) if i else its), out


def _retag(trace: Trace, ss: StepSet) -> Trace:
    if ss.steps is trace.steps:
        return trace
    st = ss.steps.reset_index(drop=True)
    tables = {}
    for name in ("cpu_ops", "annotations", "python", "runtime", "syncs", "memory"):
        df = getattr(trace, name).copy(deep=False)
        df["step"] = assign_steps(df["ts_ns"].to_numpy(), st)
        tables[name] = df
    rt_steps = tables["runtime"]["step"].to_numpy()
    for name in ("kernels", "memcpy"):
        df = getattr(trace, name).copy(deep=False)
        df["step"] = gpu_steps(df["ts_ns"].to_numpy(), df["launch_idx"].to_numpy(), rt_steps, st)
        tables[name] = df
    meta = replace(trace.meta, synthetic_steps=ss.synthetic)
    out = replace(trace, meta=meta, steps=st, **tables)
    for k, v in trace.__dict__.items():  # derived tables that do not depend on the steps
        if k in ("_memo_onetime.events",):
            object.__setattr__(out, k, v)
    object.__setattr__(out, "_memo_steps.step_set", ss)
    object.__setattr__(out, "_memo_steps.steady_trace", out)
    return out
