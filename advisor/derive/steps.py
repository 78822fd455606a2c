"""Steps and steady state: which iterations of the window the per-step figures come from.

The iterations are the ``ProfilerStep#N`` ranges when the trace has them. A micro-benchmark
(:mod:`advisor.derive.kind`: one op called again and again, no model) is one step, its whole
window: its calls are iterations of the benchmark, not steps of a model. Otherwise the first
marker that splits the window into iterations is used, in this order:

- a serving engine's own step annotations (``execute_model``, ``step[DECODE bs=16]``...; one is
  enough: an engine step is one iteration);
- ``DataLoader.__next__`` ranges (an iteration runs from one batch fetch to the next);
- ``Optimizer.step#...`` ranges (an iteration ends where the optimizer step ends);
- ``advisor.step`` marks (written by ``advisor.step()`` under :func:`advisor.capture`; an
  iteration ends at each);
- the outermost user ranges named ``...forward...`` (an iteration starts at each forward; ops
  such as ``vllm::moe_forward`` and compiled kernels' launches such as
  ``triton_poi_fused_..._forward_0`` are not ranges of the user's);
- the outermost module calls (``nn.Module: Model_0``, recorded with ``with_stack`` or
  ``with_modules``): one model call per iteration, never an inner module repeated within it.

The last iteration ends where the host's work on the marker's thread and the GPU work it
launched end. Leading iterations that carry one-time work (:mod:`advisor.derive.onetime`:
context creation, module loading, autotuning, allocator growth, compilation) and are longer
than the iterations after them are left out, as is everything before the first iteration; the
rest are the *steady steps*. A trace with fewer than two markers stays one synthetic step.

:func:`steady_trace` gives the trace with its ``steps`` table and every table's ``step``
column set from the steady steps: the one place the pipeline switches over, so every detector,
the run summary and the views read steady steps only (work outside them has ``step == -1``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from advisor.derive.dataloader import is_fetch
from advisor.derive.kind import is_engine_step, is_module_call, trace_kind
from advisor.derive.onetime import one_time_events, total_ns
from advisor.trace.links import assign_steps, gpu_steps
from advisor.trace.model import Trace
from advisor.trace.names import name_flags

MICRO_BENCHMARK = "micro-benchmark"
FIRST_STEP_SLOW = 1.2  # a leading iteration this much longer than the median of the rest...
FIRST_STEP_ONE_TIME = 0.1  # ...holding one-time work of this share of that median is warm-up
_FORWARD_RE = re.compile(r"forward", re.IGNORECASE)
STEP_MARK = "advisor.step"  # the range advisor.step() records under advisor.capture()


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
    out; ``source`` names the markers the iterations came from."""

    source: str
    steps: pd.DataFrame
    excluded: tuple[Excluded, ...]

    @property
    def synthetic(self) -> bool:
        """One step made of the whole window (no markers, or a micro-benchmark's window)."""
        return self.source == "whole trace" or self.source.startswith(MICRO_BENCHMARK)

    @property
    def ids(self) -> list[int]:
        return [int(s) for s in self.steps["step"]]

    def median_ms(self) -> float:
        d = self.steps["dur_ns"].to_numpy()
        return float(np.median(d)) / 1e6 if len(d) else 0.0


# (source label, name predicate, iteration boundary: at each marker's "start" (the last
# iteration runs until the thread's work ends), its "end", or its start with the last iteration
# ending with the marker's "range" and the GPU work launched inside it; the fewest markers that
# make iterations; the tables searched)
_HOST = ("annotations", "cpu_ops")
_MARKERS: tuple[tuple[str, Callable[[str], bool], str, int, tuple[str, ...]], ...] = (
    ("engine step", is_engine_step, "range", 1, _HOST),
    ("DataLoader.__next__", is_fetch, "start", 2, _HOST),
    ("Optimizer.step", lambda n: n.startswith("Optimizer.step#"), "end", 2, _HOST),
    ("advisor.step", lambda n: n == STEP_MARK, "end", 2, _HOST),
    (
        "forward",
        lambda n: (
            bool(_FORWARD_RE.search(n))
            and "backward" not in n.lower()
            and "::" not in n  # an op (aten::, a custom op such as vllm::moe_forward)
            # a module call, or a compiled kernel's launch (triton_poi_fused_..._forward_0)
            and not n.startswith(("nn.Module", "triton_"))
        ),
        "range",
        2,
        _HOST,
    ),
    ("model call", is_module_call, "range", 2, ("python", "annotations")),
)


def steady_steps(trace: Trace) -> StepSet:
    """The steady steps of ``trace`` (computed once per trace)."""
    return trace.memo("step_set", lambda: _steady(trace))  # type: ignore[no-any-return]


def steady_trace(trace: Trace) -> Trace:
    """``trace`` with its steps and ``step`` columns from :func:`steady_steps` (itself when the
    steps are unchanged)."""
    return trace.memo("steady_trace", lambda: _retag(trace, steady_steps(trace)))  # type: ignore[no-any-return]


def _steady(trace: Trace) -> StepSet:
    kind = trace_kind(trace)
    if not trace.meta.synthetic_steps:
        its, source = trace.steps, "ProfilerStep"
    elif kind.kind == "micro-benchmark":
        # each call of the op is an iteration of the benchmark, not a step of a model: the
        # step is the measured window (every iteration)
        source = f"{MICRO_BENCHMARK}: {kind.iterations} calls of {kind.op}"
        return StepSet(source, trace.steps, ())
    else:
        found = _marker_iterations(trace)
        if found is None:
            return StepSet("whole trace", trace.steps, ())
        its, source = found
    # a trace's last ProfilerStep is often cut short by the profiler's stop: keep two
    keep, excluded = _drop_warmup(trace, its, 2 if source == "ProfilerStep" else 1)
    out: list[Excluded] = []
    if len(keep) and source != "ProfilerStep":
        first = int(its["ts_ns"].iloc[0])
        if first > 0:
            out.append(Excluded(0, first, "before the first iteration"))
    return StepSet(source, keep, tuple(out + excluded))


