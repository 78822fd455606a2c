"""Host time before a step's first launch, outside any operator: Python the GPU waits for.

Per steady step, the thread that issues the step's first GPU work (a kernel, copy or graph
launch onto the main device) runs from the step's start to that launch; the part of that time
spent outside every operator and runtime call, while the device is idle, is host work the GPU
waits for before it has anything to do: a serving engine's scheduler and batch bookkeeping, a
training loop's logging and scheduler steps, hooks. It is shared by ``gpu-idle`` (its *host
before the first launch* share, and the claim that removes it); not a detector.

Time another finding already explains is left out: DataLoader fetches, quiet Python frames
(``host-preprocessing``), allocator calls, and the idle time a sync caused (the spans passed in).
The frames that ran are read from ``python_function`` events where the trace has them (their
time inside these spans, outside their own children: where the host actually was).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from advisor.arrays import unique_ints
from advisor.derive.kind import TraceKind
from advisor.derive.timeline import covered_by, subtract, union
from advisor.detect.registry import Context
from advisor.findings import Evidence, Location
from advisor.replay.fixes import ShrinkHost
from advisor.trace.model import Trace
from advisor.trace.names import name_flags

from ._per_step import fmt_ms
from ._preprocess import parent_rows

_EMPTY = np.zeros(0, dtype=np.int64)
TOP_FRAMES = 3


@dataclass(frozen=True)
class PreLaunch:
    """The host spans before each step's first launch (per thread), the frames that ran in
    them (label, ns, most first), their source lines, and whether the steps launch graphs."""

    starts: np.ndarray
    ends: np.ndarray
    tids: np.ndarray
    frames: tuple[tuple[str, int], ...]
    locations: tuple[Location | None, ...]
    graphs: bool

    @property
    def total_ns(self) -> int:
        return int(np.sum(self.ends - self.starts))

    def fix(self, gpu_ns: int) -> ShrinkHost:
        """That host time overlapped with the GPU's work (``gpu_ns``, the steps' own): as much
        of it as that work can hide leaves the step (all of it when the GPU works at least as
        long); range: half of that."""
        hidden = min(1.0, gpu_ns / self.total_ns) if self.total_ns > 0 else 0.0
        return ShrinkHost(
            self.starts,
            self.ends,
            self.tids,
            keep=1.0 - hidden,
            low=1.0 - hidden / 2,
            label="the host work before the first launch overlapped with GPU work",
        )


def prelaunch(
    trace: Trace,
    ctx: Context,
    device: int,
    idle: tuple[np.ndarray, np.ndarray],
    taken: tuple[np.ndarray, np.ndarray],
) -> PreLaunch:
    """The spans of the module doc, within the device's ``idle`` gaps, less ``taken``."""
    act = trace.gpu_activity()
    rt = trace.runtime
    act = act[(act["device"] == device) & (act["launch_idx"] >= 0)]
    none = PreLaunch(_EMPTY, _EMPTY, _EMPTY, (), (), False)
    if not len(act) or not len(rt):
        return none
    li = act["launch_idx"].to_numpy()
    r_ts, r_end = rt["ts_ns"].to_numpy(), rt["end_ns"].to_numpy()
    r_tid, r_step = rt["tid"].to_numpy(), rt["step"].to_numpy()
    names = rt["name"].astype(str).to_numpy()
    graphs = any("GraphLaunch" in n for n in unique_ints(names[li]).tolist())
    ops = trace.cpu_ops
    not_step = (
        ~name_flags(ops["name"], lambda n: n.startswith("ProfilerStep#"))
        if len(ops)
        else np.zeros(0, dtype=bool)
    )
    starts, ends, tids = [], [], []
    for s, lo in zip(trace.steps["step"].tolist(), trace.steps["ts_ns"].tolist(), strict=True):
        mine = li[r_step[li] == s]
        if not len(mine):
            continue
        first = int(mine[np.argmin(r_ts[mine])])
        tid, hi = int(r_tid[first]), int(r_ts[first])
        s0, e0 = _clip(idle, lo, hi)
        busy_s = [r_ts[r_tid == tid], taken[0]]
        busy_e = [r_end[r_tid == tid], taken[1]]
        if len(ops):
            on = (ops["tid"].to_numpy() == tid) & not_step
            busy_s.append(ops["ts_ns"].to_numpy()[on])
            busy_e.append(ops["end_ns"].to_numpy()[on])
        s1, e1 = subtract(s0, e0, *union(np.concatenate(busy_s), np.concatenate(busy_e)))
        starts.append(s1)
        ends.append(e1)
        tids.append(np.full(len(s1), tid, dtype=np.int64))
    if not starts:
        return none
    st, en, td = (np.concatenate(x).astype(np.int64) for x in (starts, ends, tids))
    frames, at = _frames(trace, st, en, td)
    if not at:  # no frames: where the spans run, if the trace knows
        at = [(int(t), int(a)) for t, a in zip(td.tolist(), st.tolist(), strict=True)]
    locs = tuple(ctx.locator.at(t, a) for t, a in at)
    return PreLaunch(st, en, td, frames, locs, graphs)


