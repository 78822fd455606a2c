"""What is in a trace: the data behind ``advisor inspect`` (pure; no printing).

Two GPU figures, each under its own name: ``gpu_busy_pct`` is the report's one "GPU busy"
(share of the steady steps' wall time the main GPU was busy, :mod:`advisor.derive.breakdown`,
the same number as findings.json's ``run.gpu_busy_pct``); ``breakdown`` is the GPU's *active
span*, from its first to its last activity (every device, the last step left out), split as
Holistic Trace Analysis' temporal breakdown does. ``step_breakdown`` is the report's per-step
breakdown, averaged over the steady steps.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from advisor.derive.breakdown import step_breakdown, steps_busy_pct
from advisor.derive.kind import trace_kind
from advisor.derive.steps import steady_steps, steady_trace
from advisor.derive.timeline import device_busy
from advisor.trace.model import Trace
from advisor.units import ms_of_ns, pct_of


def inspect_trace(trace: Trace, top: int = 10) -> dict[str, Any]:
    """Stable keys: devices, steps, step_ms_median, gpu_busy_pct, gpu_idle_pct, kernels_top,
    ops_top, memcpy, sync_calls (plus breakdown, step_breakdown, notes, trace_kind and its
    evidence, step_unit and its evidence). The steps are the steady steps ``analyze`` uses."""
    meta = trace.meta
    devs = device_busy(trace)
    steady = steady_trace(trace)  # the steps analyze uses (advisor.derive.steps)
    ss = steady_steps(trace)
    step_ms = steady.step_ms()
    used = {d.device for d in devs}
    devices = [
        {
            "id": d.id,
            "name": d.name,
            "compute_capability": d.cc_str,
            "total_memory_bytes": d.total_memory_bytes,
            "num_sms": d.num_sms,
            "vendor": d.vendor,
            "arch": d.arch,
            "source": d.source,
            "used": d.id in used,
        }
        for d in meta.devices
    ]
    busy_pct = steps_busy_pct(steady)
    per_step = step_breakdown(steady)
    notes: list[str] = []
    if not trace.has_gpu:
        notes.append("no GPU activity in this trace (CPU-only): GPU figures are empty")
    if meta.profiler_ranges:
        notes.append(
            f"CUPTI range-profiler trace: {meta.profiler_ranges} profiler ranges and no"
            " kernel timeline"
        )
    if ss.synthetic:
        notes.append(
            "no unit of work repeats: the step is the "
            + ("recording" if not ss.excluded else "recording without its set-up")
        )
    for e in ss.excluded:
        notes.append(f"left out of the steps: {e.reason} ({ms_of_ns(e.dur_ns)} ms)")
    if meta.skipped_events:
        notes.append(f"{meta.skipped_events} malformed events skipped")
    if meta.unknown_categories:
        cats = ", ".join(f"{k} ({v})" for k, v in sorted(meta.unknown_categories.items()))
        notes.append(f"events of unknown categories ignored: {cats}")
    kind = trace_kind(trace)
    return {
        "trace": meta.path,
        "format": meta.format,
        "trace_kind": kind.kind,
        "trace_kind_evidence": kind.why,
        "platform": meta.platform,
        "rank": meta.rank,
        "world_size": meta.world_size,
        "events": meta.event_count,
        "devices": devices,
        "step_unit": ss.unit,
        "step_unit_evidence": ss.why,
        "steps": {
            "count": int(len(step_ms)),
            "synthetic": ss.synthetic,
            "ids": [int(s) for s in step_ms.index],
            "ms_median": round(float(step_ms.median()), 3) if len(step_ms) else 0.0,
            "ms_min": round(float(step_ms.min()), 3) if len(step_ms) else 0.0,
            "ms_max": round(float(step_ms.max()), 3) if len(step_ms) else 0.0,
        },
        "step_ms_median": round(float(step_ms.median()), 3) if len(step_ms) else 0.0,
        "gpu_busy_pct": busy_pct,
        "gpu_idle_pct": None if busy_pct is None else round(100.0 - busy_pct, 2),
        "breakdown": _breakdown(devs),
        "step_breakdown": {
            "steps": len(per_step),
            **{f"{k}_ms": v for k, v in per_step.mean_ms().items()},
        },
        "kernels_top": _kernels_top(trace, top),
        "ops_top": _ops_top(trace, top),
        "memcpy": _memcpy(trace),
        "sync_calls": _syncs(trace),
        "notes": notes,
    }


def _breakdown(devs: list[Any]) -> dict[str, Any]:
    """The GPU's active span (first to last activity, HTA's window), summed over the devices."""
    span = sum(d.span_ns for d in devs)
    parts = {
        "busy": sum(d.busy_ns for d in devs),
        "compute": sum(d.compute_ns for d in devs),
        "communication": sum(d.comm_ns for d in devs),
        "memcpy": sum(d.memcpy_ns for d in devs),
        "memset": sum(d.memset_ns for d in devs),
        "idle": sum(d.idle_ns for d in devs),
    }
    return {
        "span_ms": ms_of_ns(span),
        **{f"{k}_ms": ms_of_ns(v) for k, v in parts.items()},
        **{f"{k}_pct": pct_of(v, span) for k, v in parts.items()},
    }


def _kernels_top(trace: Trace, top: int) -> list[dict[str, Any]]:
    k = trace.kernels
    if not len(k):
        return []
    total = float(k["dur_ns"].sum())
    g = k.groupby("name", observed=True)["dur_ns"].agg(["sum", "count", "mean"])
    g = g.sort_values(["sum", "count"], ascending=False).head(top)
    return [
        {
            "name": str(n),
            "count": int(r["count"]),
            "total_ms": ms_of_ns(r["sum"]),
            "mean_us": round(float(r["mean"]) / 1e3, 3),
            "pct": pct_of(float(r["sum"]), total),
        }
        for n, r in g.iterrows()
    ]


def op_self_ns(ops: pd.DataFrame) -> np.ndarray:
    """Self time of each cpu op: its duration minus its direct children's."""
    dur = ops["dur_ns"].to_numpy()
    parent = ops["parent_idx"].to_numpy()
    child_sum = np.zeros(len(ops), dtype=np.int64)
    has = parent >= 0
    np.add.at(child_sum, parent[has], dur[has])
    return np.maximum(dur - child_sum, 0)


