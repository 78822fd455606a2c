"""The analysis pipeline shared by ``advisor analyze`` and ``advisor profile``.

load (trace tables) -> detectors -> one row per cause -> rank -> Report -> outputs (findings.json, report.html).
Each stage is a plain function; outputs are written atomically (temp name, then rename).
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from advisor import runinfo, settings
from advisor.analysis.captured import launch_advice_under_capture
from advisor.analysis.detection import all_detectors, load_detectors, run_detectors
from advisor.analysis.merge import one_row_per_cause
from advisor.analysis.options import Options as Options  # re-exported: callers import it here
from advisor.analysis.options import options_from_cli as options_from_cli
from advisor.analysis.phases import with_phases
from advisor.analysis.pointers import keep_pointers
from advisor.analysis.ranking import headline_bound_ms, rank
from advisor.analysis.views import build_views, device_name
from advisor.derive.breakdown import steps_busy_pct
from advisor.derive.kind import TraceKind, trace_kind
from advisor.derive.locate import Locator
from advisor.derive.quality import Issue, trace_quality
from advisor.derive.steps import steady_steps, steady_trace
from advisor.derive.timeline import main_device
from advisor.detect.draft import Draft
from advisor.detect.registry import Context
from advisor.detect.thresholds import Thresholds
from advisor.errors import AdvisorError
from advisor.output.outfiles import atomic_write
from advisor.replay.bound import step_bound
from advisor.replay.evidence import host_own_pct
from advisor.report import Errored, Report, Skipped
from advisor.runfacts import Bound, BoundStep, ExcludedStep, QualityNote, RunFacts, SteadySteps
from advisor.runfolder import ANNOTATED_NAME, FINDINGS_NAME, REPORT_NAME, RUN_NAME
from advisor.runinfo import RunInfo
from advisor.trace import Trace, load_trace
from advisor.trace.commroles import refresh as refresh_comm
from advisor.trace.identity import with_device
from advisor.units import ms_of_ns

if TYPE_CHECKING:
    from advisor.output.annotate_stream import AheadCopy
    from advisor.trace.prefetch import Prefetch


def load_run_context(trace_path: Path) -> RunInfo | None:
    """run.json beside the trace (written by ``advisor profile``), or None (a damaged run.json
    only loses the live-run facts, never the analysis)."""
    cand = trace_path.parent / RUN_NAME if trace_path.is_file() else trace_path / RUN_NAME
    return runinfo.read_file(cand) if cand.is_file() else None


def run_summary(trace: Trace, run_info: RunInfo | None) -> RunFacts:
    """The ``run`` block of findings.json (before the bound and the combined saving)."""
    rc = run_info or RunInfo()
    dev = trace.device(main_device(trace))
    kind = trace_kind(trace)
    dev_name, dev_source = device_name(dev, rc.device)
    return RunFacts(
        notes=rc.notes,  # profile's notes
        script=rc.script,
        argv=rc.argv,
        trace=str(trace.path),
        torch=rc.torch,
        cuda=rc.cuda,
        device=dev_name,
        device_source=dev_source,
        compute_capability=rc.device.compute_capability or (dev.cc_str if dev else None),
        steps_profiled=int(len(trace.steps)),
        steps_synthetic=bool(trace.meta.synthetic_steps),
        steady=_steady_block(trace),
        step_ms_median=_ms3(trace.median_step_ms()),
        step_ms_mean=_ms3(trace.mean_step_ms()) if len(trace.steps) else None,
        gpu_busy_pct=steps_busy_pct(trace),
        host_own_pct=host_own_pct(trace),
        ended_early=bool(rc.ended_early),
        end_reason=rc.end_reason,
        before_first_step=True if rc.ended_early and rc.steps_seen == 0 else None,
        platform=trace.meta.platform,
        rank=trace.meta.rank,
        world_size=trace.meta.world_size,
        events_skipped=int(trace.meta.skipped_events),
        trace_kind=kind.kind,
        trace_kind_evidence=kind.why,
        step_unit=steady_steps(trace).unit or None,
        step_unit_evidence=steady_steps(trace).why or None,
        trace_quality=tuple(QualityNote(i.what, i.effect, i.kind) for i in trace_quality(trace))
        + tuple(  # what the live run's recording limits cut (run.json capture_limits)
            QualityNote(str(q.what), str(q.effect)) for q in rc.capture_limits
        ),
    )


def _ms3(ms: float) -> float:
    """Milliseconds to 3 decimals; a step under a microsecond keeps 3 significant digits."""
    return round(ms, 3) if ms >= 0.001 or ms <= 0 else float(f"{ms:.3g}")


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
# findings measured on the host's pace between launches (capture slows it: not steady state)
HOST_PACE_FINDINGS = frozenset({"host-overhead", "python-loop", "optimizer-host-time"})


CAPTURE_NOTE = (
    "graph capture: timings are not steady state (the window records a CUDA/HIP graph; "
    "its launches run nothing on the GPU)"
)


def for_capture(drafts: list[Draft], kind: TraceKind) -> tuple[list[Draft], list[tuple[str, str]]]:
    """On a graph-capture trace no finding claims a per-step saving from capture timing: those
    resting on the timeline or the host's pace (and so on capture overhead) are not run, the
    rest are kept as information (no saving) with the reason."""
    if kind.kind != "capture":
        return drafts, []
    kept, skipped = [], []
    for d in drafts:
        if d.id in TIMELINE_FINDINGS or d.id in HOST_PACE_FINDINGS:
            skipped.append((d.id, CAPTURE_NOTE))
        else:
            kept.append(
                replace(
                    d,
                    latent=True,
                    est_savings_ms=0.0,
                    est_savings_range_ms=None,
                    assumptions=d.assumptions + (CAPTURE_NOTE + ": no saving is claimed.",),
                )
            )
    return kept, skipped


def lower_confidence(drafts: list[Draft], issues: list[Issue]) -> list[Draft]:
    """Low confidence, with the reason, for timeline findings when the timeline has holes."""
    holes = [i for i in issues if i.kind in ("untraced", "graph", "lost-launch")]
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


def _steady_block(trace: Trace) -> SteadySteps | None:
    """How the steps were found and what was left out, when not simply every ProfilerStep."""
    ss = steady_steps(trace)
    if ss.source in ("ProfilerStep", "whole trace") and not ss.excluded:
        return None
    return SteadySteps(
        steps_source=ss.source,
        steps_excluded=tuple(
            ExcludedStep(
                step=e.step,
                start_ms=ms_of_ns(e.start_ns),
                ms=ms_of_ns(e.dur_ns),
                reason=e.reason,
            )
            for e in ss.excluded
        ),
    )


def _bound(b: dict[str, Any] | None) -> Bound | None:
    """``run.bound`` from :func:`advisor.replay.bound.step_bound`'s dict."""
    if b is None:
        return None
    return Bound(
        by=b["by"],
        shares_pct=b["shares_pct"],
        per_step=tuple(
            BoundStep(step=r["step"], shares_pct={k: v for k, v in r.items() if k != "step"})
            for r in b["per_step"]
        ),
    )


