"""What ``advisor diff`` reads of one trace beyond the kernels in order: the runtime calls per
step (:mod:`advisor.derive.callstats`), the workload (:mod:`advisor.derive.workload`) and the
one-time work inside the steady steps (:func:`one_time`). Built on the steady trace, in the
worker that holds it, into the :class:`~advisor.digest.Digest`.
"""

from __future__ import annotations

import numpy as np

from advisor.derive.callstats import runtime_calls
from advisor.derive.onetime import one_time_events
from advisor.derive.timeline import main_device, subtract, union
from advisor.derive.workload import workload
from advisor.digest import OneTime, RuntimeCalls, Workload
from advisor.runinfo import RunInfo
from advisor.trace.model import Trace


def diff_facts(trace: Trace, run: RunInfo | None) -> tuple[RuntimeCalls, Workload, OneTime]:
    """The steady trace's runtime calls, workload and one-time work."""
    return runtime_calls(trace), workload(trace, run), one_time(trace)


def one_time(trace: Trace) -> OneTime:
    """One-time work (:func:`advisor.derive.onetime.one_time_events`: context creation, module
    loading, autotuning, allocator growth, compilation) that starts inside a steady step: per
    step, the time of those events within the step while the main GPU was idle (what they add
    to the step: work the GPU ran meanwhile would have taken that time anyway), and per kind
    their whole time over the steps."""
    steps = trace.steps
    per_step = np.zeros(len(steps))
    by_kind: dict[str, float] = {}
    if not len(steps):
        return OneTime(per_step, by_kind)
    ev = one_time_events(trace)
    if not len(ev):
        return OneTime(per_step, by_kind)
    act = trace.gpu_activity()
    dev = main_device(trace)
    if dev is not None:
        act = act[(act["device"] == dev).to_numpy()]
    bs, be = union(act["ts_ns"].to_numpy(np.int64), act["end_ns"].to_numpy(np.int64))
    ts, end = ev["ts_ns"].to_numpy(np.int64), ev["end_ns"].to_numpy(np.int64)
    lo_all, hi_all = steps["ts_ns"].to_numpy(np.int64), steps["end_ns"].to_numpy(np.int64)
    for i, (lo, hi) in enumerate(zip(lo_all, hi_all, strict=True)):
        m = (ts >= lo) & (ts < hi)
        if not m.any():
            continue
        s, e = union(ts[m], np.minimum(end[m], hi))
        idle_s, idle_e = subtract(s, e, bs, be)
        per_step[i] = float((idle_e - idle_s).sum()) / 1e6
        for kind, ns in zip(
            ev["kind"].to_numpy()[m], (np.minimum(end[m], hi) - ts[m]), strict=True
        ):
            by_kind[str(kind)] = by_kind.get(str(kind), 0.0) + float(ns) / 1e6
    return OneTime(per_step, by_kind)
