"""Waits on what the trace does not show: a host call waits for the device
(:mod:`advisor.derive.waits`) longer than any recorded GPU work explains, with the GPU idle.

Two shapes, each a stretch of at least ``UNTRACED_MIN_NS`` with the device running nothing the
trace recorded for most of it (``IDLE_SHARE``):

- **past the end of the recorded work**: a call that waits by the API's rules (a synchronize, a
  synchronous or pageable copy) returns long after every activity it could wait for ended (less
  its return time, at most ``WAIT_TOL_NS``). The device ran work the trace does not hold: the
  likely cause, when a CUDA/HIP graph was launched on the call's thread since its previous wait,
  is a graph replay recorded by a profiler that does not trace into graphs; else work the
  profiler did not record (another process, a stream or device outside the trace).
- **before the awaited work started**: the activity a call waits for started long after it could
  (its launch, the call's own start, the end of the device's previous activity) with nothing
  recorded on the device meanwhile: the call waited for something outside the trace.

Each stretch is an *untraced wait*: neither the host's work nor the GPU's measured work. The
replay holds it as GPU work of its own kind (``untraced`` in ``run.bound``), which no fix
shortens; GPU busy is measured outside it; ``run.trace_quality`` says so first, with the likely
cause (:mod:`advisor.derive.quality`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from advisor.arrays import unique_ints
from advisor.derive.runtime import GRAPH_LAUNCH_RE
from advisor.derive.timeline import covered_by, union
from advisor.derive.waits import WAIT_TOL_NS, Activities, How, Waits, activities, waits
from advisor.trace.model import Trace
from advisor.trace.names import name_flags

UNTRACED_MIN_NS = 1_000_000  # a wait this much longer than recorded work explains
IDLE_SHARE = 0.5  # ...with the device idle for at least this share of it


@dataclass(frozen=True, eq=False)
class Untraced:
    """The untraced waits, in start order."""

    ts_ns: np.ndarray
    end_ns: np.ndarray
    stream: np.ndarray  # the stream it holds up (device * 2**32 + stream)
    by: np.ndarray  # position in ``waits(trace).rows`` of the call that waited
    before: np.ndarray  # the activity it delays (-1: it ends the call's wait itself)
    graph: np.ndarray  # bool: a graph launch on the call's thread since its previous wait

    def __len__(self) -> int:
        return len(self.ts_ns)


def untraced(trace: Trace) -> Untraced:
    """The :class:`Untraced` waits of ``trace`` (see the module doc), once per trace."""
    return trace.memo("untraced.waits", lambda: _untraced(trace))


def _untraced(trace: Trace) -> Untraced:
    w = waits(trace)
    a = activities(trace)
    rt = trace.runtime
    out: list[tuple[int, int, int, int, int]] = []  # ts, end, stream, by, before
    if len(w.rows) and len(a.ts_ns):
        ts = rt["ts_ns"].to_numpy(np.int64)[w.rows]
        end = rt["end_ns"].to_numpy(np.int64)[w.rows]
        dev = a.stream >> 32
        busy = {int(d): union(a.ts_ns[dev == d], a.end_ns[dev == d]) for d in unique_ints(dev)}
        by_issue = np.argsort(a.issued_ns, kind="stable")
        for p in range(len(w.rows)):
            got = _one(p, w, a, ts, end, busy, by_issue)
            if got is not None:
                out.append(got)
    arr = np.asarray(out, dtype=np.int64).reshape(-1, 5)
    arr = arr[np.argsort(arr[:, 0], kind="stable")]
    return Untraced(
        ts_ns=arr[:, 0],
        end_ns=arr[:, 1],
        stream=arr[:, 2],
        by=arr[:, 3],
        before=arr[:, 4],
        graph=_after_graph_launch(trace, w.rows[arr[:, 3]]),
    )


def _one(
    p: int,
    w: Waits,
    a: Activities,
    ts: np.ndarray,
    end: np.ndarray,
    busy: dict[int, tuple[np.ndarray, np.ndarray]],
    by_issue: np.ndarray,
) -> tuple[int, int, int, int, int] | None:
    """The untraced wait of the ``p``-th waiting call, if any."""
    s, e = int(ts[p]), int(end[p])
    aw = int(w.awaited[p])
    if w.how[p] in (How.SYNC, How.COPY):  # waited past every activity it could wait for
        ends = [int(a.end_ns[j]) for j in [aw, *w.more.get(p, ())] if j >= 0]
        lo = max([s, *ends])
        hi = e - min(int(w.cost_ns[p]), WAIT_TOL_NS)
        if hi - lo >= UNTRACED_MIN_NS:
            st = _stream_of(aw, a, s, by_issue)
            if st is not None and _idle(busy, st >> 32, lo, hi):
                return lo, hi, st, p, -1
    if aw >= 0:  # the awaited work started long after it could, the device idle
        t = int(a.ts_ns[aw])
        d = int(a.stream[aw]) >> 32
        us, ue = busy.get(d, (np.zeros(0, np.int64), np.zeros(0, np.int64)))
        k = int(np.searchsorted(us, t, side="left")) - 1  # the device's busy stretch before
        ready = max(s, int(a.issued_ns[aw]), int(ue[k]) if k >= 0 else s)
        # (a busy stretch running into its start: ready >= t); the call waited meanwhile
        if min(t, e) - ready >= UNTRACED_MIN_NS:
            return ready, t, int(a.stream[aw]), p, aw
    return None


def _stream_of(aw: int, a: Activities, t: int, by_issue: np.ndarray) -> int | None:
    """The stream a wait holds up: its awaited activity's, else the last one issued before
    ``t`` (None: nothing was)."""
    if aw >= 0:
        return int(a.stream[aw])
    n = int(np.searchsorted(a.issued_ns[by_issue], t, side="left"))
    return int(a.stream[by_issue[n - 1]]) if n else None


def _idle(busy: dict[int, tuple[np.ndarray, np.ndarray]], dev: int, lo: int, hi: int) -> bool:
    us, ue = busy.get(int(dev), (np.zeros(0, np.int64), np.zeros(0, np.int64)))
    cov = int(covered_by(us, ue, np.array([lo]), np.array([hi]))[0])
    return cov <= (1.0 - IDLE_SHARE) * (hi - lo)


def _after_graph_launch(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Per waiting call (runtime rows): a graph launch on its thread since the previous wait
    on that thread (or since the trace began)."""
    rt = trace.runtime
    out = np.zeros(len(rows), dtype=bool)
    if not len(rows):
        return out
    g = np.flatnonzero(name_flags(rt["name"], lambda n: GRAPH_LAUNCH_RE.match(n) is not None))
    if not len(g):
        return out
    tid = rt["tid"].to_numpy()
    ts = rt["ts_ns"].to_numpy(np.int64)
    w = waits(trace).rows
    for x, r in enumerate(rows.tolist()):
        mine = w[(tid[w] == tid[r]) & (ts[w] < ts[r])]
        since = int(rt["end_ns"].to_numpy(np.int64)[mine].max()) if len(mine) else -(1 << 62)
        gg = g[tid[g] == tid[r]]
        out[x] = bool(((ts[gg] >= since) & (ts[gg] < ts[r])).any())
    return out
