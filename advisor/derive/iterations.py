"""The iteration finder: the unit of work that repeats, in a trace without ``ProfilerStep#N``
markers. Used by every command through :mod:`advisor.derive.steps` (``analyze``, ``inspect``,
``diff``, the API), so they all count the same steps.

Two kinds of carriers, tried in this order:

- **Step markers**, whose name says "one iteration": a serving engine's step (an annotation or
  op named ``execute_model``, vLLM's ``execute_context_N(...)``, SGLang's ``step[DECODE
  bs=16]``..., or a Python frame of a function so named, such as
  ``.../gpu_model_runner.py(1002): execute_model``; one is enough), ``DataLoader.__next__``
  ranges (an iteration runs from one batch fetch to the next), ``Optimizer.step#...`` ranges
  (an iteration ends where the optimizer step ends), ``advisor.step`` marks. The first family
  present is used.
- **Calls that repeat**: the outermost user ranges named ``...forward...`` (not ops such as
  ``vllm::moe_forward``, nor compiled kernels' launches such as
  ``triton_poi_fused_..._forward_0``), the calls of one compiled function (``Torch-Compiled
  Region: N/M``, every M of one N) or of one Inductor graph (``## Call CompiledFxGraph <hash>
  ##``), the user's own ranges (``record_function``; digits in the name are ignored, so
  ``iter_3`` and ``iter_4`` are one unit; of the units keyed by name, the ``MAX_UNITS``
  spanning the most of the window are weighed) and the outermost module calls (``nn.Module:
  Model_0``). Each starts an iteration. The unit used is the outermost one that repeats (at
  least ``FEWEST`` calls on one thread) and whose iterations hold at least ``COVER_SHARE`` of
  the recorded work (the kernel time launched inside them: a one-off upload of the weights is
  no iteration's work; on a trace without kernels, the time of the top-level operators of its
  thread). A unit that repeats inside the calls of another repeating unit is not a step (the
  30 module calls inside 10 engine steps); a unit lying one-to-one inside another gives way to
  the outer one; a loop wrapped in one range that does not repeat is split at its calls.

The last iteration ends where the host's work on the unit's thread (started before its last
call ends, for ranges) and the GPU work it launched end. :class:`Found` names the unit and
says why it was chosen (``run.step_unit``, ``run.step_unit_evidence``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from advisor.derive.dataloader import is_fetch
from advisor.derive.kind import is_engine_step, is_module_call
from advisor.trace.model import Trace
from advisor.trace.names import name_flags, name_values

STEP_MARK = "advisor.step"  # the range advisor.step() records under advisor.capture()
FEWEST = 2  # calls of a unit on one thread for it to repeat
COVER_SHARE = 0.5  # a unit's iterations cover at least this share of the recorded work
MAX_UNITS = 16  # of each family keyed by name, the units spanning the most of the window
_FORWARD_RE = re.compile(r"forward", re.IGNORECASE)
_REGION_RE = re.compile(r"^Torch-Compiled Region: (\d+)/\d+$")
_GRAPH_CALL_RE = re.compile(r"^## Call CompiledFxGraph \w+ ##$")  # Inductor's call of a graph
_DIGITS_RE = re.compile(r"\d+")
_PROFILER_STEP = "ProfilerStep#"


@dataclass(frozen=True)
class Found:
    """Iterations (step, ts_ns, dur_ns, end_ns, synthetic) of ``unit`` and the evidence."""

    iterations: pd.DataFrame
    unit: str  # the family: "engine step", "DataLoader.__next__", "compiled region"...
    carrier: str  # the range that carries it, e.g. "Torch-Compiled Region: 0/0"
    why: str  # one sentence: the calls, their coverage, what was passed over


@dataclass(frozen=True)
class _Calls:
    """The outermost calls of one unit on the thread with the most of them."""

    unit: str
    carrier: str
    boundary: str  # "range": an iteration per call; "start": at each call; "end": at its end
    ts: np.ndarray
    end: np.ndarray
    tid: int


def _is_forward(n: str) -> bool:
    return (
        bool(_FORWARD_RE.search(n))
        and "backward" not in n.lower()
        and "::" not in n  # an op (aten::, a custom op such as vllm::moe_forward)
        # a module call, or a compiled kernel's launch (triton_poi_fused_..._forward_0)
        and not n.startswith(("nn.Module", "triton_"))
    )


def _is_marker(n: str) -> bool:
    """Names with a family of their own (never a user range)."""
    return (
        n.startswith((_PROFILER_STEP, "Optimizer.step#", "nn.Module"))
        or n == STEP_MARK
        or is_fetch(n)
        or is_engine_step(n)
        or _is_forward(n)
        or _region_key(n) is not None
    )


# (unit, name predicate, boundary, fewest calls, tables searched): iteration markers
_HOST = ("annotations", "cpu_ops")
_MARKERS: tuple[tuple[str, Callable[[str], bool], str, int, tuple[str, ...]], ...] = (
    ("engine step", is_engine_step, "range", 1, _HOST),
    ("engine step", is_engine_step, "range", 1, ("python",)),  # the engine's own function
    ("DataLoader.__next__", is_fetch, "start", 2, _HOST),
    ("Optimizer.step", lambda n: n.startswith("Optimizer.step#"), "end", 2, _HOST),
    ("advisor.step", lambda n: n == STEP_MARK, "end", 2, _HOST),
)


def find_iterations(trace: Trace) -> Found | None:
    """The iterations of ``trace`` (no ProfilerStep markers); None: no unit repeats and covers
    most of the recorded work."""
    for unit, pred, boundary, fewest, tables in _MARKERS:
        calls = _calls(trace, unit, pred, tables, boundary)
        if calls is not None and len(calls.ts) >= fewest:
            n = len(calls.ts)
            why = f"{n} {unit} call(s) ({_short(calls.carrier)}): an iteration each"
            return Found(_tile(trace, calls), unit, calls.carrier, why)
    cands = [c for c in _repeating(trace) if len(c.ts) >= FEWEST]
    if not cands:
        return None
    cover = {id(c): _cover(trace, c) for c in cands}
    ok = [c for c in cands if cover[id(c)] >= COVER_SHARE]
    passed = []
    for c in ok:
        outer = next((o for o in cands if o is not c and _inside(c, o)), None)
        if outer is not None:
            passed.append(f"{_short(c.carrier)} x{len(c.ts)} (inside {_short(outer.carrier)})")
        else:
            passed.append("")
    top = [c for c, p in zip(ok, passed, strict=True) if not p]
    if not top:
        return None
    best = max(top, key=lambda c: cover[id(c)])  # ties: the earlier family (stable max)
    others = [p for p in passed if p] + [
        f"{_short(c.carrier)} x{len(c.ts)} (covers {100 * cover[id(c)]:.0f}%)"
        for c in cands
        if cover[id(c)] < COVER_SHARE
    ]
    why = (
        f"{len(best.ts)} calls of {_short(best.carrier)} ({best.unit}) covering "
        f"{100 * min(cover[id(best)], 1.0):.0f}% of the recorded work: an iteration each"
        + (f"; not a step: {'; '.join(others[:3])}" if others else "")
    )
    return Found(_tile(trace, best), best.unit, best.carrier, why)


def _short(name: str) -> str:
    return name if len(name) <= 60 else name[:57] + "..."


def _repeating(trace: Trace) -> list[_Calls]:
    """The candidate units of calls that repeat, in family order."""
    out: list[_Calls] = []
    fwd = _calls(trace, "forward", _is_forward, _HOST, "range")
    if fwd is not None:
        out.append(fwd)
    out += _keyed_calls(trace, "compiled region", _region_key, _HOST)
    out += _keyed_calls(trace, "user range", _range_key, ("annotations",))
    mod = _calls(trace, "model call", is_module_call, ("python", "annotations"), "range")
    if mod is not None:
        out.append(mod)
    return out


def _keyed_calls(
    trace: Trace, unit: str, key: Callable[[str], str | None], tables: tuple[str, ...]
) -> list[_Calls]:
    """One unit per key of the ranges' names (``key``: None for names of no unit), the
    ``MAX_UNITS`` that span the most of the window."""
    parts = []
    for t in tables:
        df = getattr(trace, t)
        if not len(df):
            continue
        k = name_values(df["name"], key)
        m = k != None  # noqa: E711 (an object array)
        if "on_gpu" in df:
            m &= ~df["on_gpu"].to_numpy(dtype=bool)
        if m.any():
            parts.append(df.loc[m, ["ts_ns", "end_ns", "tid", "name"]].assign(key=k[m]))
    if not parts:
        return []
    rows = pd.concat(parts, ignore_index=True)
    span = rows.groupby("key", sort=False).agg(
        n=("ts_ns", "size"), lo=("ts_ns", "min"), hi=("end_ns", "max")
    )
    span = span[span["n"] >= FEWEST]
    span = span.assign(w=span["hi"] - span["lo"]).sort_values("w", ascending=False, kind="stable")
    out = []
    for k in span.index[:MAX_UNITS]:
        c = _outermost(unit, rows[rows["key"].to_numpy() == k], "range")
        if c is not None:
            out.append(c)
    return out


def _region_key(n: str) -> str | None:
    """Calls of one compiled function (every compilation M of frame N), or of one graph."""
    m = _REGION_RE.match(n)
    if m:
        return f"Torch-Compiled Region: {m.group(1)}/"
    return n if _GRAPH_CALL_RE.match(n) else None


def _range_key(n: str) -> str | None:
    return None if _is_marker(n) else _DIGITS_RE.sub("#", n)


def _calls(
    trace: Trace,
    unit: str,
    pred: Callable[[str], bool],
    tables: tuple[str, ...],
    boundary: str,
) -> _Calls | None:
    """The outermost ranges matching ``pred`` on the thread with the most of them (Python
    frames: by their function's name)."""
    parts = []
    for t in tables:
        df = getattr(trace, t)
        if not len(df):
            continue
        col = "function" if t == "python" else "name"
        m = name_flags(df[col], pred)
        if "on_gpu" in df:
            m &= ~df["on_gpu"].to_numpy(dtype=bool)
        if m.any():
            parts.append(df.loc[m, ["ts_ns", "end_ns", "tid", "name"]])
    if not parts:
        return None
    return _outermost(unit, pd.concat(parts, ignore_index=True), boundary)


def _outermost(unit: str, rows: pd.DataFrame, boundary: str) -> _Calls | None:
    """The outermost of ``rows`` (ts_ns, end_ns, tid, name) on the thread with the most."""
    if not len(rows):
        return None
    tid = int(rows["tid"].value_counts().index[0])
    rows = rows[rows["tid"] == tid].sort_values(["ts_ns", "end_ns"], ascending=[True, False])
    ts, end = rows["ts_ns"].to_numpy(), rows["end_ns"].to_numpy()
    prev_end = np.maximum.accumulate(np.concatenate([[np.iinfo(np.int64).min], end[:-1]]))
    top = ts >= prev_end  # not inside an earlier call
    carrier = str(rows["name"].iloc[int(np.flatnonzero(top)[0])])
    return _Calls(unit, carrier, boundary, ts[top], end[top], tid)


def _inside(c: _Calls, o: _Calls) -> bool:
    """``c`` lies inside the calls of ``o`` (on one thread): several of c to one call of ``o``
    that repeats, or most of c's calls one-to-one inside a call of ``o`` that is longer."""
    if c.tid != o.tid or not len(o.ts):
        return False
    i = np.searchsorted(o.ts, c.ts, side="right") - 1
    held = (i >= 0) & (c.end <= o.end[np.clip(i, 0, None)])
    if not held.any():
        return False
    if len(o.ts) < FEWEST:  # a loop wrapped in one range: its calls are the iterations
        return False
    if np.bincount(i[held], minlength=len(o.ts)).max() >= 2:
        return True
    same = (c.ts[held] == o.ts[i[held]]) & (c.end[held] == o.end[i[held]])
    return bool(held.mean() > 0.5 and not same.all())


def _cover(trace: Trace, c: _Calls) -> float:
    """Share of the recorded work that falls inside the iterations of ``c``: the kernel time
    launched there (from any thread; copies are left out: a one-off upload of the weights is
    no iteration's work), or on a trace without kernels, the time of the top-level operators of
    c's thread."""
    it = _tile(trace, c)
    lo, hi = it["ts_ns"].to_numpy(), it["end_ns"].to_numpy()
    k = trace.kernels
    if len(k) and len(trace.runtime) and (k["launch_idx"].to_numpy() >= 0).any():
        li = k["launch_idx"].to_numpy()
        at = trace.runtime["ts_ns"].to_numpy()[li[li >= 0]]
        dur = k["dur_ns"].to_numpy()[li >= 0]
    else:
        ops = trace.cpu_ops
        m = (ops["depth"].to_numpy() == 0) & (ops["tid"].to_numpy() == c.tid)
        at, dur = ops["ts_ns"].to_numpy()[m], ops["dur_ns"].to_numpy()[m]
    total = float(dur.sum())
    if total <= 0:
        return 0.0
    i = np.searchsorted(lo, at, side="right") - 1
    inside = (i >= 0) & (at < hi[np.clip(i, 0, None)])
    return float(dur[inside].sum()) / total


def _tile(trace: Trace, c: _Calls) -> pd.DataFrame:
    """The iterations ``c``'s calls make."""
    ts, end, tid = c.ts, c.end, c.tid
    if c.boundary in ("start", "range"):
        starts = ts
        until = int(end[-1]) if c.boundary == "range" else None
        ends = np.append(ts[1:], max(int(end[-1]), work_end(trace, tid, int(ts[-1]), until)))
    else:
        starts = np.insert(end[:-1], 0, _thread_start(trace, tid, int(ts[0])))
        ends = end
    return pd.DataFrame(
        {
            "step": np.arange(len(starts), dtype=np.int64),
            "ts_ns": starts.astype(np.int64),
            "dur_ns": (ends - starts).astype(np.int64),
            "end_ns": ends.astype(np.int64),
            "synthetic": False,
        }
    )


def work_end(trace: Trace, tid: int, start: int, until: int | None = None) -> int:
    """Where the host's work on ``tid`` from ``start`` on (started before ``until`` if given;
    every thread for ``tid`` -1), and the GPU work it launched, ends."""
    end = start
    stop = until if until is not None else np.iinfo(np.int64).max
    for df in (trace.cpu_ops, trace.runtime):
        if len(df):
            ts = df["ts_ns"].to_numpy()
            m = (ts >= start) & (ts < stop)
            if tid >= 0:
                m &= df["tid"].to_numpy() == tid
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