def analyze_trace(trace: Trace, run: RunInfo | None, options: Options | None = None) -> Report:
    """The report of one trace (``run``: its run.json, from ``advisor profile``)."""
    opts = options or Options()
    th = Thresholds(opts.overrides)
    load_detectors(opts.detectors)  # detectors declare their thresholds when imported
    refresh_comm(trace.kernels)  # communication kernels a plugin declared
    th.validate()
    trace = steady_trace(with_device(trace, opts.device))  # the one switch: every per-step
    # figure reads steady steps (of the GPU the user names, if any)
    step_ms = trace.median_step_ms()
    ctx = Context(
        run=run,
        thresholds=th,
        step_ms_median=step_ms,
        locator=Locator(trace),
        trace=trace,
    )
    outcome = run_detectors(
        trace, ctx, set(opts.only) or None, set(opts.skip) or None, opts.share_cores
    )
    drafts, not_run = for_capture(outcome.drafts, trace_kind(trace))
    drafts = launch_advice_under_capture(drafts, trace)
    drafts = keep_pointers(lower_confidence(drafts, trace_quality(trace)))
    # a finding's saving is its mean per step (advisor.replay.whatif): its share is of the mean
    mean_ms = trace.mean_step_ms()
    # the headline replays every finding's own fix together, before rows are merged
    bound_ms, replayed = headline_bound_ms(
        trace, outcome.drafts, rank(drafts, mean_ms, th), mean_ms
    )
    findings = rank(one_row_per_cause(trace, drafts, th), mean_ms, th)
    facts = replace(
        run_summary(trace, run),
        est_savings_bound_ms=bound_ms,
        est_savings_bound_how="replayed together" if replayed else "sum, capped at the step",
        bound=_bound(step_bound(trace)),
    )
    docs = {d.id: (d.title, d.doc) for d in all_detectors()}
    views = build_views(
        trace,
        run,
        findings,
        docs,
        no_source=opts.no_source,
        locator=ctx.locator,
        extra_roots=opts.source_roots,
        thresholds=th,
    )
    return Report(
        run=facts,
        findings=tuple(findings),
        skipped=tuple(Skipped(i, r) for i, r in [*outcome.skipped, *not_run]),
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
        import_writers()  # while the child may still be decoding: no wait later
    trace = load_trace(path, opts.max_trace_bytes, prefetch)
    return trace, analyze_loaded(trace, path, opts, ahead)


def analyze_loaded(
    trace: Trace, path: Path, options: Options, ahead: AheadCopy | None = None
) -> Report:
    """:func:`analyze_path` of a trace already loaded from ``path``."""
    if ahead is not None:
        ahead.start(Path(trace.meta.path), trace.meta.raw_bytes, options.max_trace_bytes)
    return analyze_run(trace, load_run_context(Path(path)), options)


def analyze_run(trace: Trace, run: RunInfo | None, options: Options | None) -> Report:
    """:func:`analyze_trace`, plus the other phases of an ``advisor profile`` run that
    run.json names (:mod:`advisor.analysis.phases`), analyzed with the same options."""
    opts = options or Options()

    def analyze(path: Path, ctx: RunInfo) -> Report:
        return analyze_trace(load_trace(path, opts.max_trace_bytes), ctx, opts)

    return with_phases(analyze_trace(trace, run, opts), Path(trace.meta.path), run, analyze)


def import_writers() -> None:
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
        ctx = {
            "annotated_trace": annotated.name if annotated else None,
            "report_dir": str(out),  # paths in the report are shown relative to it
            **(extra or {}),
        }
        atomic_write(out / REPORT_NAME, render_html(report, ctx).encode("utf-8"))
        written["report"] = out / REPORT_NAME
    except OSError as err:
        raise AdvisorError(f"cannot write output: {err.strerror or err}", out) from None
    return {k: written[k] for k in ("report", "findings", "annotated") if k in written}


_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)  # the output cannot take it
IN_MEMORY_ANNOTATE_MAX_BYTES = 256 << 20  # file size up to which annotate() may rewrite it whole
ANNOTATED_MAX_BYTES = (
    32 << 20
)  # a larger trace gets its annotated copy only with ADVISOR_ANNOTATE=1


def write_annotated(report: Report, out: Path, ahead: AheadCopy | None = None) -> Path | None:
    """``out/trace.annotated.json.gz``: the analyzed trace plus a findings track (never the
    original file); None when the trace file cannot be read back."""
    from advisor.output.annotate import annotate

    src = Path(report.run.trace or "")
    target = out / ANNOTATED_NAME
    if not src.is_file():
        return None
    job = ahead.take(src) if ahead is not None else None
    if src.stat().st_size > ANNOTATED_MAX_BYTES and not settings.annotate_always():
        if job is not None:  # kept small: a copy of a large trace only on request
            job.cancel()
        return None
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
