"""The analysis pipeline shared by ``advisor analyze`` and ``advisor profile``.

load (trace tables) -> detectors -> rank -> Report -> outputs (findings.json, report.html).
Each stage is a plain function; outputs are written atomically (temp name, then rename).
"""

from __future__ import annotations

import errno
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from advisor.analysis.detection import (
    all_detectors,
    load_detectors,
    resolve_detector_spec,
    run_detectors,
)
from advisor.analysis.phases import with_phases
from advisor.analysis.ranking import rank
from advisor.analysis.views import build_views
from advisor.derive.locate import Locator
from advisor.derive.quality import Issue, affected_spans, trace_quality
from advisor.derive.steps import steady_steps, steady_trace
from advisor.derive.timeline import covered_by, main_device, main_device_busy, step_busy
from advisor.detect.draft import Draft
from advisor.detect.registry import Context
from advisor.detect.thresholds import Thresholds, parse_overrides
from advisor.errors import AdvisorError
from advisor.output.outfiles import atomic_write
from advisor.replay.bound import step_bound
from advisor.replay.whatif import combined_bound_ms
from advisor.report import Errored, Report, Skipped
from advisor.runfolder import ANNOTATED_NAME, FINDINGS_NAME, REPORT_NAME, RUN_NAME
from advisor.trace import Trace, load_trace
from advisor.trace.decode import DEFAULT_MAX_TRACE_BYTES

if TYPE_CHECKING:
    from advisor.output.annotate_stream import AheadCopy
    from advisor.trace.prefetch import Prefetch


@dataclass(frozen=True)
class Options:
    only: frozenset[str] = frozenset()
    skip: frozenset[str] = frozenset()
    overrides: dict[str, float] = field(default_factory=dict)
    debug: bool = False
    no_source: bool = False
    source_roots: tuple[str, ...] = ()  # --source-root: more folders code may be read from
    max_trace_bytes: int = DEFAULT_MAX_TRACE_BYTES
    # --detector: more detectors to run, files (absolute paths) or module names
    detectors: tuple[str, ...] = ()

    def validate(self) -> None:
        load_detectors(self.detectors)  # their ids and thresholds are known from here on
        Thresholds(self.overrides).validate()
        known = {d.id for d in all_detectors()}
        for flag, ids in (("--only", self.only), ("--skip", self.skip)):
            bad = sorted(i for i in ids if i not in known)
            if bad:
                raise AdvisorError(f"{flag}: unknown finding id {bad[0]!r}")


def split_ids(values: list[str]) -> frozenset[str]:
    return frozenset(v.strip() for item in values for v in item.split(",") if v.strip())


def options_from_cli(  # type: ignore[no-untyped-def]
    only, skip, set_, debug, no_source, max_trace_bytes, source_roots=(), detectors=()
):
    """:class:`Options` from the strings the user typed (``--only a,b --set k=v``), validated."""
    opts = Options(
        detectors=tuple(resolve_detector_spec(str(d)) for d in detectors),
        only=split_ids(only),
        skip=split_ids(skip),
        overrides=parse_overrides(set_),
        debug=debug,
        no_source=no_source,
        max_trace_bytes=max_trace_bytes,
        source_roots=tuple(str(p) for p in source_roots),
    )
    opts.validate()
    return opts