def _drop_warmup(
    trace: Trace, its: pd.DataFrame, min_left: int
) -> tuple[pd.DataFrame, list[Excluded]]:
    """Leave out leading iterations that are slow and hold one-time work (at most half of them,
    keeping ``min_left``)."""
    ev = one_time_events(trace)
    dur = its["dur_ns"].to_numpy()
    i, out = 0, []
    while len(its) - i > min_left and i < max(1, len(its) // 2):
        rest = float(np.median(dur[i + 1 :]))
        lo, hi = int(its["ts_ns"].iloc[i]), int(its["end_ns"].iloc[i])
        once = total_ns(ev, lo, hi)
        if not (
            rest > 0
            and once > 0
            and dur[i] > FIRST_STEP_SLOW * rest
            and once >= FIRST_STEP_ONE_TIME * rest
        ):
            break
        kinds = sorted(set(ev.loc[(ev["ts_ns"] >= lo) & (ev["ts_ns"] < hi), "kind"]))
        out.append(
            Excluded(
                lo,
                hi,
                f"warm-up iteration: {once / 1e6:.1f} ms of one-time work ({', '.join(kinds)})",
                int(its["step"].iloc[i]),
            )
        )
        i += 1
    return (its.iloc[i:].reset_index(drop=True) if i else its), out


def _marker_iterations(trace: Trace) -> tuple[pd.DataFrame, str] | None:
    for label, pred, boundary, fewest, tables in _MARKERS:
        ts, end, tid = _markers(trace, pred, tables)
        if len(ts) < fewest:
            continue
        if boundary in ("start", "range"):
            starts = ts
            until = int(end[-1]) if boundary == "range" else None
            ends = np.append(ts[1:], max(int(end[-1]), _work_end(trace, tid, int(ts[-1]), until)))
        else:
            starts = np.insert(end[:-1], 0, _thread_start(trace, tid, int(ts[0])))
            ends = end
        st = pd.DataFrame(
            {
                "step": np.arange(len(starts), dtype=np.int64),
                "ts_ns": starts.astype(np.int64),
                "dur_ns": (ends - starts).astype(np.int64),
                "end_ns": ends.astype(np.int64),
                "synthetic": False,
            }
        )
        return st, label
    return None


def _markers(
    trace: Trace, pred: Callable[[str], bool], tables: tuple[str, ...]
) -> tuple[np.ndarray, np.ndarray, int]:
    """Starts and ends of the outermost marker ranges on the thread with the most of them."""
    parts = []
    for df in (getattr(trace, t) for t in tables):
        if not len(df):
            continue
        m = name_flags(df["name"], pred)
        if "on_gpu" in df:
            m &= ~df["on_gpu"].to_numpy(dtype=bool)
        if m.any():
            parts.append(df.loc[m, ["ts_ns", "end_ns", "tid"]])
    empty = np.zeros(0, np.int64)
    if not parts:
        return empty, empty, -1
    rows = pd.concat(parts, ignore_index=True)
    tid = int(rows["tid"].value_counts().index[0])
    rows = rows[rows["tid"] == tid].sort_values(["ts_ns", "end_ns"], ascending=[True, False])
    ts, end = rows["ts_ns"].to_numpy(), rows["end_ns"].to_numpy()
    prev_end = np.maximum.accumulate(np.concatenate([[np.iinfo(np.int64).min], end[:-1]]))
    top = ts >= prev_end  # not inside an earlier marker
    return ts[top], end[top], tid


def _work_end(trace: Trace, tid: int, start: int, until: int | None = None) -> int:
    """Where the host's work on ``tid`` from ``start`` on (started before ``until`` if given),
    and the GPU work it launched, ends."""
    end = start
    stop = until if until is not None else np.iinfo(np.int64).max
    for df in (trace.cpu_ops, trace.runtime):
        if len(df):
            ts = df["ts_ns"].to_numpy()
            m = (df["tid"].to_numpy() == tid) & (ts >= start) & (ts < stop)
            if m.any():
                end = max(end, int(df["end_ns"].to_numpy()[m].max()))
    act = trace.gpu_activity()
    if len(act) and len(trace.runtime):
        li = act["launch_idx"].to_numpy()
        rts = trace.runtime["ts_ns"].to_numpy()
        lt = rts[np.clip(li, 0, None)]
        m = (li >= 0) & (lt >= start) & (lt < stop)
        if m.any():
            end = max(end, int(act["end_ns"].to_numpy()[m].max()))
    return end


def _thread_start(trace: Trace, tid: int, before: int) -> int:
    """Where the host's work on ``tid`` begins (the first iteration's start)."""
    first = before
    for df in (trace.cpu_ops, trace.runtime):
        if len(df):
            ts = df["ts_ns"].to_numpy()[df["tid"].to_numpy() == tid]
            first = min(first, int(ts.min())) if len(ts) else first
    return first


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
        if k in ("_memo_one_time_events",):
            object.__setattr__(out, k, v)
    object.__setattr__(out, "_memo_step_set", ss)
    object.__setattr__(out, "_memo_steady_trace", out)
    return out
