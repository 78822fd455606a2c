"""Where each step's wall time went: the one per-step breakdown, and the GPU's busy share.

:func:`step_breakdown` splits every step (CPU ProfilerStep range, or the steady steps of
:mod:`advisor.derive.steps` when the caller passes a steady trace) into parts that sum to the
step: GPU ``compute``, ``communication`` and ``memcpy`` (copies and memsets) busy time on the
main device, counted in that priority where they overlap; ``dataloader``: the GPU idle while the
host is in a DataLoader fetch (:mod:`advisor.derive.dataloader`); ``idle``: the rest of the GPU
idle time. On a trace without GPU work, ``dataloader`` is the time in fetches and ``host_only``
the rest of the step. Data loading that overlaps GPU work costs the step nothing and is not
counted. The report's step chart (``views.steps``), ``advisor inspect`` and ``advisor diff``
(through the digest, also for several ranks) all read it.

:func:`steps_busy_pct` is the one "GPU busy" figure of the report (``run.gpu_busy_pct``): the
share of the steps' wall time the main GPU was busy, outside the stretches whose GPU timeline
the trace lost (:func:`advisor.derive.quality.affected_spans`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from advisor.derive.dataloader import fetch_intervals
from advisor.derive.quality import affected_spans
from advisor.derive.timeline import (
    Intervals,
    covered_by,
    main_busy,
    main_device,
    main_device_busy,
    step_busy,
)
from advisor.trace.model import Trace

CATEGORIES = ("compute", "communication", "memcpy", "dataloader", "idle", "host_only")

GpuLayers = tuple[Intervals, Intervals, Intervals]


@dataclass(frozen=True)
class Breakdown:
    """Per step (one array element each, int64 ns): its start and duration and its parts,
    which sum to ``total_ns`` (see the module doc)."""

    step: np.ndarray
    start_ns: np.ndarray
    total_ns: np.ndarray
    compute_ns: np.ndarray
    communication_ns: np.ndarray
    memcpy_ns: np.ndarray
    dataloader_ns: np.ndarray
    idle_ns: np.ndarray
    host_only_ns: np.ndarray

    def __len__(self) -> int:
        return len(self.step)

    def part_ns(self, category: str) -> np.ndarray:
        """The per-step ns of one of :data:`CATEGORIES`."""
        return getattr(self, f"{category}_ns")

    def mean_ms(self) -> dict[str, float]:
        """Each category's mean per step, in ms (rounded to the microsecond)."""
        n = max(len(self), 1)
        return {c: round(float(self.part_ns(c).sum()) / 1e6 / n, 3) for c in CATEGORIES}


def gpu_layers(trace: Trace) -> GpuLayers | None:
    """Coverage of compute, compute+comm, and all GPU work on the main device (None: no GPU;
    computed once per trace)."""
    return trace.memo("breakdown.gpu_layers", lambda: _gpu_layers(trace))


def _gpu_layers(trace: Trace) -> GpuLayers | None:
    dev = main_device(trace)
    if dev is None:
        return None
    act = trace.gpu_activity()
    act = act[act["device"] == dev]
    kind = act["kind"]
    return (
        Intervals.of([act[kind == "kernel"]]),
        Intervals.of([act[kind.isin(["kernel", "comm"])]]),
        main_busy(trace),  # every activity of the main device (timeline's, computed once)
    )


def step_breakdown(
    trace: Trace, layers: GpuLayers | None = None, max_steps: int | None = None
) -> Breakdown:
    """The breakdown of the trace's steps (the first ``max_steps``; ``layers``: the
    :func:`gpu_layers` of the trace, when the caller has them already)."""
    st = trace.steps if max_steps is None else trace.steps.head(max_steps)
    lo = st["ts_ns"].to_numpy(dtype=np.int64)
    hi = st["end_ns"].to_numpy(dtype=np.int64)
    dur = hi - lo
    zero = np.zeros(len(st), dtype=np.int64)
    if not len(st):
        return Breakdown(*(zero,) * 9)
    dl = fetch_intervals(trace)
    layers = gpu_layers(trace) if layers is None else layers
    if layers is None:
        loader = dl.covered(lo, hi)
        compute = comm = memcpy = idle = zero
        host = dur - loader
    else:
        c1, c2, c3 = (c.covered(lo, hi) for c in layers)
        compute, comm, memcpy = c1, c2 - c1, c3 - c2
        both = Intervals.union_of(
            np.r_[layers[2].starts, dl.starts], np.r_[layers[2].ends, dl.ends]
        )
        loader = both.covered(lo, hi) - c3  # data loading while the GPU is idle
        idle = np.maximum(dur - c3 - loader, 0)
        host = zero
    return Breakdown(
        step=st["step"].to_numpy(dtype=np.int64),
        start_ns=lo,
        total_ns=dur,
        compute_ns=compute,
        communication_ns=comm,
        memcpy_ns=memcpy,
        dataloader_ns=loader,
        idle_ns=idle,
        host_only_ns=host,
    )


def steps_busy_pct(trace: Trace) -> float | None:
    """Share of the steps' wall time the main GPU was busy, in % (None: no GPU activity).

    Every GPU activity counts, in every step (HTA's window, which drops the last step and
    counts the span from the first to the last GPU activity, is ``advisor inspect``'s "active
    span" figure); time whose GPU timeline the trace lost is left out of both sides."""
    busy = main_device_busy(trace, hta=False)
    sb = step_busy(trace, busy)
    total = int(sb["dur_ns"].sum()) if len(sb) else 0
    busy_ns = int(sb["busy_ns"].sum()) if len(sb) else 0
    hole_s, hole_e = affected_spans(trace)
    if len(hole_s) and len(sb):  # no claim from what the trace did not record
        st = trace.steps
        lo, hi = st["ts_ns"].to_numpy(), st["end_ns"].to_numpy()
        total -= int(covered_by(hole_s, hole_e, lo, hi).sum())
        if busy:
            bs, be = busy.busy_starts, busy.busy_ends
            cut_s, cut_e = np.maximum(hole_s, lo.min()), np.minimum(hole_e, hi.max())
            busy_ns -= int(covered_by(bs, be, cut_s, np.maximum(cut_e, cut_s)).sum())
    return round(100.0 * busy_ns / total, 2) if busy and total > 0 else None
