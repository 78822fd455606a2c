"""View data for the renderers, computed once on the analysis side (renderers never compute).

``build_views`` returns the ``views`` dict of a :class:`~advisor.report.Report`; it is saved in
findings.json (an additive top-level key) so ``advisor report`` re-renders without the trace:

- ``device``: name, compute capability, total and peak memory (bytes; None when unknown).
- ``trace``: file name, ``origin_us`` (the file's clock at rebased 0), ``window_us`` (the
  captured steps, file clock), ``recorded_at`` (ISO date from ``baseTimeNanoseconds``).
- ``steps``: per step (at most ``MAX_STEPS``), where its wall time went, in ms, summing to
  ``total_ms``: GPU ``compute``, ``communication`` and ``memcpy`` (incl. memset) busy time,
  counted in that priority where they overlap; ``dataloader`` (GPU idle while the host is in a
  DataLoader fetch); ``idle`` (other GPU idle time); ``host_only`` (CPU-only traces: the step
  time outside data loading, when no GPU work exists at all).
- ``utilization``: GPU busy % of the main device over the window in ``UTIL_BUCKETS`` buckets.
- ``kernels`` / ``ops``: the top kernels and top operators tables (:mod:`advisor.analysis.toptables`).
- ``detectors``: title of every detector, plus its docstring for those that found something.
- ``sources``: ``"file:line"`` -> a few lines of the user's code around it (absent with
  ``--no-source``); which files may be read: :mod:`advisor.derive.sources`.
- ``sources_withheld``: files named by the trace whose code was not read because they lie
  outside the source roots (absent when none).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from advisor.derive.dataloader import fetch_intervals
from advisor.derive.locate import Locator
from advisor.derive.sources import read_sources, source_bases, source_roots
from advisor.derive.timeline import Intervals, main_device
from advisor.findings import Finding
from advisor.trace.model import Trace

VIEWS_VERSION = 1
UTIL_BUCKETS = 100
MAX_STEPS = 300
CATEGORIES = ("compute", "communication", "memcpy", "dataloader", "idle", "host_only")


def _ms(ns: float) -> float:
    return round(float(ns) / 1e6, 3)


def _gpu_layers(trace: Trace) -> tuple[Intervals, Intervals, Intervals] | None:
    """Coverage of compute, compute+comm, and all GPU work on the main device (None: no GPU)."""
    dev = main_device(trace)
    if dev is None:
        return None
    act = trace.gpu_activity()
    act = act[act["device"] == dev]
    kind = act["kind"]
    return (
        Intervals.of([act[kind == "kernel"]]),
        Intervals.of([act[kind.isin(["kernel", "comm"])]]),
        Intervals.of([act]),
    )


_UNSET: Any = object()


def step_breakdown(trace: Trace, layers: Any = _UNSET) -> list[dict[str, Any]]:
    """Per step: compute, communication, copies, data loading, idle (``layers``: the
    :func:`_gpu_layers` of the trace, when the caller has them already)."""
    st = trace.steps.head(MAX_STEPS)
    if not len(st):
        return []
    lo = st["ts_ns"].to_numpy(dtype=np.int64)
    hi = st["end_ns"].to_numpy(dtype=np.int64)
    dur = hi - lo
    dl = fetch_intervals(trace)
    layers = _gpu_layers(trace) if layers is _UNSET else layers
    zero = np.zeros(len(st), dtype=np.int64)
    if layers is None:
        compute = comm = memcpy = idle = zero
        loader = dl.covered(lo, hi)
        host = dur - loader
    else:
        c1, c2, c3 = (c.covered(lo, hi) for c in layers)
        compute, comm, memcpy = c1, c2 - c1, c3 - c2
        both = Intervals.union_of(
            np.r_[layers[2].starts, dl.starts], np.r_[layers[2].ends, dl.ends]
        )
        loader = both.covered(lo, hi) - c3  # data loading while the GPU is idle
        idle = dur - c3 - loader
        host = zero
    rows = []
    for i, s in enumerate(st["step"].to_numpy()):
        rows.append(
            {
                "step": int(s),
                "ts_us": trace.to_trace_us(int(lo[i])),
                "total_ms": _ms(dur[i]),
                "compute_ms": _ms(compute[i]),
                "communication_ms": _ms(comm[i]),
                "memcpy_ms": _ms(memcpy[i]),
                "dataloader_ms": _ms(loader[i]),
                "idle_ms": _ms(max(0, idle[i])),
                "host_only_ms": _ms(host[i]),
            }
        )
    return rows


def _window_ns(trace: Trace) -> tuple[int, int]:
    st = trace.steps
    if len(st):
        return int(st["ts_ns"].min()), int(st["end_ns"].max())
    return 0, 0


def utilization(
    trace: Trace, buckets: int = UTIL_BUCKETS, layers: Any = _UNSET
) -> dict[str, Any] | None:
    layers = _gpu_layers(trace) if layers is _UNSET else layers
    lo, hi = _window_ns(trace)
    if layers is None or hi <= lo:
        return None
    edges = np.linspace(lo, hi, buckets + 1).round().astype(np.int64)
    width = np.maximum(edges[1:] - edges[:-1], 1)
    busy = layers[2].covered(edges[:-1], edges[1:])
    comp = layers[0].covered(edges[:-1], edges[1:])
    return {
        "start_us": trace.to_trace_us(lo),
        "end_us": trace.to_trace_us(hi),
        "bucket_ms": _ms((hi - lo) / buckets),
        "busy_pct": [round(float(v), 1) for v in 100.0 * busy / width],
        "compute_pct": [round(float(v), 1) for v in 100.0 * comp / width],
    }


def _peak_memory(trace: Trace, run_ctx: dict[str, Any] | None) -> int | None:
    rc = run_ctx or {}
    mem = rc.get("memory")
    for v in (
        (mem or {}).get("peak_allocated_bytes") if isinstance(mem, dict) else None,
        rc.get("peak_memory_bytes"),
    ):
        if isinstance(v, int | float) and v > 0:
            return int(v)
    m = trace.memory
    if not len(m):
        return None
    m = m[(m["device_type"] == 1) & m["total_allocated"].notna()]
    dev = main_device(trace)
    if dev is not None and (m["device_id"] == dev).any():
        m = m[m["device_id"] == dev]
    return int(m["total_allocated"].max()) if len(m) else None


def _recorded_at(trace: Trace, run_ctx: dict[str, Any] | None) -> str | None:
    for key in ("started_at", "date", "start_time"):
        v = (run_ctx or {}).get(key)
        if isinstance(v, str) and v:
            return v
    ns = trace.meta.base_time_ns
    if ns is None or not (1_000_000_000 * 10**9 < ns < 4_000_000_000 * 10**9):
        return None  # not a plausible wall-clock epoch
    when = dt.datetime.fromtimestamp(ns / 1e9, tz=dt.timezone.utc)
    return when.strftime("%Y-%m-%d %H:%M:%S UTC")


def device_view(trace: Trace, run_ctx: dict[str, Any] | None) -> dict[str, Any]:
    dev = trace.device(main_device(trace))
    rdev = (run_ctx or {}).get("device")
    rdev = rdev if isinstance(rdev, dict) else {}
    total = rdev.get("total_memory_bytes") or (dev.total_memory_bytes if dev else None)
    return {
        "name": rdev.get("name") or (dev.name if dev else None),
        "compute_capability": rdev.get("compute_capability") or (dev.cc_str if dev else None),
        "total_memory_bytes": int(total) if isinstance(total, int | float) else None,
        "peak_memory_bytes": _peak_memory(trace, run_ctx),
        "count": len(trace.meta.devices),
    }


def build_views(
    trace: Trace,
    run_ctx: dict[str, Any] | None,
    findings: Iterable[Finding],
    detectors: dict[str, tuple[str, str]],
    no_source: bool = False,
    locator: Locator | None = None,
    extra_roots: Iterable[Path | str] = (),
) -> dict[str, Any]:
    """The ``views`` dict of a Report. ``detectors``: id -> (title, docstring); ``locator``
    finds the source lines of the top tables (none with ``no_source``)."""
    from advisor.analysis.toptables import top_kernels, top_ops

    found = list(findings)
    ids = {f.id for f in found}
    lo, hi = _window_ns(trace)
    layers = _gpu_layers(trace)  # once for both charts
    views: dict[str, Any] = {
        "version": VIEWS_VERSION,
        "device": device_view(trace, run_ctx),
        "trace": {
            "file": trace.path.name,
            "origin_us": trace.to_trace_us(0),
            "window_us": [trace.to_trace_us(lo), trace.to_trace_us(hi)],
            "recorded_at": _recorded_at(trace, run_ctx),
        },
        "steps": step_breakdown(trace, layers),
        "steps_total": int(len(trace.steps)),
        "utilization": utilization(trace, layers=layers),
        "kernels": top_kernels(trace, None if no_source else locator),
        "ops": top_ops(trace, None if no_source else locator),
        "detectors": {
            i: ({"title": t, "doc": d} if i in ids else {"title": t})
            for i, (t, d) in sorted(detectors.items())
        },
    }
    if not no_source:
        withheld: list[str] = []
        roots = source_roots(extra_roots)  # never widened by a run.json
        views["sources"] = read_sources(found, source_bases(trace.path, run_ctx), roots, withheld)
        if withheld:
            views["sources_withheld"] = withheld
    return views
