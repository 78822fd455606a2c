"""View data for the renderers, computed once on the analysis side (renderers never compute).

``build_views`` returns the ``views`` of a :class:`~advisor.report.Report` (the records of
:mod:`advisor.viewdata`); they are saved in findings.json (an additive top-level key) so
``advisor report`` re-renders without the trace:

- ``device``: name, compute capability, total and peak memory (bytes; None when unknown).
- ``trace``: file name, ``origin_us`` (the file's clock at rebased 0), ``window_us`` (the
  captured steps, file clock), ``recorded_at`` (ISO date from ``baseTimeNanoseconds``).
- ``steps``: per step (at most ``MAX_STEPS``), where its wall time went, in ms, summing to
  ``total_ms``: the one per-step breakdown, :func:`advisor.derive.breakdown.step_breakdown`
  (GPU ``compute``, ``communication``, ``memcpy``; ``dataloader``: GPU idle while the host is
  in a DataLoader fetch; ``idle``; ``host_only`` on CPU-only traces).
- ``utilization``: GPU busy % of the main device over the window in ``UTIL_BUCKETS`` buckets.
- ``kernels`` / ``ops``: the top kernels and top operators tables (:mod:`advisor.analysis.toptables`).
- ``compiled``: GPU time per torch.compile region and graph, by kernel kind, and the GEMMs in
  them (:mod:`advisor.analysis.compiled`; absent when the trace has no compiled region).
- ``collectives``: each collective kind's calls, bytes, time (waiting for peers apart) and
  effective bandwidth against the link's peak (:mod:`advisor.derive.commbw`; absent without
  collectives).
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

import numpy as np

from advisor.derive.breakdown import CATEGORIES as CATEGORIES  # re-exported for the tests
from advisor.derive.breakdown import GpuLayers, gpu_layers, step_breakdown
from advisor.derive.commbw import collectives
from advisor.derive.locate import Locator
from advisor.derive.sources import read_sources, source_bases, source_roots
from advisor.derive.timeline import main_device
from advisor.detect.thresholds import Thresholds
from advisor.detectors._efficiency import Analysis, analysis
from advisor.findings import Finding
from advisor.runinfo import Device as RunDevice
from advisor.runinfo import RunInfo
from advisor.trace.model import GPU_DEVICE_TYPES, Device, Trace
from advisor.units import ms_of_ns
from advisor.viewdata import (
    CollectiveRow,
    DetectorDoc,
    DeviceView,
    StepRow,
    TraceInfo,
    TraceViews,
    Utilization,
    Views,
)

VIEWS_VERSION = 1
UTIL_BUCKETS = 100
MAX_STEPS = 300


def step_rows(trace: Trace, layers: GpuLayers | None = None) -> tuple[StepRow, ...]:
    """The first ``MAX_STEPS`` steps' breakdown (:func:`advisor.derive.breakdown.step_breakdown`),
    in ms (``layers``: the trace's :func:`~advisor.derive.breakdown.gpu_layers`, when known)."""
    b = step_breakdown(trace, layers, MAX_STEPS)
    return tuple(
        StepRow(
            step=int(b.step[i]),
            ts_us=trace.to_trace_us(int(b.start_ns[i])),
            total_ms=ms_of_ns(b.total_ns[i]),
            compute_ms=ms_of_ns(b.compute_ns[i]),
            communication_ms=ms_of_ns(b.communication_ns[i]),
            memcpy_ms=ms_of_ns(b.memcpy_ns[i]),
            dataloader_ms=ms_of_ns(b.dataloader_ns[i]),
            idle_ms=ms_of_ns(b.idle_ns[i]),
            host_only_ms=ms_of_ns(b.host_only_ns[i]),
        )
        for i in range(len(b))
    )


def _window_ns(trace: Trace) -> tuple[int, int]:
    st = trace.steps
    if len(st):
        return int(st["ts_ns"].min()), int(st["end_ns"].max())
    return 0, 0


def utilization(
    trace: Trace, buckets: int = UTIL_BUCKETS, layers: GpuLayers | None = None
) -> Utilization | None:
    layers = gpu_layers(trace) if layers is None else layers
    lo, hi = _window_ns(trace)
    if layers is None or hi <= lo:
        return None
    edges = np.linspace(lo, hi, buckets + 1).round().astype(np.int64)
    width = np.maximum(edges[1:] - edges[:-1], 1)
    busy = layers[2].covered(edges[:-1], edges[1:])
    comp = layers[0].covered(edges[:-1], edges[1:])
    return Utilization(
        start_us=trace.to_trace_us(lo),
        end_us=trace.to_trace_us(hi),
        bucket_ms=ms_of_ns((hi - lo) / buckets),
        busy_pct=tuple(round(float(v), 1) for v in 100.0 * busy / width),
        compute_pct=tuple(round(float(v), 1) for v in 100.0 * comp / width),
    )


def _peak_memory(trace: Trace, run: RunInfo | None) -> int | None:
    for v in (
        run.memory.peak_allocated_bytes if run is not None else None,
        run.peak_memory_bytes if run is not None else None,
    ):
        if isinstance(v, int | float) and v > 0:
            return int(v)
    m = trace.memory
    if not len(m):
        return None
    m = m[m["device_type"].isin(GPU_DEVICE_TYPES) & m["total_allocated"].notna()]
    dev = main_device(trace)
    if dev is not None and (m["device_id"] == dev).any():
        m = m[m["device_id"] == dev]
    return int(m["total_allocated"].max()) if len(m) else None


def _recorded_at(trace: Trace, run: RunInfo | None) -> str | None:
    for v in (run.started_at, run.date, run.start_time) if run is not None else ():
        if v:
            return v
    ns = trace.meta.base_time_ns
    if ns is None or not (1_000_000_000 * 10**9 < ns < 4_000_000_000 * 10**9):
        return None  # not a plausible wall-clock epoch
    when = dt.datetime.fromtimestamp(ns / 1e9, tz=dt.timezone.utc)
    return when.strftime("%Y-%m-%d %H:%M:%S UTC")


def device_name(dev: Device | None, rdev: RunDevice) -> tuple[str | None, str | None]:
    """The main GPU's name and where it came from (``run.device``/``device_source``,
    ``views.device``): the name ``--device`` gave, else the one run.json recorded (``advisor
    profile`` asked torch), else the trace's (listed or inferred)."""
    if rdev.name and not (dev is not None and dev.source == "--device"):
        return rdev.name, "run.json"
    return (dev.name if dev else None), (dev.source if dev else None)


def device_view(trace: Trace, run: RunInfo | None) -> DeviceView:
    dev = trace.device(main_device(trace))
    given = dev is not None and dev.source == "--device"
    rdev = run.device if run is not None and not given else RunDevice()
    total = rdev.total_memory_bytes or (dev.total_memory_bytes if dev else None)
    name, source = device_name(dev, rdev)
    return DeviceView(
        name=name,
        compute_capability=rdev.compute_capability or (dev.cc_str if dev else None),
        total_memory_bytes=int(total) if isinstance(total, int | float) else None,
        peak_memory_bytes=_peak_memory(trace, run),
        count=len(trace.meta.devices),
        source=source,
    )


def _efficiency(trace: Trace, thresholds: Thresholds | None) -> Analysis | None:
    """The kernels' efficiency analysis (shared with ``kernel-efficiency``, memoized on the
    trace); None without GPU kernels or peaks. A failure here is the detector's to report: the
    views go on without the figures."""
    if not trace.has_gpu or not len(trace.kernels):
        return None
    try:
        return analysis(trace, thresholds or Thresholds())
    except Exception:  # noqa: BLE001 (kernel-efficiency reports it as errored)
        return None


def collective_rows(trace: Trace) -> tuple[CollectiveRow, ...]:
    """``views.collectives``: each collective kind's effective bandwidth (derive/commbw)."""

    def r(x: float | None, nd: int = 2) -> float | None:
        return None if x is None else round(x, nd)

    return tuple(
        CollectiveRow(
            collective=c.kind,
            ranks=c.ranks,
            calls=c.calls,
            dtype=c.dtype,
            bytes_per_call=r(c.bytes_per_call, 0),
            time_ms=r(c.time_ns / 1e6 if c.time_ns is not None else None, 3),
            wait_ms=r(c.wait_ns / 1e6 if c.wait_ns is not None else None, 3),
            algbw_gbs=r(c.algbw_gbs),
            busbw_gbs=r(c.busbw_gbs),
            link=c.link,
            link_gbs=c.link_gbs,
            link_pct=r(c.link_pct, 1),
            note=c.note or None,
        )
        for c in collectives(trace)
    )


def build_views(
    trace: Trace,
    run: RunInfo | None,
    findings: Iterable[Finding],
    detectors: dict[str, tuple[str, str]],
    no_source: bool = False,
    locator: Locator | None = None,
    extra_roots: Iterable[Path | str] = (),
    thresholds: Thresholds | None = None,
) -> Views:
    """The ``views`` of a Report. ``detectors``: id -> (title, docstring); ``locator``
    finds the source lines of the top tables (none with ``no_source``); ``thresholds``: those
    of the analysis (the kernels' efficiency figures depend on them)."""
    from advisor.analysis.compiled import compiled_view
    from advisor.analysis.toptables import top_kernels, top_ops

    found = list(findings)
    ids = {f.id for f in found}
    lo, hi = _window_ns(trace)
    layers = gpu_layers(trace)  # once for both charts
    eff = _efficiency(trace, thresholds)
    sources, withheld = None, list[str]()
    if not no_source:
        roots = source_roots(extra_roots)  # never widened by a run.json
        sources = read_sources(found, source_bases(trace.path, run), roots, withheld)
    return Views(
        one_trace=TraceViews(
            version=VIEWS_VERSION,
            device=device_view(trace, run),
            trace=TraceInfo(
                file=trace.path.name,
                origin_us=trace.to_trace_us(0),
                window_us=(trace.to_trace_us(lo), trace.to_trace_us(hi)),
                recorded_at=_recorded_at(trace, run),
            ),
            steps=step_rows(trace, layers),
            steps_total=int(len(trace.steps)),
            utilization=utilization(trace, layers=layers),
        ),
        kernels=top_kernels(trace, None if no_source else locator, an=eff),
        ops=top_ops(trace, None if no_source else locator),
        compiled=compiled_view(trace, eff) if trace.has_gpu else None,
        collectives=collective_rows(trace),
        detectors={
            i: DetectorDoc(title=t, doc=d if i in ids else None)
            for i, (t, d) in sorted(detectors.items())
        },
        sources=sources,
        sources_withheld=tuple(withheld),
    )