_BUILTIN_RE = re.compile(r"^<built-in (?:method|function) (\w+)")
_PROFILER_RE = re.compile(r"_record_function_(?:enter|exit)|(^|/)torch/(autograd/)?profiler")


def _label(file: str, line: int, function: str) -> str | None:
    """A frame as ``file(line): function`` (a built-in as ``<built-in name>``); None for the
    profiler's own frames."""
    if _PROFILER_RE.search(file) or _PROFILER_RE.search(function):
        return None
    m = _BUILTIN_RE.match(function)
    if m:
        return f"<built-in {m.group(1)}>"
    return f"{file}({line}): {function}" if file and line >= 0 else function


def _clip(iv: tuple[np.ndarray, np.ndarray], lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    s, e = np.clip(iv[0], lo, hi), np.clip(iv[1], lo, hi)
    keep = e > s
    return s[keep].astype(np.int64), e[keep].astype(np.int64)


def _frames(
    trace: Trace, st: np.ndarray, en: np.ndarray, td: np.ndarray
) -> tuple[tuple[tuple[str, int], ...], list[tuple[int, int]]]:
    """The Python frames that ran in the spans: each frame's time inside them less its
    children's (where the host was), the largest first; and a moment inside one of each
    (thread, time), to name its source line."""
    py = trace.python
    if not len(py) or not len(st):
        return (), []
    ts, end, tid = (py[c].to_numpy() for c in ("ts_ns", "end_ns", "tid"))
    inside = np.zeros(len(py), dtype=np.int64)
    for t in unique_ints(td).tolist():
        m = np.flatnonzero(tid == t)
        us, ue = union(st[td == t], en[td == t])
        inside[m] = covered_by(us, ue, ts[m], np.maximum(end[m], ts[m]))
    par = parent_rows(py)
    own = inside.copy()
    has = (par >= 0) & (inside > 0)
    np.subtract.at(own, par[has], inside[has])
    own = np.maximum(own, 0)
    label = np.array(
        [
            _label(f, ln, fn)
            for f, ln, fn in zip(
                py["file"].astype(str).tolist(),
                py["line"].tolist(),
                py["function"].astype(str).tolist(),
                strict=True,
            )
        ],
        dtype=object,
    )
    own[np.array([x is None for x in label.tolist()], dtype=bool)] = 0  # the profiler's own
    keep = np.flatnonzero(own > 0)
    if not len(keep):
        return (), []
    by: dict[str, int] = {}
    where: dict[str, tuple[int, int]] = {}
    for lab, ns, r in zip(label[keep].tolist(), own[keep].tolist(), keep.tolist(), strict=True):
        by[lab] = by.get(lab, 0) + int(ns)
        where.setdefault(lab, (int(tid[r]), int(ts[r]) + 1))
    top = sorted(by.items(), key=lambda kv: -kv[1])[:TOP_FRAMES]
    return tuple(top), [where[lab] for lab, _ in top]


PRELAUNCH_SNIPPET = (
    "# prepare step N+1 while the GPU runs step N: launch first, then do the bookkeeping\n"
    "out = step(batch)                 # launches (or replays the graph)\n"
    "next_batch = schedule_next()      # Python overlaps the GPU work\n"
    "result = out.tolist()             # read only when it is needed\n"
)

PRELAUNCH_ASSUMPTION = (
    "The host's Python before each step's first launch, outside every operator and runtime "
    "call while the GPU idles, is overlapped with the steps' GPU work: as much of it as that "
    "work can hide (all of it when the GPU works at least as long) leaves the step (range: half "
    "of that), what running it while the previous step computes gives back. "
)


def prelaunch_sentence(pl: PreLaunch, steps: int, gpu_ns: int) -> str:
    """The summary's sentence on the host time before the first launch (``gpu_ns``: the steps'
    own GPU work, which can hide it)."""
    ms = pl.total_ns / 1e6 / max(steps, 1)
    frames = f" (in {', '.join(f for f, _ in pl.frames[:2])})" if pl.frames else ""
    short = (
        f"; the steps' own GPU work ({fmt_ms(gpu_ns / 1e6 / max(steps, 1))} per step) can hide "
        "only that much of it"
        if gpu_ns < pl.total_ns
        else ""
    )
    return (
        f" Before each step's first launch the host runs {fmt_ms(ms)} of Python outside any "
        f"operator{frames} while the GPU has nothing to do{short}."
    )


def prelaunch_evidence(pl: PreLaunch, steps: int, trace: Trace) -> tuple[Evidence, ...]:
    """Evidence rows: the frames that ran before the first launch, most time first."""
    if not len(pl.starts):
        return ()
    ex = trace.to_trace_us(int(pl.starts[int(np.argmax(pl.ends - pl.starts))]))
    if not pl.frames:
        return (
            Evidence(
                "host time before the step's first launch, outside any operator (no Python "
                "frames in the trace: with_stack=True names them)",
                len(pl.starts),
                round(pl.total_ns / 1e6, 3),
                ex,
            ),
        )
    return tuple(
        Evidence(
            f"before the step's first launch: {label} ({fmt_ms(ns / 1e6 / max(steps, 1))} per step)",
            len(pl.starts),
            round(ns / 1e6, 3),
            ex,
        )
        for label, ns in pl.frames
    )


def prelaunch_advice(pl: PreLaunch, kind: TraceKind) -> str:
    """What to do about the host time before the first launch, by what the trace shows."""
    where = f" ({pl.frames[0][0]})" if pl.frames else ""
    if pl.graphs:
        head = (
            "The step's GPU work already runs as graphs; what the GPU waits for is the host's "
            f"Python before the first graph launch{where}. "
        )
    else:
        head = f"The GPU waits for the host's Python before the step's first launch{where}. "
    overlap = (
        "Overlap it with the previous step's GPU work: schedule the next batch while the "
        "current one runs (an engine's asynchronous scheduling, or preparing step N+1 before "
        "reading step N's results). "
        if kind.kind in ("serving", "inference")
        else "Overlap it with the previous step's GPU work (do it before waiting for that "
        "step's results, or in another thread). "
    )
    graph = (
        ""
        if pl.graphs
        else 'Capturing the whole step in a CUDA graph (`torch.compile(mode="reduce-overhead")`) '
        "removes the Python that issues the operators. "
    )
    return (
        head
        + overlap
        + graph
        + (
            "Move bookkeeping (logging, metrics, schedulers, hooks) off the step's path or run it "
            "every N steps."
        )
    )
