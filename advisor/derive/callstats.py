"""What the steady steps ask of the CUDA/HIP runtime, per step: the figures ``advisor diff``
sets side by side to say *how* a run changed (:class:`advisor.digest.RuntimeCalls`).

- **Calls** by what they do (the rules of :mod:`advisor.derive.runtime`): syncs (stream,
  device, event... synchronize), kernel launches, graph launches, allocator calls that go to
  the driver, copy calls; per name, the calls per step and the host time spent in them.
- **Copies** (the GPU's copy activity, memsets aside) by direction and memories (``HtoD
  Pageable -> Device``): per step their count, bytes and GPU time (so their bandwidth), the
  host time in the calls that queued them (a synchronous copy, or one from or to pageable
  memory, holds its call for the transfer; a pinned ``non_blocking`` copy returns at once), and
  the share of their GPU time with a kernel running on the same device (copies hidden under
  compute).
- **Host time before the first GPU work** of each step: from the step's start to its first call
  that queues GPU work (a launch, graph launch, async copy or memset), the median over steps.

Only the steady steps count (``step >= 0``); the main GPU's copies.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from advisor.derive.runtime import (
    ALLOCATOR_CALL_RE,
    COPY_CALL_RE,
    GPU_WORK_CALL_PARTS,
    GRAPH_LAUNCH_RE,
    KERNEL_LAUNCH_RE,
    is_sync_call,
)
from advisor.derive.timeline import covered_by, main_device, union
from advisor.digest import CallRow, CopyRow, RuntimeCalls
from advisor.trace.model import Trace
from advisor.trace.names import name_flags

KINDS = ("sync", "launch", "graph-launch", "alloc", "copy")


def call_kind(name: str) -> str | None:
    """What a runtime call does, one of :data:`KINDS` (None: none of them)."""
    if is_sync_call(name):
        return "sync"
    if GRAPH_LAUNCH_RE.match(name):
        return "graph-launch"
    if KERNEL_LAUNCH_RE.match(name):
        return "launch"
    if ALLOCATOR_CALL_RE.match(name):
        return "alloc"
    if COPY_CALL_RE.match(name):
        return "copy"
    return None


def runtime_calls(trace: Trace) -> RuntimeCalls:
    """The steady steps' runtime calls and copies, per step (see the module doc)."""
    n = len(trace.steps)
    if n == 0:
        return RuntimeCalls()
    return RuntimeCalls(_calls(trace, n), _copies(trace, n), _first_work_ms(trace))


def _calls(trace: Trace, n: int) -> tuple[CallRow, ...]:
    rt = trace.runtime
    if not len(rt):
        return ()
    counted = name_flags(rt["name"], lambda x: call_kind(x) is not None)
    rt = rt[counted & (rt["step"].to_numpy() >= 0)]
    if not len(rt):
        return ()
    g = rt.groupby(rt["name"].astype(str), sort=False)["dur_ns"].agg(["size", "sum"])
    rows = [
        CallRow(
            str(call_kind(str(name))), str(name), float(r["size"]) / n, float(r["sum"]) / 1e6 / n
        )
        for name, r in g.iterrows()
    ]
    return tuple(sorted(rows, key=lambda r: (KINDS.index(r.kind), -r.host_ms, r.name)))


def _copies(trace: Trace, n: int) -> tuple[CopyRow, ...]:
    m = trace.memcpy
    if not len(m):
        return ()
    keep = (m["step"].to_numpy() >= 0) & (m["kind"].astype(str).to_numpy() != "Memset")
    dev = main_device(trace)
    if dev is not None:
        keep &= m["device"].to_numpy() == dev
    m = m[keep]
    if not len(m):
        return ()
    s, e = m["ts_ns"].to_numpy(np.int64), m["end_ns"].to_numpy(np.int64)
    k = trace.kernels
    on_dev = k["device"].to_numpy() == dev if dev is not None else np.ones(len(k), bool)
    ks, ke = union(k["ts_ns"].to_numpy(np.int64)[on_dev], k["end_ns"].to_numpy(np.int64)[on_dev])
    df = pd.DataFrame(
        {
            "kind": m["kind"].astype(str).to_numpy(),
            "src": m["src"].astype(str).to_numpy(),
            "dst": m["dst"].astype(str).to_numpy(),
            "bytes": m["bytes"].to_numpy(np.float64),
            "dur": (e - s).astype(np.float64),
            "covered": covered_by(ks, ke, s, e).astype(np.float64),
            "host": _call_ns(trace, m),
        }
    )
    g = df.groupby(["kind", "src", "dst"], sort=False).agg(
        count=("dur", "size"),
        bytes=("bytes", "sum"),
        dur=("dur", "sum"),
        covered=("covered", "sum"),
        host=("host", "sum"),
    )
    rows = [
        CopyRow(
            kind=str(kind),
            src=str(src),
            dst=str(dst),
            count=float(r["count"]) / n,
            bytes=float(r["bytes"]) / n,
            gpu_ms=float(r["dur"]) / 1e6 / n,
            host_ms=float(r["host"]) / 1e6 / n,
            overlap_pct=100.0 * float(r["covered"]) / float(r["dur"]) if r["dur"] > 0 else 0.0,
        )
        for (kind, src, dst), r in g.iterrows()
    ]
    return tuple(sorted(rows, key=lambda r: (-r.gpu_ms, r.kind, r.src, r.dst)))


def _call_ns(trace: Trace, m: pd.DataFrame) -> np.ndarray:
    """Per copy: the duration of the runtime call that queued it (0 without a known call)."""
    rt = trace.runtime
    out = np.zeros(len(m))
    if not len(rt):
        return out
    launch = m["launch_idx"].to_numpy()
    ok = (launch >= 0) & (launch < len(rt))
    out[ok] = rt["dur_ns"].to_numpy()[launch[ok]]
    return out


def _first_work_ms(trace: Trace) -> float | None:
    rt = trace.runtime
    if not len(rt):
        return None
    queues = name_flags(rt["name"], lambda x: any(p in x for p in GPU_WORK_CALL_PARTS))
    sel = queues & (rt["step"].to_numpy() >= 0)
    if not sel.any():
        return None
    first = pd.Series(rt["ts_ns"].to_numpy()[sel]).groupby(rt["step"].to_numpy()[sel]).min()
    start = trace.steps.set_index("step")["ts_ns"]
    lead = (first - start.reindex(first.index)).dropna()
    return float(np.median(np.maximum(lead.to_numpy(), 0))) / 1e6 if len(lead) else None
