"""Trace quality: parts of the timeline the trace does not hold, so no figure may rest on them.

- **Waits on GPU work the trace does not show** (:mod:`advisor.derive.untraced`): a wait on
  the device that ends long after every GPU activity it could wait for, or that waits with the
  GPU idle for work that starts late: the trace is incomplete there (likely cause: a graph
  replay under a profiler that does not trace into graphs). Said first; GPU busy %, the bound
  and the savings leave that time out.
- **CUDA-graph replays with few recorded kernels.** CUPTI often records only some of the
  kernels of a graph replay (``cudaGraphLaunch``/``hipGraphLaunch``): the replay's span (its
  first recorded kernel's start to its last one's end) then looks mostly idle although the
  graph ran there. Replays whose recorded kernels cover less than ``GRAPH_MIN_COVER`` of their
  span are *affected spans*: busy %, gpu-idle's split and overlap are computed outside them.
- **Dropped events.** Events the loader skipped (missing or wrong-typed fields, negative
  durations), and launch calls whose GPU work is not in the trace (flows with no target).
- **Graph capture** (:mod:`advisor.derive.kind`): launch calls inside stream-capture ranges
  record a graph and run nothing; a window made of them has capture timings, not steady state.
- **Events that outlive the recording** (:mod:`advisor.trace.window`): host ranges cut at the
  recording's end, or left out when they start after it; said only when a step reaches the
  recording's end or the trace has no step markers (otherwise no figure rests on them).
- **GPU activity before its launch** (by more than ``EARLY_TOL_NS``): the GPU's and the host's
  clocks disagree.
- **Communication known by behaviour** (:func:`advisor.derive.comm.comm_by_behaviour`): kernels
  taken for communication by how they run, not by a library's name, are named.
- **The harness's own syncs** inside the steps (:mod:`advisor.derive.harness`: torch.profiler
  stopping, timing syncs around the measured loop), when they hold the host at least
  ``HARNESS_MIN_SHARE`` of the steps: no saving rests on them.

Between ranks (several traces), clock skew is found where the same collective's ends disagree by
more than its duration (:func:`rank_skew`). How to get a complete trace: profile a window with
CUDA graphs off, or use Nsight Systems with ``--cuda-graph-trace=node``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from advisor.derive.comm import comm_by_behaviour
from advisor.derive.harness import harness_calls
from advisor.derive.kind import trace_kind
from advisor.derive.runtime import GPU_WORK_CALL_PARTS, KERNEL_LAUNCH_RE, in_capture
from advisor.derive.timeline import covered_by, union
from advisor.derive.untraced import untraced
from advisor.derive.waits import waits
from advisor.trace.model import Trace
from advisor.trace.names import name_flags

GRAPH_MIN_COVER = 0.5  # recorded kernels covering less of a replay's span: part is missing
LOST_LAUNCH_MIN_SHARE = 0.05  # launch calls without their GPU work from this share...
LOST_LAUNCH_MIN_COUNT = 10  # ...and this count
SKEW_TOL_NS = 1_000_000  # ends of one collective agree this well once the offset is removed
HARNESS_MIN_SHARE = 0.01  # harness syncs holding the host this share of the steps: say so
EARLY_TOL_NS = 10_000  # GPU work starting this much before its launch call: clocks disagree
COMPLETE = (
    "profile a window with CUDA graphs off (e.g. torch.compile without "
    '"reduce-overhead", or before graph capture), or use Nsight Systems with '
    "--cuda-graph-trace=node"
)


@dataclass(frozen=True)
class Issue:
    what: str
    effect: str
    kind: str  # "untraced", "graph", "capture", "dropped", "window", "lost-launch", "clock",
    # "harness", "header", "comm-role"
    span_starts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    span_ends: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def to_dict(self) -> dict[str, str]:
        return {"what": self.what, "effect": self.effect}


def trace_quality(trace: Trace) -> list[Issue]:
    """What this trace is missing (computed once per trace)."""
    return list(trace.memo("quality.issues", lambda: tuple(_issues(trace))))


def timeline_complete(trace: Trace, but: tuple[str, ...] = ()) -> bool:
    """The trace recorded the whole GPU timeline: no waits on work it does not show, no
    CUDA-graph replays with unrecorded kernels, no launch calls without their GPU work, no
    events dropped while loading (``but``: the kinds of gap not counted)."""
    holes = {"untraced", "graph", "lost-launch", "dropped"} - set(but)
    return not any(i.kind in holes for i in trace_quality(trace))


def affected_spans(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """The union of the time ranges whose GPU timeline is incomplete (disjoint, sorted)."""
    parts = [i for i in trace_quality(trace) if len(i.span_starts)]
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return union(
        np.concatenate([i.span_starts for i in parts]), np.concatenate([i.span_ends for i in parts])
    )


def _issues(trace: Trace) -> list[Issue]:
    out = []
    u = _untraced(trace)  # first: the figures cannot claim what the trace does not show
    if u is not None:
        out.append(u)
    g = _graph_replays(trace)
    if g is not None:
        out.append(g)
    if trace.meta.skipped_events:
        out.append(
            Issue(
                f"{trace.meta.skipped_events:,} trace events were dropped while loading (missing "
                "or wrong-typed fields, negative durations).",
                "Figures do not include them; the rest of the trace is unaffected.",
                "dropped",
            )
        )
    cap = _capture(trace)
    if cap is not None:
        out.append(cap)
    late = _outlived(trace)
    if late is not None:
        out.append(late)
    lost = _lost_launches(trace)
    if lost is not None:
        out.append(lost)
    early = _before_launch(trace)
    if early is not None:
        out.append(early)
    harness = _harness(trace)
    if harness is not None:
        out.append(harness)
    comm = comm_by_behaviour(trace)
    if comm is not None:
        out.append(Issue(*comm, "comm-role"))
    out += _distributed_info(trace)
    return out


def _distributed_info(trace: Trace) -> list[Issue]:
    """distributedInfo values that are no rank or world size (ignored when loading)."""
    raw = trace.meta.distributed or {}
    out = []
    for key, kept in (("rank", trace.meta.rank), ("world_size", trace.meta.world_size)):
        value = raw.get(key)
        if value is not None and kept is None:
            shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
            out.append(
                Issue(
                    f"distributedInfo.{key} is {shown}, not a {key.replace('_', ' ')}: ignored.",
                    "The rank comes from the file name when it has one; nothing else changes.",
                    "header",
                )
            )
    return out


def _harness(trace: Trace) -> Issue | None:
    n, wait_ns = harness_calls(trace)
    steps_ns = int(trace.steps["dur_ns"].sum()) if len(trace.steps) else 0
    if not n or wait_ns < HARNESS_MIN_SHARE * steps_ns:
        return None
    return Issue(
        f"{n} synchronize call(s) inside the steps come from the measuring harness (the "
        f"profiler starting or stopping, or timing syncs before the first or after the last "
        f"GPU work of the window) and hold the host {wait_ns / 1e6:.2f} ms.",
        "No saving is claimed for them: removing them changes the measurement, not the program.",
        "harness",
    )


def _untraced(trace: Trace) -> Issue | None:
    """The untraced waits inside the steps (:mod:`advisor.derive.untraced`), with the likely
    cause."""
    u = untraced(trace)
    st = trace.steps
    if not len(u) or not len(st):
        return None
    lo, hi = st["ts_ns"].to_numpy(np.int64), st["end_ns"].to_numpy(np.int64)
    ss, se = union(u.ts_ns, u.end_ns)
    inside = covered_by(lo, hi, ss, se)  # (the steps are disjoint and sorted)
    keep = inside > 0
    if not keep.any():
        return None
    per_step = float(inside.sum()) / 1e6 / len(st)
    share = 100.0 * float(inside.sum()) / float((hi - lo).sum())
    names = trace.runtime["name"].astype(str).to_numpy()
    calls = sorted({names[r] for r in waits(trace).rows[u.by]})
    what_calls = ", ".join(calls[:3])
    past = u.before < 0
    if past.any() and u.graph[past].any():
        why = (
            f"wait(s) on the device ({what_calls}) end after every GPU activity they could "
            "wait for, after a CUDA/HIP graph launch: the trace is missing GPU work, most "
            "likely the graph's kernels (some profiler versions do not trace into graphs)"
        )
    elif past.any():
        why = (
            f"wait(s) on the device ({what_calls}) end after every GPU activity they could "
            "wait for, with the GPU idle: the trace is missing GPU work (another process on "
            "the GPU, a stream or device the profiler did not record)"
        )
    else:
        why = (
            f"wait(s) ({what_calls}) hold the host with the GPU idle until the work they wait "
            "for starts, and nothing recorded explains the delay: they wait on something the "
            "trace does not show"
        )
    return Issue(
        f"{int(keep.sum())} {why}: {per_step:.2f} ms per step ({share:.0f}% of the steps).",
        "That time is neither the host's work nor the GPU's: GPU busy % is measured outside "
        "it, the bound shows it apart (untraced) and no saving rests on it; findings that rest "
        f"on the GPU timeline have lower confidence. For a complete trace, {COMPLETE}.",
        "untraced",
        ss,
        se,
    )


def _graph_replays(trace: Trace) -> Issue | None:
    rt = trace.runtime
    if not len(rt):
        return None
    rows = np.flatnonzero(name_flags(rt["name"], lambda n: "GraphLaunch" in n))
    if not len(rows):
        return None
    act = trace.gpu_activity()
    li = act["launch_idx"].to_numpy()
    sel = np.isin(li, rows)
    a = act[sel]
    if not len(a):
        return Issue(
            f"{len(rows)} CUDA-graph replays (cudaGraphLaunch) have no recorded GPU work at all.",
            "The GPU work of the graphs is missing from the timeline: "
            f"idle time around them is not measured idle. For a complete trace, "
            f"{COMPLETE}.",
            "graph",
        )
    grp = a.groupby(a["launch_idx"].to_numpy(), sort=True)
    lo, hi = grp["ts_ns"].min().to_numpy(), grp["end_ns"].max().to_numpy()
    n = grp.size().to_numpy()
    bs, be = union(a["ts_ns"].to_numpy(), a["end_ns"].to_numpy())
    cov = covered_by(bs, be, lo, hi)
    span = hi - lo
    share = float(cov.sum()) / float(span.sum()) if span.sum() > 0 else 1.0
    bad = cov < GRAPH_MIN_COVER * np.maximum(span, 1)
    if share >= GRAPH_MIN_COVER and not bad.any():
        return None
    ss, se = union(lo[bad], hi[bad])
    return Issue(
        f"{len(rows)} CUDA-graph replays (cudaGraphLaunch) show only {int(n.min())}-{int(n.max())} "
        f"recorded kernels each; the recorded kernels cover {100 * share:.0f}% of the replay "
        f"spans ({float(span.sum()) / 1e6:.1f} ms): CUPTI did not record the rest of the graphs.",
        f"GPU busy %, gpu-idle's idle split and communication overlap are computed outside "
        f"the {len(ss)} affected span(s) ({float(np.sum(se - ss)) / 1e6:.1f} ms), and findings "
        f"that rest on the GPU timeline have lower confidence. For a complete trace, "
        f"{COMPLETE}.",
        "graph",
        ss,
        se,
    )


def _capture(trace: Trace) -> Issue | None:
    kind = trace_kind(trace)
    if kind.kind not in ("capture", "mixed") or "stream capture" not in kind.why:
        return None
    return Issue(
        f"graph capture: timings are not steady state ({kind.why}).",
        "Capture time is one-off overhead: no per-step saving is claimed from it. Profile the "
        "replays (after capture) for steady-state figures.",
        "capture",
    )


def _was(n: int) -> str:
    return "was" if n == 1 else "were"


def _outlived(trace: Trace) -> Issue | None:
    """Host events cut at the recording's end, said only when that changes a figure: when a
    step reaches the recording's end (its time there is cut), or the trace has no step
    markers (its one step ends with the recording). Ranges that outlive the last step (the
    optimizer step that the window's stop falls in) change nothing the report shows."""
    w = trace.meta.window
    if not w.clipped and not w.dropped or w.end_ns is None:
        return None
    st = trace.steps
    if len(st) and not trace.meta.synthetic_steps and int(st["end_ns"].max()) < w.end_ns:
        return None
    parts = []
    if w.clipped:
        parts.append(f"{w.clipped:,} ran past it and {_was(w.clipped)} cut there")
    if w.dropped:
        parts.append(
            f"{w.dropped:,} start{'s' if w.dropped == 1 else ''} after it and "
            f"{_was(w.dropped)} left out"
        )
    longest = ""
    if w.overruns:
        name, ts, end = w.overruns[0]
        longest = f"; the longest, {name}, ran {(end - w.end_ns) / 1e6:,.1f} ms past it"
    n = w.clipped + w.dropped
    events = "1 host event outlives" if n == 1 else f"{n:,} host events outlive"
    return Issue(
        f"{events} the recording window (it ends at {w.end_ns / 1e6:,.3f} ms, {w.source}; "
        f"{'it reaches' if n == 1 else 'they reach'} {w.latest_ns / 1e6:,.1f} ms): "
        + " and ".join(parts)
        + longest
        + ".",
        "The trace did not record that time: steps and figures end with the recording.",
        "window",
    )


def _lost_launches(trace: Trace) -> Issue | None:
    """Launch calls whose GPU work the trace should hold and does not. Not counted: calls
    inside stream capture (they record graph nodes; nothing runs), graph launches (see
    ``_graph_replays``), and copy/memset calls with GPU work recorded after them (a call that
    queues nothing, such as a zero-byte memset inside a cuBLASLt matmul, has no device record;
    a full profiler buffer or a window that ended first loses everything after a point)."""
    rt = trace.runtime
    if not len(rt):
        return None
    names = rt["name"]
    is_launch = name_flags(names, lambda n: any(p in n for p in GPU_WORK_CALL_PARTS))
    is_launch &= ~name_flags(names, lambda n: "GraphLaunch" in n)
    linked = np.zeros(len(rt), dtype=bool)
    for df in (trace.kernels, trace.memcpy):
        li = df["launch_idx"].to_numpy()
        linked[li[li >= 0]] = True
    ts = rt["ts_ns"].to_numpy()
    unlinked = is_launch & ~linked & ~in_capture(trace, rt["tid"].to_numpy(), ts)
    kernel = name_flags(names, lambda n: KERNEL_LAUNCH_RE.match(n) is not None)
    last = ts[linked].max() if linked.any() else np.iinfo(np.int64).min
    lost = unlinked & (kernel | (ts > last))
    n = int(lost.sum())
    total = int((is_launch & (linked | lost)).sum())
    if n < LOST_LAUNCH_MIN_COUNT or n < LOST_LAUNCH_MIN_SHARE * total:
        return None
    return Issue(
        f"{n:,} of {total:,} launch calls have no GPU work in the trace (flows with no target).",
        "Their kernels or copies were not recorded (the profiler's buffer filled, or the window "
        "ended first): GPU busy time is undercounted there.",
        "lost-launch",
    )


def _before_launch(trace: Trace) -> Issue | None:
    rt = trace.runtime
    if not len(rt):
        return None
    rts = rt["ts_ns"].to_numpy()
    n = 0
    worst = 0
    for df in (trace.kernels, trace.memcpy):
        li = df["launch_idx"].to_numpy()
        m = li >= 0
        early = rts[li[m]] - df["ts_ns"].to_numpy()[m]
        n += int((early > EARLY_TOL_NS).sum())
        worst = max(worst, int(early.max()) if len(early) else 0)
    if n == 0:
        return None
    return Issue(
        f"{n:,} GPU activities start before the call that launched them (up to "
        f"{worst / 1e6:.3f} ms): the GPU's and the host's clocks disagree.",
        "Launch delays and host-GPU waits near them are unreliable by that much.",
        "clock",
    )


def rank_skew(ends_ns: np.ndarray, dur_ns: np.ndarray, ranks: list[int]) -> Issue | None:
    """Clock skew between ranks: copies of the same collective (columns, matched across ranks)
    end together on a common clock, so a consistent offset of one rank's ends (rows), larger
    than the collectives last, is its clock's. Inconsistent differences (collectives of other
    process groups paired by mistake) say nothing and are not reported."""
    if ends_ns.shape[0] < 2 or ends_ns.shape[1] == 0:
        return None
    rel = ends_ns - np.median(ends_ns, axis=0, keepdims=True)
    off = np.median(rel, axis=1)
    consistent = np.abs(rel - off[:, None]) <= SKEW_TOL_NS
    gap = float(off.max() - off.min())
    if np.mean(consistent.all(axis=0)) <= 0.5 or gap <= float(np.median(dur_ns)):
        return None
    far = int(np.argmax(np.abs(off)))
    return Issue(
        f"The ranks' clocks disagree: the same collectives end {gap / 1e6:.3f} ms apart, more "
        f"than they last (rank {ranks[far]} is {float(off[far]) / 1e6:+.3f} ms off the "
        "others' median).",
        "Cross-rank arrival times are unreliable by that much; straggler relies on the "
        "collectives' durations, which need no common clock; comm-overlap aligns the ranks on "
        "the collectives' ends.",
        "clock",
    )