def _ops_top(trace: Trace, top: int) -> list[dict[str, Any]]:
    ops = trace.cpu_ops
    if not len(ops):
        return []
    df = pd.DataFrame({"name": ops["name"], "dur": ops["dur_ns"], "self": op_self_ns(ops)})
    g = df.groupby("name", observed=True).agg(
        total=("dur", "sum"), self_ns=("self", "sum"), count=("dur", "size")
    )
    g = g.sort_values(["total", "count"], ascending=False).head(top)
    return [
        {
            "name": str(n),
            "count": int(r["count"]),
            "total_ms": ms_of_ns(r["total"]),
            "self_ms": ms_of_ns(r["self_ns"]),
        }
        for n, r in g.iterrows()
    ]


def _memcpy(trace: Trace) -> list[dict[str, Any]]:
    m = trace.memcpy
    if not len(m):
        return []
    df = pd.DataFrame(
        {
            "kind": m["kind"].astype(str),
            "src": m["src"].astype(str),
            "dst": m["dst"].astype(str),
            "bytes": m["bytes"],
            "dur": m["dur_ns"],
        }
    )
    g = df.groupby(["kind", "src", "dst"]).agg(
        count=("dur", "size"), bytes=("bytes", "sum"), dur=("dur", "sum")
    )
    g = g.sort_values("dur", ascending=False)
    return [
        {
            "kind": k,
            "src": s,
            "dst": d,
            "count": int(r["count"]),
            "bytes": int(r["bytes"]),
            "total_ms": ms_of_ns(r["dur"]),
        }
        for (k, s, d), r in g.iterrows()
    ]


def _syncs(trace: Trace) -> list[dict[str, Any]]:
    rt = trace.runtime
    if not len(rt):
        return []
    names = rt["name"].astype(str)
    mask = names.str.contains("Synchronize") | names.isin(
        ["cudaMemcpy", "hipMemcpy", "cudaMemcpyAsync", "hipMemcpyAsync", "hipMemcpyWithStream"]
    )
    df = pd.DataFrame({"name": names[mask], "dur": rt["dur_ns"][mask]})
    if not len(df):
        return []
    g = df.groupby("name").agg(count=("dur", "size"), dur=("dur", "sum"))
    g = g.sort_values("dur", ascending=False)
    return [
        {"name": str(n), "count": int(r["count"]), "total_ms": ms_of_ns(r["dur"])}
        for n, r in g.iterrows()
    ]