def load_run_context(trace_path: Path) -> dict[str, Any] | None:
    """run.json beside the trace (written by ``advisor profile``), or None."""
    cand = trace_path.parent / RUN_NAME if trace_path.is_file() else trace_path / RUN_NAME
    if not cand.is_file():
        return None
    try:
        data = json.loads(cand.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None  # a damaged run.json only loses the live-run facts, never the analysis
    return data if isinstance(data, dict) else None


def run_summary(trace: Trace, run_ctx: dict[str, Any] | None) -> dict[str, Any]:
    """The ``run`` block of findings.json."""
    rc = run_ctx or {}
    dev = trace.device(main_device(trace))
    # share of the steps' wall time the GPU was busy: every GPU activity counts here (HTA's
    # window, which drops the last step, is for span figures such as inspect's idle %)
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
    gpu_busy = round(100.0 * busy_ns / total, 2) if busy and total > 0 else None
    rdev_raw = rc.get("device")
    rdev: dict[str, Any] = rdev_raw if isinstance(rdev_raw, dict) else {}
    cc = rdev.get("compute_capability") or (dev.cc_str if dev else None)
    notes = [n for n in rc.get("notes") or () if isinstance(n, str)]  # advisor profile's notes
    return {
        **({"notes": notes} if notes else {}),
        "script": rc.get("script"),
        "argv": rc.get("argv"),
        "trace": str(trace.path),
        "torch": rc.get("torch"),
        "cuda": rc.get("cuda"),
        "device": rdev.get("name") or (dev.name if dev else None),
        "compute_capability": cc,
        "steps_profiled": int(len(trace.steps)),
        "steps_synthetic": bool(trace.meta.synthetic_steps),
        **_steady_block(trace),
        "step_ms_median": round(trace.median_step_ms(), 3),
        "gpu_busy_pct": gpu_busy,
        "ended_early": bool(rc.get("ended_early", False)),
        "end_reason": rc.get("end_reason"),
        "platform": trace.meta.platform,
        "rank": trace.meta.rank,
        "world_size": trace.meta.world_size,
        "events_skipped": int(trace.meta.skipped_events),
        "trace_quality": [i.to_dict() for i in trace_quality(trace)],
    }


# findings whose figures rest on the GPU timeline: a trace missing part of it lowers them
TIMELINE_FINDINGS = frozenset(
    {
        "gpu-idle",
        "comm-overlap",
        "tiny-kernels",
        "sync-point",
        "dataloader-stall",
        "blocking-copy",
        "single-tensor-optimizer",
    }
)
TIMELINE_FINDINGS |= {"unbucketed-collectives"}  # capped at the GPU idle time between collectives


def lower_confidence(drafts: list[Draft], issues: list[Issue]) -> list[Draft]:
    """Low confidence, with the reason, for timeline findings when the timeline has holes."""
    holes = [i for i in issues if i.kind in ("graph", "lost-launch")]
    if not holes:
        return drafts
    why = "The trace is missing part of the GPU timeline (see run.trace_quality): " + " ".join(
        i.what for i in holes
    )
    return [
        replace(d, confidence="low", assumptions=d.assumptions + (why,))
        if d.id in TIMELINE_FINDINGS
        else d
        for d in drafts
    ]


def _steady_block(trace: Trace) -> dict[str, Any]:
    """How the steps were found and what was left out, when not simply every ProfilerStep."""
    ss = steady_steps(trace)
    if ss.source in ("ProfilerStep", "whole trace") and not ss.excluded:
        return {}
    return {
        "steps_source": ss.source,
        "steps_excluded": [
            {
                "step": e.step,
                "start_ms": round(e.start_ns / 1e6, 3),
                "ms": round(e.dur_ns / 1e6, 3),
                "reason": e.reason,
            }
            for e in ss.excluded
        ],
    }


def analyze_trace(
    trace: Trace, run_ctx: dict[str, Any] | None, options: Options | None = None
) -> Report:
    opts = options or Options()
    th = Thresholds(opts.overrides)
    load_detectors(opts.detectors)  # detectors declare their thresholds when imported
    th.validate()
    trace = steady_trace(trace)  # the one switch: every per-step figure reads steady steps
    step_ms = trace.median_step_ms()
    ctx = Context(
        run=run_ctx, thresholds=th, step_ms_median=step_ms, locator=Locator(trace), trace=trace
    )
    outcome = run_detectors(trace, ctx, set(opts.only) or None, set(opts.skip) or None)
    findings = rank(lower_confidence(outcome.drafts, trace_quality(trace)), step_ms, th)
    run = run_summary(trace, run_ctx)
    run["est_savings_bound_ms"], replayed = combined_bound_ms(
        trace, outcome.drafts, findings, step_ms
    )
    run["est_savings_bound_how"] = "replayed together" if replayed else "sum, capped at the step"
    run["bound"] = step_bound(trace)
    docs = {d.id: (d.title, d.doc) for d in all_detectors()}
    views = build_views(
        trace,
        run_ctx,
        findings,
        docs,
        no_source=opts.no_source,
        locator=ctx.locator,
        extra_roots=opts.source_roots,
    )
    return Report(
        run=run,
        findings=tuple(findings),
        skipped=tuple(Skipped(i, r) for i, r in outcome.skipped),
        errored=tuple(Errored(i, e, tb) for i, e, tb in outcome.errored),
        thresholds=th.used(),
        views=views,
    )


def analyze_path(
    path: Path,
    options: Options | None = None,
    ahead: AheadCopy | None = None,
    prefetch: Prefetch | None = None,
) -> tuple[Trace, Report]:
    """Load and analyze; ``prefetch``: ``path`` already decoding in a child process
    (see :mod:`advisor.trace.prefetch`); ``ahead``: start recompressing the trace for
    trace.annotated.json.gz in the background while the detectors run (see write_annotated)."""
    opts = options or Options()
    if prefetch is not None:
        _import_writers()  # while the child may still be decoding: no wait later
    trace = load_trace(path, opts.max_trace_bytes, prefetch)
    if ahead is not None:
        ahead.start(Path(trace.meta.path), trace.meta.raw_bytes, opts.max_trace_bytes)
    run_ctx = load_run_context(Path(path))
    report = with_phases(analyze_trace(trace, run_ctx, opts), Path(trace.meta.path), run_ctx, opts)
    return trace, report


def _import_writers() -> None:
    """Import what writing the outputs needs (jinja2, the report's view model) and compile the
    report's template: a few hundredths of a second that cost nothing while a decoding child is
    still at work."""
    import advisor.output.annotate_stream  # noqa: F401
    from advisor.output.html import report_template

    report_template()


# ---------------------------------------------------------------- outputs


Renderer = Callable[[Report, dict[str, Any]], bytes]


def write_outputs(
    report: Report,
    out: Path,
    debug: bool = False,
    extra: dict[str, Any] | None = None,
    annotate_trace: bool = True,
    ahead: AheadCopy | None = None,
) -> dict[str, Path]:
    """Write findings.json, trace.annotated.json.gz (when the trace file is readable) and
    report.html into ``out``; returns what was written (report, findings, annotated).
    ``ahead``: the annotated copy started while the detectors ran (:func:`analyze_path`)."""
    from advisor.output.html import render_html

    written: dict[str, Path] = {}
    try:
        atomic_write(out / FINDINGS_NAME, report.to_json(debug))
        written["findings"] = out / FINDINGS_NAME
        annotated = write_annotated(report, out, ahead) if annotate_trace else None
        if annotated is not None:
            written["annotated"] = annotated
        ctx = {"annotated_trace": annotated.name if annotated else None, **(extra or {})}
        atomic_write(out / REPORT_NAME, render_html(report, ctx).encode("utf-8"))
        written["report"] = out / REPORT_NAME
    except OSError as err:
        raise AdvisorError(f"cannot write output: {err.strerror or err}", out) from None
    return {k: written[k] for k in ("report", "findings", "annotated") if k in written}


_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)  # the output cannot take it
IN_MEMORY_ANNOTATE_MAX_BYTES = 256 << 20  # file size up to which annotate() may rewrite it whole


