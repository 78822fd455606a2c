"""Set-up and harness at the edges of a step that is not an iteration (a trace whose work no
unit splits into iterations, a micro-benchmark's measured window): what is trimmed from it so
that its per-step shares read the work that is left.

- **Leading set-up**: one-time work (:mod:`advisor.derive.onetime`: the CUDA context, whichever
  call creates it; library handles; module loading; first allocations; compilation), the
  profiler's own start-up frames (:mod:`advisor.derive.harness`: ``torch.profiler``
  ``__enter__`` -> ``start_trace``) and any *cold* call the caller names (a micro-benchmark's
  first call, several times slower than its repeats: lazy library set-up the trace does not
  name). The set-up ends at the end of one of those intervals: the one where the set-up's
  time most outweighs everything else from the step's start (the largest ``2 x set-up -
  elapsed``), so a stretch mostly made of set-up is trimmed whole and work that merely follows
  a short set-up call is kept. It is trimmed when it takes at least ``MIN_SHARE`` of the time
  left after it: smaller set-up changes no share of the step by much.
- **Trailing harness**: the profiler stopping (``__exit__`` -> ``stop``, which synchronizes the
  device to flush the trace) after the program's last host work: the step ends where it starts,
  or where the GPU work launched before it ends.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from advisor.derive.harness import harness_frames, in_harness
from advisor.derive.onetime import LABELS, one_time_events
from advisor.derive.timeline import union
from advisor.trace.model import Trace

MIN_SHARE = 0.1  # set-up this share of the time left after it is worth trimming


@dataclass(frozen=True)
class Edge:
    """A trimmed edge of a step: [start_ns, end_ns) and what it held (label, ns), largest
    first."""

    start_ns: int
    end_ns: int
    parts: tuple[tuple[str, int], ...]

    def words(self) -> str:
        """The parts, largest first; those under 0.05 ms only when nothing larger is there."""
        big = [(w, ns) for w, ns in self.parts if ns >= 50_000] or list(self.parts[:1])
        return ", ".join(f"{label} {ns / 1e6:.1f} ms" for label, ns in big)


def leading_setup(
    trace: Trace, lo: int, hi: int, cold: tuple[tuple[int, int, str], ...] = ()
) -> Edge | None:
    """The set-up at the start of the step [lo, hi) (``cold``: more intervals (start, end,
    label) that are set-up), or None when there is none worth trimming."""
    iv = _intervals(trace, lo, hi) + [(max(a, lo), min(b, hi), w) for a, b, w in cold]
    iv = [(a, b, w) for a, b, w in iv if b > a]
    if not iv:
        return None
    s, e = union(np.array([a for a, _, _ in iv]), np.array([b for _, b, _ in iv]))
    covered = np.cumsum(e - s)
    net = 2 * covered - (e - lo)
    k = int(np.argmax(net))
    x, once = int(e[k]), int(covered[k])
    if net[k] <= 0 or once < MIN_SHARE * (hi - x):
        return None
    parts: dict[str, int] = defaultdict(int)
    for a, b, w in iv:
        if a < x:
            parts[w] += min(b, x) - a
    return Edge(lo, x, tuple(sorted(parts.items(), key=lambda p: -p[1])))


def _intervals(trace: Trace, lo: int, hi: int) -> list[tuple[int, int, str]]:
    """One-time events and harness frames starting inside [lo, hi)."""
    out = []
    ev = one_time_events(trace)
    ts = ev["ts_ns"].to_numpy()
    m = (ts >= lo) & (ts < hi) & (ev["kind"] != "unrecorded").to_numpy()
    for a, b, k in zip(ts[m], ev["end_ns"].to_numpy()[m], ev["kind"].to_numpy()[m], strict=True):
        out.append((int(a), int(b), LABELS[str(k)]))
    fr = harness_frames(trace)
    for a, b, w in zip(fr["ts_ns"], fr["end_ns"], fr["what"], strict=True):
        if lo <= int(a) < hi:
            out.append((int(a), int(b), f"the profiler's own {w}"))
    return out


def trailing_harness(trace: Trace, lo: int, hi: int) -> Edge | None:
    """The profiler stopping at the end of the step [lo, hi), after the program's last host
    work (an op or runtime call outside harness frames), or None."""
    fr = harness_frames(trace)
    if not len(fr):
        return None
    last = _last_host_start(trace, lo, hi)
    after = fr[(fr["ts_ns"].to_numpy() > max(lo, last)) & (fr["ts_ns"].to_numpy() < hi)]
    if not len(after):
        return None
    start = int(after["ts_ns"].iloc[0])
    end = min(hi, max(start, _gpu_end(trace, lo, start)))
    if end >= hi:
        return None
    what = ", ".join(dict.fromkeys(str(w) for w in after["what"]))
    return Edge(end, hi, ((f"the profiler's own {what}", hi - end),))


def _last_host_start(trace: Trace, lo: int, hi: int) -> int:
    last = lo
    for df in (trace.cpu_ops, trace.runtime):
        if len(df):
            ts = df["ts_ns"].to_numpy()
            m = (ts >= lo) & (ts < hi) & ~in_harness(trace, df["tid"].to_numpy(), ts)
            if m.any():
                last = max(last, int(ts[m].max()))
    return last


def _gpu_end(trace: Trace, lo: int, before: int) -> int:
    """Where the GPU work launched in [lo, before) ends."""
    act = trace.gpu_activity()
    if not len(act) or not len(trace.runtime):
        return lo
    li = act["launch_idx"].to_numpy()
    lt = trace.runtime["ts_ns"].to_numpy()[np.clip(li, 0, None)]
    m = (li >= 0) & (lt >= lo) & (lt < before)
    return int(act["end_ns"].to_numpy()[m].max()) if m.any() else lo
