"""Work the measuring harness does, not the program being measured.

A profiled window also records what the profiler and a benchmark loop do around the user's
work. No fix to the user's program removes it, so no saving may rest on it:

- **The profiler's own frames** (:data:`HARNESS_FRAMES`, the one list of library frames the
  advisor treats as harness): ``torch.profiler``'s ``start``/``stop``/``step`` and the
  autograd profiler's context manager synchronize the device to flush the trace, and the
  call can fall inside the last step (a server that stops the profiler from its event loop).
  Frames are matched by time on the call's thread, not through the trace's parent links
  (which some tracers get wrong for frames opened while the profiler stops).
- **Timing syncs around the repeated call**: an explicit ``synchronize()`` that launches
  nothing and comes before the first GPU work of the measured window or after its last one
  brackets the loop a benchmark times; it is not part of the loop.

:func:`harness_syncs` marks those synchronize calls (the sync-point and blocking-copy checks
leave them out, ``heuristics/_sync_roles.py``); :func:`harness_calls` counts them for
``run.trace_quality``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from advisor.arrays import unique_ints
from advisor.derive.runtime import GPU_WORK_CALL_PARTS, SYNC_CALL_RE
from advisor.derive.timeline import in_spans, union
from advisor.trace.model import Trace
from advisor.trace.names import name_flags

# (file suffix, functions, why): the only library frames treated as the harness's own work
HARNESS_FRAMES: tuple[tuple[str, frozenset[str], str], ...] = (
    (
        "torch/profiler/profiler.py",
        frozenset(
            {"start", "stop", "step", "__enter__", "__exit__", "start_trace", "stop_trace"}
            | {"_transit_action"}
        ),
        "torch.profiler starting, stepping or stopping: it synchronizes the device to flush "
        "the trace",
    ),
    (
        "torch/autograd/profiler.py",
        frozenset({"__enter__", "__exit__", "_start_trace"}),
        "the autograd profiler entering or leaving its context (stop synchronizes the device)",
    ),
)


def harness_spans(trace: Trace) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per thread id: the disjoint, sorted time ranges a harness frame runs in."""
    return trace.memo("harness.spans", lambda: _spans(trace))


def _spans(trace: Trace) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    fr = harness_frames(trace)
    if not len(fr):
        return {}
    ts, end, tid = (fr[c].to_numpy() for c in ("ts_ns", "end_ns", "tid"))
    return {int(t): union(ts[tid == t], end[tid == t]) for t in unique_ints(tid)}


def harness_frames(trace: Trace) -> pd.DataFrame:
    """The harness frames of the trace, outermost on their thread: tid, ts_ns, end_ns, what
    (the library and the function: ``torch.profiler __enter__``), by start time."""
    return trace.memo("harness.frames", lambda: _frames(trace))


def _frames(trace: Trace) -> pd.DataFrame:
    py = trace.python
    cols = ["tid", "ts_ns", "end_ns", "what"]
    if not len(py):
        return pd.DataFrame(columns=cols)
    files = py["file"].astype(str).str.replace("\\", "/", regex=False).to_numpy()
    funcs = py["function"].astype(str).to_numpy()
    what = np.full(len(py), "", dtype=object)
    for suffix, names, _ in HARNESS_FRAMES:
        lib = suffix.removesuffix(".py").replace("/", ".").removesuffix(".profiler.profiler")
        lib += ".profiler" if not lib.endswith(".profiler") else ""
        for i in np.flatnonzero(
            np.fromiter(
                (f.endswith(suffix) and fn in names for f, fn in zip(files, funcs, strict=True)),
                dtype=bool,
                count=len(py),
            )
        ):
            what[i] = f"{lib} {funcs[i]}"
    hit = np.flatnonzero(what != "")
    fr = pd.DataFrame(
        {
            "tid": py["tid"].to_numpy()[hit],
            "ts_ns": py["ts_ns"].to_numpy()[hit],
            "end_ns": py["end_ns"].to_numpy()[hit],
            "what": what[hit],
        }
    ).sort_values(["tid", "ts_ns", "end_ns"], ascending=[True, True, False], kind="stable")
    prev = fr.groupby("tid", sort=False)["end_ns"].transform(
        lambda e: np.maximum.accumulate(np.r_[np.iinfo(np.int64).min, e.to_numpy()[:-1]])
    )
    out = fr[fr["ts_ns"].to_numpy() >= prev.to_numpy()]
    return out.sort_values("ts_ns", kind="stable").reset_index(drop=True)


def in_harness(trace: Trace, tid: np.ndarray, ts_ns: np.ndarray) -> np.ndarray:
    """Whether each moment (thread id, time) falls inside a harness frame on that thread."""
    return in_spans(harness_spans(trace), tid, ts_ns)


def launch_calls(trace: Trace) -> np.ndarray:
    """Rows of ``trace.runtime`` that put GPU work in a queue (kernel and graph launches, async
    copies and memsets) inside the steps, by start time."""
    return trace.memo("harness.launches", lambda: _launches(trace))


def _launches(trace: Trace) -> np.ndarray:
    rt = trace.runtime
    if not len(rt):
        return np.zeros(0, dtype=np.int64)
    q = name_flags(rt["name"], lambda n: any(p in n for p in GPU_WORK_CALL_PARTS))
    rows = np.flatnonzero(q & (rt["step"].to_numpy() >= 0))
    return rows[np.argsort(rt["ts_ns"].to_numpy()[rows], kind="stable")]


def launch_span(trace: Trace) -> tuple[int, int] | None:
    """(start of the first, end of the last) :func:`launch_calls`; None when there is none."""
    rows = launch_calls(trace)
    if not len(rows):
        return None
    rt = trace.runtime
    return int(rt["ts_ns"].to_numpy()[rows[0]]), int(rt["end_ns"].to_numpy()[rows].max())


def harness_syncs(trace: Trace) -> np.ndarray:
    """Per ``trace.runtime`` row: a device-waiting call (synchronize) made by the harness:
    inside a harness frame, or an explicit synchronize (issued by no operator) that ends before
    the first GPU work launched in the steps or starts after the last."""
    return trace.memo("harness.syncs", lambda: _syncs(trace))


def _syncs(trace: Trace) -> np.ndarray:
    rt = trace.runtime
    out = np.zeros(len(rt), dtype=bool)
    if not len(rt):
        return out
    sync = name_flags(rt["name"], lambda n: bool(SYNC_CALL_RE.match(n)))
    rows = np.flatnonzero(sync)
    if not len(rows):
        return out
    ts, end = rt["ts_ns"].to_numpy()[rows], rt["end_ns"].to_numpy()[rows]
    out[rows] = in_harness(trace, rt["tid"].to_numpy()[rows], ts)
    span = launch_span(trace)
    if span is not None:
        explicit = rt["op_idx"].to_numpy()[rows] < 0
        out[rows] |= explicit & ((end <= span[0]) | (ts >= span[1]))
    return out


def harness_calls(trace: Trace) -> tuple[int, int]:
    """(count, total ns) of the harness's synchronize calls (:func:`harness_syncs`) inside the
    steps."""
    rt = trace.runtime
    if not len(rt):
        return 0, 0
    rows = np.flatnonzero(harness_syncs(trace) & (rt["step"].to_numpy() >= 0))
    dur = rt["end_ns"].to_numpy()[rows] - rt["ts_ns"].to_numpy()[rows]
    return len(rows), int(dur.sum())