def write_annotated(report: Report, out: Path, ahead: AheadCopy | None = None) -> Path | None:
    """``out/trace.annotated.json.gz``: the analyzed trace plus a findings track (never the
    original file); None when the trace file cannot be read back."""
    from advisor.output.annotate import annotate

    src = Path(str(report.run.get("trace") or ""))
    target = out / ANNOTATED_NAME
    if not src.is_file():
        return None
    job = ahead.take(src) if ahead is not None else None
    try:
        if src.resolve() == target.resolve():
            if job is not None:
                job.cancel()
            return None  # never overwrite the input
        if job is None:  # not started ahead (a big trace): stream it now, bounded memory
            from advisor.output.annotate_stream import Prepared

            job = Prepared(src)
        if job.write(report, target):
            return target
        if src.stat().st_size > IN_MEMORY_ANNOTATE_MAX_BYTES:
            return None  # an unusual layout too big to rewrite in memory: no annotated copy
        data = annotate(src, report)
    except OSError as err:
        if err.errno in _FULL:  # a full disk is not a convenience missing: say so
            raise
        return None  # the trace could not be read back: no annotated copy
    except (AdvisorError, ValueError, RecursionError, MemoryError):
        return None  # the annotated copy is a convenience; its absence never fails a run
    atomic_write(target, data)
    return target
