"""The step model: a dependency graph of the steady steps, built once per trace.

Nodes are the host's *runtime calls* that matter to the GPU (:class:`HostCalls`: launches of
kernels and copies, synchronizations, every call that waits for the device, and the tail of an
operator that waited where no recorded call did: :mod:`advisor.derive.waits`) and the GPU
activities
(:class:`GpuWork`: kernels, copies, memsets). Every other host time (Python, operator
dispatch, other runtime calls) is the *gap* before the next call on the same thread: host work,
replayed as measured unless a fix shrinks it.

Edges (each with an offset in ns), one builder each in :mod:`advisor.replay.edges`:

- **host order**: a call starts ``gap`` after the previous call on its thread ended;
- **hand-off**: a thread that sat idle while another thread of the process worked (the main
  thread during the autograd thread's backward, and back) starts when the other thread's last
  call before it ended, plus the measured delay;
- **launch**: a GPU activity starts no earlier than its launch call started plus the launch
  latency (correlation id; measured on work launched onto an idle stream);
- **stream order**: no earlier than the previous activity on its stream ended;
- **cross-stream wait**: an activity that started well after both of those, right after an
  activity on another stream of its device ended (cudaStreamWaitEvent / event waits), waits
  for that one;
- **wait**: a call that waits for the device (:mod:`advisor.derive.waits`: an explicit
  synchronize, a synchronous or pageable device-to-host copy, or a call of any name whose timing
  shows it waited: for its own work, a stream it touches, a slot in a full launch queue) ends at
  the later of its own cost and the end of the GPU work it waited for, plus the measured return
  time; a wait no recorded GPU work explains waits for an untraced wait, a GPU node of its own
  (:mod:`advisor.derive.untraced`).

The replayed window (:mod:`advisor.replay.structure`): every steady step is replayed, every
other node keeps its measured times; a thread's first call in a replayed
step starts ``gap`` after the step's start; the step boundaries follow the main thread's last
call before them (the anchors).

Each node's *binding* edge (the one that decided its measured start) carries the measured
offset; the others their natural minimum (the trace's launch latency, zero gap); :class:`Bind`
says which it is. Delays the
graph cannot explain stay as measured delays on the binding edge (``residual_ns``), so the
unchanged replay gives back the measured times; :func:`advisor.replay.engine.replay` with
``calibrated=False`` drops them, which measures how much of the step the graph explains.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from advisor.replay import edges
from advisor.replay.cache import ReplayCache
from advisor.replay.edges import NEG, Bind, Work
from advisor.replay.structure import (
    Steps,
    one_step_events,
    replay_order,
    replayed_window,
    step_keys,
    step_of,
    steps,
)
from advisor.trace.model import Trace

__all__ = [
    "Bind",
    "GpuWork",
    "Graph",
    "HostCalls",
    "Steps",
    "Work",
    "graph",
]


@dataclass(frozen=True, eq=False)
class HostCalls:
    """The host calls, in start order: a host node is an index into these arrays."""

    runtime_row: np.ndarray  # row of trace.runtime (-1: an operator's tail that waited)
    thread: np.ndarray  # thread code (per process and thread id)
    trace_tid: np.ndarray  # the trace's own thread id
    ts_ns: np.ndarray
    end_ns: np.ndarray
    fixed: np.ndarray  # bool: outside the replayed steps (kept at its measured times)
    origin_ns: np.ndarray  # start of its step (where a thread's first call in it is measured)
    # host order
    prev: np.ndarray  # the previous call on its thread in the replayed window, -1
    gap_ns: np.ndarray  # host work before the call (after prev's end, else after origin_ns)
    # hand-off
    handoff: np.ndarray  # the call on another thread it waited for, -1
    handoff_ns: np.ndarray  # the delay after that call's end
    slow_launch: np.ndarray  # bool: a launch call far slower than launches take
    # syncs, blocking copies, launches into a full queue
    waits: np.ndarray  # bool: it waits for GPU work
    awaited: np.ndarray  # the GPU activity it waits for, -1
    awaited_more: dict[int, list[int]]  # a device sync: the last activity of each other stream
    return_ns: np.ndarray  # its return time after the awaited work ended
    own_ns: np.ndarray  # its duration with nothing to wait for


@dataclass(frozen=True, eq=False)
class GpuWork:
    """The GPU activities, kernels then copies and memsets: a GPU node is an index into these
    arrays. Each edge is the node it comes from (-1: none) and its offset."""

    source: np.ndarray  # 0: trace.kernels, 1: trace.memcpy
    row: np.ndarray  # row in that table (sorted within a source)
    ts_ns: np.ndarray
    end_ns: np.ndarray
    stream: np.ndarray  # device * 2**32 + stream
    kind: np.ndarray  # Work
    fixed: np.ndarray  # bool: launched (else run) outside the replayed steps
    launch: np.ndarray  # launch edge: its launch call (host node)
    launch_ns: np.ndarray  # ...its start is this long after the call's start
    prev: np.ndarray  # stream order: the previous activity on its stream
    prev_ns: np.ndarray  # ...its start is this long after that one's end
    dep: np.ndarray  # cross-stream wait: the activity on another stream it waited for
    dep_ns: np.ndarray  # ...its start is this long after that one's end
    bind: np.ndarray  # Bind: the edge that decided its measured start
    residual_ns: np.ndarray  # the measured delay no edge explains (on the binding edge)
    step_key: np.ndarray  # replayed step that issued it * n_streams + stream code, -1
    n_streams: int


@dataclass(frozen=True, eq=False)
class Graph:
    """The step graph: host calls, GPU activities, the steps, and the replay order."""

    host: HostCalls
    gpu: GpuWork
    steps: Steps
    order: list[int]  # event codes: host start i, n_h + GPU j, n_h + n_g + sync end i
    order_one: list[int]  # the events of the step closest to the median only
    launch_latency_ns: int
    cache: ReplayCache = field(default_factory=ReplayCache, repr=False)

    @property
    def n_h(self) -> int:
        return len(self.host.ts_ns)

    @property
    def n_g(self) -> int:
        return len(self.gpu.ts_ns)

    def kernel_nodes(self, rows: np.ndarray) -> np.ndarray:
        """GPU node indices of ``trace.kernels`` rows (those in the graph)."""
        return self._nodes(0, rows)

    def memcpy_nodes(self, rows: np.ndarray) -> np.ndarray:
        return self._nodes(1, rows)

    def _nodes(self, src: int, rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        if rows.dtype == bool:
            rows = np.flatnonzero(rows)
        g = self.gpu
        idx = np.flatnonzero(g.source == src)
        pos = np.searchsorted(g.row[idx], rows)  # row is sorted within a source
        pos = np.clip(pos, 0, max(len(idx) - 1, 0))
        ok = (len(idx) > 0) & (g.row[idx[pos]] == rows) if len(idx) else np.zeros(0, bool)
        return idx[pos[ok]] if len(idx) else np.zeros(0, dtype=np.int64)

    def host_nodes(self, runtime_rows: np.ndarray) -> np.ndarray:
        """Host node indices of ``trace.runtime`` rows (those in the graph)."""
        rows = np.asarray(runtime_rows, dtype=np.int64)
        h = self.host
        o = np.argsort(h.runtime_row, kind="stable")  # (an operator's tail: row -1)
        sr = h.runtime_row[o]
        pos = np.clip(np.searchsorted(sr, rows), 0, max(self.n_h - 1, 0))
        ok = (sr[pos] == rows) & (rows >= 0) if self.n_h else np.zeros(0, bool)
        return o[pos[ok]]


def graph(trace: Trace) -> Graph:
    """The step graph of ``trace`` (a steady trace: see :func:`advisor.derive.steps.steady_trace`),
    built once."""
    return trace.memo("model.graph", lambda: _build(trace))


def _build(trace: Trace) -> Graph:
    """The graph: nodes, then each kind of edge (see the module doc), then the window."""
    if not len(trace.runtime) or not (len(trace.kernels) or len(trace.memcpy)):
        return _empty()
    g = edges.gpu_activities(trace)
    traced = g.source < 2  # (the untraced waits last)
    h = edges.host_calls(trace, g.launch_rt[traced])
    if not len(h.ts_ns):
        return _empty()
    prev, gap_ns = edges.host_order(h.thread, h.ts_ns, h.end_ns)
    handoff, handoff_ns = edges.handoffs(h, prev)
    gap_ns = np.where(handoff >= 0, 0, gap_ns)  # the thread waited for the other one
    g_prev = edges.stream_order(g.stream, g.ts_ns)
    prev_end = _end_of(g_prev, g.end_ns)
    launch, launch_ts, latency_ns = edges.launches(
        g.launch_rt, h.of_runtime, h.ts_ns, g.ts_ns, prev_end, traced
    )
    dep = edges.cross_stream(g, np.maximum(edges.after_launch(launch_ts, latency_ns), prev_end))
    b = edges.binding(g.ts_ns, launch_ts, latency_ns, prev_end, _end_of(dep, g.end_ns))
    # calls that wait for GPU work (advisor.derive.waits), and launches far slower than others
    issued_ns = np.where(launch >= 0, launch_ts, g.ts_ns)
    slow = edges.queue_backpressure(h)
    cw = edges.waits(trace, h, g)
    awaited, awaited_more, return_ns, own_ns = cw.awaited, cw.more, cw.return_ns, cw.own_ns
    # the replayed window and the steps
    st = trace.steps
    w = replayed_window(st, h.ts_ns, g.ts_ns, prev, gap_ns, handoff, launch)
    step_key, n_streams = step_keys(
        st, w.chosen, issued_ns, g.ts_ns, g.stream, w.gpu_fixed, launch >= 0
    )
    waits = awaited >= 0
    order = replay_order(
        h.thread,
        h.ts_ns,
        h.end_ns,
        w.host_fixed,
        waits,
        awaited,
        g.ts_ns,
        launch,
        w.gpu_fixed,
        g.stream,
    )
    s = steps(trace, st, w.chosen, h.thread, h.trace_tid, h.ts_ns, h.end_ns, g.end_ns, w.gpu_fixed)
    h_step = step_of(st, h.ts_ns)
    g_step = np.where(launch >= 0, h_step[np.clip(launch, 0, None)], step_of(st, issued_ns))
    g_step = np.where(step_key >= 0, step_key // n_streams, g_step)  # (work queued by a step)
    host = HostCalls(
        runtime_row=h.runtime_row,
        thread=h.thread,
        trace_tid=h.trace_tid,
        ts_ns=h.ts_ns,
        end_ns=h.end_ns,
        fixed=w.host_fixed,
        origin_ns=w.origin_ns,
        prev=w.prev,
        gap_ns=w.gap_ns,
        handoff=handoff,
        handoff_ns=handoff_ns,
        slow_launch=np.isin(np.arange(len(h.ts_ns)), slow),
        waits=waits,
        awaited=awaited,
        awaited_more=awaited_more,
        return_ns=return_ns,
        own_ns=own_ns,
    )
    gpu = GpuWork(
        source=g.source,
        row=g.row,
        ts_ns=g.ts_ns,
        end_ns=g.end_ns,
        stream=g.stream,
        kind=g.kind,
        fixed=w.gpu_fixed,
        launch=launch,
        launch_ns=b.launch_ns,
        prev=g_prev,
        prev_ns=b.prev_ns,
        dep=dep,
        dep_ns=b.dep_ns,
        bind=b.bind,
        residual_ns=b.residual_ns,
        step_key=step_key,
        n_streams=n_streams,
    )
    order_one = one_step_events(order, h_step, g_step, s.median_step)
    return Graph(host, gpu, s, order, order_one, latency_ns)


def _end_of(node: np.ndarray, end_ns: np.ndarray) -> np.ndarray:
    """The end of each edge's source node (NEG: no edge)."""
    return np.where(node >= 0, end_ns[np.clip(node, 0, None)], NEG)


def _empty() -> Graph:
    """The graph of a trace with nothing to replay (no host calls or no GPU work)."""

    def i64() -> np.ndarray:
        return np.zeros(0, dtype=np.int64)

    def no() -> np.ndarray:
        return np.zeros(0, dtype=bool)

    host = HostCalls(
        **{f: i64() for f in ("runtime_row", "thread", "trace_tid", "ts_ns", "end_ns")},
        **{f: i64() for f in ("origin_ns", "prev", "gap_ns", "handoff", "handoff_ns")},
        **{f: i64() for f in ("awaited", "return_ns", "own_ns")},
        fixed=no(),
        slow_launch=no(),
        waits=no(),
        awaited_more={},
    )
    gpu = GpuWork(
        **{f: i64() for f in ("source", "row", "ts_ns", "end_ns", "stream", "kind", "launch")},
        **{f: i64() for f in ("launch_ns", "prev", "prev_ns", "dep", "dep_ns", "bind")},
        **{f: i64() for f in ("residual_ns", "step_key")},
        fixed=no(),
        n_streams=1,
    )
    none = Steps(i64(), no(), -1, i64(), i64(), no(), -1, -1, -1)
    return Graph(host, gpu, none, [], [], -1)
