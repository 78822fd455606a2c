"""What a rank did before it reached each collective (one trace; the worker side of arrival-based
lateness, :mod:`advisor.derive.lag`).

A collective's kernel starts on each rank when that rank reaches it (its *arrival*). What the rank
did before is split like the step breakdown (:mod:`advisor.derive.breakdown`), into the parts of
:data:`advisor.digest.PARTS`: ``compute`` (computation kernels running), ``copy`` (other GPU work:
copies, memsets, other collectives), ``loader`` (the GPU idle while the host fetches a batch,
:mod:`advisor.derive.dataloader`) and ``idle`` (the rest: the GPU idle while the host works or
waits). The digest keeps, per collective, how long each part ran from the trace's start to the
collective's start, to its end and to the start of its step (:class:`advisor.digest.Preceding`),
so the cross-rank side can split any stretch between two of them (from the previous collective
every rank shares, or the step's start, to the arrival) and compare it with the other ranks'.
The longest computation kernel between the previous collective on the device (or the step's
start) and the arrival is kept too.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from advisor.arrays import unique_ints
from advisor.derive.breakdown import gpu_layers
from advisor.derive.dataloader import fetch_intervals
from advisor.derive.timeline import Intervals
from advisor.digest import Preceding
from advisor.trace.model import Trace


def cumulative(trace: Trace, t: np.ndarray) -> np.ndarray:
    """``[len(t), part]``: how long each part ran from the trace's start to each time (ns)."""
    t = np.asarray(t, dtype=np.int64)
    layers = gpu_layers(trace)
    fetch = fetch_intervals(trace)
    if layers is None:
        loader = fetch.before(t)
        zero = np.zeros(len(t), dtype=np.int64)
        return np.stack([zero, zero, loader, np.maximum(t - loader, 0)], axis=1)
    compute = layers[0].before(t)
    busy = layers[2].before(t)
    both = Intervals.union_of(
        np.r_[layers[2].starts, fetch.starts], np.r_[layers[2].ends, fetch.ends]
    ).before(t)
    idle = np.maximum(t - both, 0)
    return np.stack([compute, busy - compute, both - busy, idle], axis=1).astype(np.int64)


def preceding(trace: Trace, coll: pd.DataFrame) -> Preceding:
    """:class:`~advisor.digest.Preceding` of the collectives ``coll`` (rows of
    ``trace.kernels``: ts_ns, end_ns, device, step; steps of ``trace``)."""
    ts = coll["ts_ns"].to_numpy(np.int64)
    end = coll["end_ns"].to_numpy(np.int64)
    st = trace.steps
    if len(st):
        k = np.searchsorted(st["step"].to_numpy(), coll["step"].to_numpy())
        step_start = st["ts_ns"].to_numpy(np.int64)[np.clip(k, 0, len(st) - 1)]
    else:
        step_start = ts.copy()
    step_start = np.minimum(step_start, ts)
    dev = coll["device"].fillna(-1).to_numpy(np.int64)
    lo = _previous_end(ts, end, dev, step_start)
    name, name_ns = _longest_kernel(trace, lo, ts)
    origin = int(round(trace.meta.origin_us * 1000.0))
    return Preceding(
        at_start_ns=cumulative(trace, ts),
        at_end_ns=cumulative(trace, end),
        at_step_ns=cumulative(trace, step_start),
        step_abs_ns=step_start + origin,
        kernel=name,
        kernel_ns=name_ns,
    )


def _previous_end(
    ts_ns: np.ndarray, end_ns: np.ndarray, device: np.ndarray, step_start_ns: np.ndarray
) -> np.ndarray:
    """The latest end, at or before each collective's start, of a collective on its device
    within its step (else the step's start)."""
    out = np.asarray(step_start_ns, dtype=np.int64).copy()
    for d in unique_ints(device):
        m = np.flatnonzero(device == d)
        ends = np.sort(end_ns[m])
        j = np.searchsorted(ends, ts_ns[m], side="right") - 1
        prev_end = np.where(j >= 0, ends[np.clip(j, 0, None)], out[m])
        out[m] = np.maximum(out[m], prev_end)
    return out


def _longest_kernel(trace: Trace, lo: np.ndarray, hi: np.ndarray) -> tuple[list[str], np.ndarray]:
    """Per stretch [lo, hi): the computation kernel with the most time inside it."""
    k = trace.kernels
    names = [""] * len(lo)
    out = np.zeros(len(lo), dtype=np.int64)
    if not len(k) or not len(lo):
        return names, out
    comp = k[~k["is_comm"].to_numpy(dtype=bool)].sort_values("ts_ns", kind="stable")
    s = comp["ts_ns"].to_numpy(np.int64)
    e = comp["end_ns"].to_numpy(np.int64)
    nm = comp["name"].astype(str).to_numpy()
    longest = int((e - s).max()) if len(s) else 0
    a = np.searchsorted(s, lo - longest, side="left")
    b = np.searchsorted(s, hi, side="left")
    for i in range(len(lo)):
        if b[i] <= a[i]:
            continue
        inside = np.minimum(e[a[i] : b[i]], hi[i]) - np.maximum(s[a[i] : b[i]], lo[i])
        j = int(np.argmax(inside))
        if inside[j] > 0:
            names[i], out[i] = str(nm[a[i] + j]), int(inside[j])
    return names, out
