"""torch.compile in a trace and in run.json: compiled regions, graph breaks, recompilations.
Shared by ``compile-graph-breaks`` and ``compile-recompiles``; not a detector.

From the trace (any torch >= 2.1 profile):

- ``Torch-Compiled Region: N/M`` operators: one per entry into compiled code, N the frame id
  (one per compiled function; the code after a graph break is a *resume function* with a frame
  id of its own, entered from inside the region of the frame that broke: ``1/0`` nested in
  ``0/0``, :func:`nested_frames`), M the compilation of that frame that ran (M > 0: it was
  recompiled);
- ``TorchDynamo Cache Lookup`` operators: the guard checks before each entry;
- Python frames named ``torch_dynamo_resume_in_<function>_at_<line>`` (with Python stacks):
  the code after a graph break at ``<line>``;
- compile ranges (``entire_frame_compile``, ``dynamo``, ``_compile.compile_inner``...) and the
  annotations dynamo writes inside them (``dynamo_data: compile_id=N/M``).

From run.json (``advisor profile``, :mod:`advisor.profile.compilefacts`): the graph breaks with
their reasons and user lines, the compiled frames, the recompilations with the failed guard.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pandas as pd

from advisor import record
from advisor.arrays import unique_ints
from advisor.derive.onetime import one_time_events
from advisor.detect.registry import Context
from advisor.findings import Location
from advisor.runinfo import CompiledFrame, GraphBreak, Recompile
from advisor.trace.links import is_user_file
from advisor.trace.model import Trace
from advisor.trace.names import name_flags, name_values

REGION_RE = re.compile(r"^Torch-Compiled Region: (\d+)/(\d+)$")
LOOKUP = "TorchDynamo Cache Lookup"
RESUME_RE = re.compile(r"^torch_dynamo_resume_in_(\w+?)_at_(\d+)$")
ID_LEAD_NS = 1_000_000  # a compile id annotated this long before a compile range is its id
_COMPILE_ID_RE = re.compile(r"compile_id=(?:\[\d+\])?(\d+)/(\d+)")


def _group(pattern: re.Pattern[str], g: int) -> Callable[[str], str | None]:
    """A name's group ``g`` of ``pattern`` (searched), None where it does not match: for
    :func:`~advisor.trace.names.name_values`, once per distinct name."""

    def group(name: str) -> str | None:
        m = pattern.search(name)
        return m.group(g) if m else None

    return group


def regions(trace: Trace) -> pd.DataFrame:
    """The compiled-region operators in the steady steps: row, frame, attempt, tid, ts_ns,
    end_ns, depth, step."""
    return trace.memo("compile.regions", lambda: _regions(trace))


def _regions(trace: Trace) -> pd.DataFrame:
    ops = trace.cpu_ops
    cols = ["row", "frame", "attempt", "tid", "ts_ns", "end_ns", "depth", "step"]
    if not len(ops):
        return pd.DataFrame(columns=cols)
    frame, attempt = (name_values(ops["name"], _group(REGION_RE, g)) for g in (1, 2))
    rows = np.flatnonzero((frame != None) & (ops["step"].to_numpy() >= 0))  # noqa: E711
    return pd.DataFrame(
        {
            "row": rows,
            "frame": frame[rows].astype(np.int64),
            "attempt": attempt[rows].astype(np.int64),
            "tid": ops["tid"].to_numpy()[rows],
            "ts_ns": ops["ts_ns"].to_numpy()[rows],
            "end_ns": ops["end_ns"].to_numpy()[rows],
            "depth": ops["depth"].to_numpy()[rows],
            "step": ops["step"].to_numpy()[rows],
        }
    )


# the calls of a compiled region and Inductor's generated kernels
_COMPILED_CALL = re.compile(r"^Torch-Compiled Region|^CompiledFunction|^## Call CompiledFxGraph")
_INDUCTOR_KERNEL = re.compile(r"^triton_(?:poi|red|per|tem)_")


def model_compiled(trace: Trace, ctx: Context) -> bool:
    """The model runs under torch.compile: compiled-region calls or Inductor's kernels in the
    trace, or compiled frames in run.json. Advice then names what compile does not do yet
    (CUDA graphs: ``mode="reduce-overhead"``), never "use torch.compile"."""

    def in_trace() -> bool:
        for df in (trace.cpu_ops, trace.annotations):
            if len(df) and bool(
                name_flags(df["name"], lambda n: _COMPILED_CALL.search(n) is not None).any()
            ):
                return True
        k = trace.kernels
        return bool(len(k)) and bool(
            name_flags(k["name"], lambda n: _INDUCTOR_KERNEL.match(n) is not None).any()
        )

    return bool(trace.memo("compile.model_compiled", in_trace)) or bool(run_frames(ctx))


def resume_frames(trace: Trace) -> pd.DataFrame:
    """Python frames of resume functions in the steady steps: tid, ts_ns, end_ns, file, line
    (the graph break's line), function (the function that broke)."""
    py = trace.python
    cols = ["tid", "ts_ns", "end_ns", "file", "line", "function"]
    if not len(py):
        return pd.DataFrame(columns=cols)
    function, line = (name_values(py["function"], _group(RESUME_RE, g)) for g in (1, 2))
    ok = (function != None) & (py["step"].to_numpy() >= 0)  # noqa: E711
    return pd.DataFrame(
        {
            "tid": py["tid"].to_numpy()[ok],
            "ts_ns": py["ts_ns"].to_numpy()[ok],
            "end_ns": py["end_ns"].to_numpy()[ok],
            "file": py["file"].astype(str).to_numpy()[ok],
            "line": line[ok].astype(np.int64),
            "function": function[ok],
        }
    )


def run_frames(ctx: Context) -> tuple[CompiledFrame, ...]:
    return ctx.live.compile.frames


def frame_id(compile_id: object) -> int | None:
    """``"3/1"`` -> 3."""
    m = re.match(r"^(?:\[\d+\])?(\d+)/\d+", str(compile_id or ""))
    return int(m.group(1)) if m else None


def user_rows(rows: Iterable[GraphBreak | Recompile]) -> list[dict[str, Any]]:
    """run.json rows (graph breaks, recompiles) in the user's own files, as the detectors'
    working rows (their run.json keys, as the rows they build from the trace)."""
    return [record.dump(r) for r in rows if isinstance(r.file, str) and is_user_file(r.file)]


def resume_frame_ids(trace: Trace, ctx: Context) -> set[int]:
    """Frame ids of resume functions: from run.json, else the regions around resume frames and
    the regions entered inside another frame's region (:func:`nested_frames`)."""
    ids = {fid for r in run_frames(ctx) if r.resume and (fid := frame_id(r.compile_id)) is not None}
    if ids:
        return ids
    return _around_resume_frames(trace) | set(nested_frames(trace))


def nested_frames(trace: Trace) -> dict[int, int]:
    """Per compiled frame entered inside a region of another frame (``Torch-Compiled Region:
    1/0`` inside ``0/0``, on one thread; in the steady steps): its entries. Code that breaks
    the graph runs in Python and calls the rest of the function, a resume function compiled as
    a frame of its own, from inside the first frame's region: one entry per break, with or
    without Python stacks."""
    reg = regions(trace)
    if not len(reg):
        return {}
    ops = trace.cpu_ops
    parent = ops["parent_idx"].to_numpy()
    frame_of = np.full(len(ops), -1, dtype=np.int64)
    frame_of[reg["row"].to_numpy()] = reg["frame"].to_numpy()
    out: dict[int, int] = {}
    for row, f in zip(reg["row"].to_numpy(), reg["frame"].to_numpy(), strict=True):
        p = parent[row]
        while p >= 0 and frame_of[p] < 0:  # the innermost region around it
            p = parent[p]
        if p >= 0 and frame_of[p] != f:
            out[int(f)] = out.get(int(f), 0) + 1
    return out


def _around_resume_frames(trace: Trace) -> set[int]:
    """Frame ids of the innermost regions around resume functions' Python frames."""
    reg, rf = regions(trace), resume_frames(trace)
    if not len(reg) or not len(rf):
        return set()
    out: set[int] = set()
    for t in unique_ints(rf["tid"].to_numpy()):
        g = reg[reg["tid"].to_numpy() == t].sort_values("ts_ns", kind="stable")
        ts = rf.loc[rf["tid"] == t, "ts_ns"].to_numpy()
        # the innermost region that started before the frame and encloses it
        i = np.searchsorted(g["ts_ns"].to_numpy(), ts, side="right") - 1
        for k, at in zip(i, ts, strict=True):
            while k >= 0 and g["end_ns"].to_numpy()[k] < at:
                k -= 1
            if k >= 0:
                out.add(int(g["frame"].to_numpy()[k]))
    return out


def lookups(trace: Trace) -> pd.DataFrame:
    """The cache lookups (guard checks) in the steady steps: tid, ts_ns, end_ns, step."""
    ops = trace.cpu_ops
    if not len(ops):
        return pd.DataFrame(columns=["tid", "ts_ns", "end_ns", "step"])
    m = (ops["name"].astype(str).to_numpy() == LOOKUP) & (ops["step"].to_numpy() >= 0)
    return ops.loc[m, ["tid", "ts_ns", "end_ns", "step"]].reset_index(drop=True)


def compile_in_steps(trace: Trace) -> pd.DataFrame:
    """Compile ranges (outermost) inside the steady steps, with the compile id dynamo
    annotated inside each (``frame``, ``attempt``; -1 when none, as for the backward graph
    compiled at the first backward): ts_ns, end_ns, dur_ns, tid, frame, attempt, step."""
    ev = one_time_events(trace)
    ev = ev[ev["kind"] == "compile"]
    cols = ["ts_ns", "end_ns", "dur_ns", "tid", "frame", "attempt", "step"]
    if not len(ev):
        return pd.DataFrame(columns=cols)
    st = trace.steps
    ts = ev["ts_ns"].to_numpy()
    i = np.searchsorted(st["ts_ns"].to_numpy(), ts, side="right") - 1
    inside = (i >= 0) & (ts < st["end_ns"].to_numpy()[np.clip(i, 0, None)])
    step = st["step"].to_numpy()[np.clip(i, 0, None)][inside]
    ev = ev[inside]
    if not len(ev):
        return pd.DataFrame(columns=cols)
    tids = []
    for src, row in zip(ev["source"], ev["row"], strict=True):
        tbl = trace.cpu_ops if src == "cpu_ops" else trace.annotations
        tids.append(int(tbl["tid"].iloc[int(row)]) if src != "runtime" else -1)
    an = trace.annotations
    ids = an["name"].astype(str).str.extract(_COMPILE_ID_RE) if len(an) else None
    has_id = ids[0].notna().to_numpy() if ids is not None else np.zeros(0, bool)
    an_ts = an["ts_ns"].to_numpy()[has_id] if len(an) else np.zeros(0, np.int64)
    frames, attempts = [], []
    for s, e in zip(ev["ts_ns"], ev["end_ns"], strict=True):
        f = a = -1
        # dynamo annotates the id at the start of its outer "dynamo" range, or just before
        # it: the first id inside the range, else the last one shortly before
        inside = np.flatnonzero((an_ts >= s) & (an_ts < e))
        before = np.flatnonzero((an_ts >= s - ID_LEAD_NS) & (an_ts < s))
        pick = inside[:1] if len(inside) else before[-1:]
        if ids is not None and len(pick):
            k = int(np.flatnonzero(has_id)[pick[0]])
            f, a = int(ids[0].iloc[k]), int(ids[1].iloc[k])
        frames.append(f)
        attempts.append(a)
    return pd.DataFrame(
        {
            "ts_ns": ev["ts_ns"].to_numpy(),
            "end_ns": ev["end_ns"].to_numpy(),
            "dur_ns": ev["dur_ns"].to_numpy(),
            "tid": tids,
            "frame": frames,
            "attempt": attempts,
            "step": step,
        }
    )


Advice = tuple[tuple[re.Pattern[str], str], ...]  # (pattern over a reason, what to do)


def advice_for(table: Advice, text: str, default: str) -> str:
    """The advice of the first pattern in ``table`` that ``text`` (a break's or a failed
    guard's reason) matches, else ``default``."""
    return next((words for rx, words in table if rx.search(text)), default)


def location(row: dict[str, Any], label: str) -> Location | None:
    file, line = row.get("file"), row.get("line")
    if not isinstance(file, str) or not isinstance(line, int):
        return None
    return Location(file, line, label, int(row.get("count") or 1))
