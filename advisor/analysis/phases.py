"""The phases of one ``advisor profile`` run in one report: the main window (``trace.json.gz``,
training, or evaluation for a script without an optimizer) and the evaluation window recorded
after it (``trace.eval.json.gz``, run.json ``eval``; see :mod:`advisor.profile.evalwindow`).

:func:`with_phases` analyzes the evaluation trace with the same options and adds its findings
after the main window's, each marked ``phase: "eval"`` (its savings and percentages are per
evaluation step) and the main window's marked with their own phase (``train``): the two are
ranked apart, each by its own step (:mod:`advisor.output.phased` shows them so); findings.json ``run.phases`` gets one row per phase: ``phase``, ``trace``,
``steps_profiled``, ``step_ms_median``, ``findings`` (their ids), or for a phase not
captured ``captured: false``, ``missing`` (a code: ``ended``, ``eval-wait``, ``epoch-left``,
``no-eval-code``, ``not-requested``, ``no-training-window``, ``no-training``, ...) and ``why``
(the sentence run.json ``missing_phases`` holds).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from advisor.report import Report
from advisor.runcapture import Eval
from advisor.runfacts import Phase, PhaseMissed, PhaseWindow
from advisor.runinfo import RunInfo

# loads and analyzes another trace of the run with the main window's options
Analyze = Callable[[Path, RunInfo], Report]


def _row(phase: str, trace: str, report: Report) -> Phase:
    return Phase(
        phase=phase,
        window=PhaseWindow(
            trace=trace,
            steps_profiled=report.run.steps_profiled,
            step_ms_median=report.run.step_ms_median,
            findings=tuple(f.id for f in report.findings),
        ),
    )


def eval_trace(trace_path: Path, run: RunInfo | None) -> Path | None:
    """The evaluation window's trace beside ``trace_path``, when run.json names one."""
    ev = run.eval if run is not None else None
    name = ev.trace if ev is not None and ev.trace_written else None
    if name is None or "/" in name or "\\" in name:
        return None
    p = trace_path.parent / name
    return p if p.is_file() else None


def with_phases(report: Report, trace_path: Path, run: RunInfo | None, analyze: Analyze) -> Report:
    """``report`` (the main window) with ``run.phases`` and the evaluation window's findings
    (``analyze``: how the evaluation trace is loaded and analyzed); unchanged for a trace
    without a run.json that records phases."""
    if run is None or run.phase not in ("train", "eval"):
        return report
    first = run.phase
    phases = [_row(first, trace_path.name, report)]
    findings = list(report.findings)
    views = report.views
    ev = run.eval
    path = eval_trace(trace_path, run)
    if path is not None:
        ev_report = analyze(path, _eval_context(path, run))
        phases.append(_row("eval", path.name, ev_report))
        # two phases: every finding says its own (each is per step of its phase)
        findings = [replace(f, phase=first) for f in findings]
        findings += [replace(f, phase="eval") for f in ev_report.findings]
        sources = {**(ev_report.views.sources or {}), **(views.sources or {})}
        if sources:
            views = replace(views, sources=sources)
    if run.missing_phases is not None:  # every phase not captured, with why (advisor profile)
        for m in run.missing_phases:
            if m.phase in ("train", "eval"):
                missed = PhaseMissed(missing=m.missing, why=m.why)
                phases.append(Phase(phase=m.phase, missed=missed))
    elif path is None and ev is not None and first == "train":  # run.json before it
        code = ev.missing
        missed = PhaseMissed(missing=code if isinstance(code, str) else None)
        phases.append(Phase(phase="eval", missed=missed))
    return replace(
        report,
        run=replace(report.run, phases=tuple(phases)),
        findings=tuple(findings),
        views=views,
    )


def _eval_context(path: Path, run: RunInfo) -> RunInfo:
    """The run context the evaluation trace is analyzed with."""
    ev = run.eval or Eval()
    return replace(
        run,
        trace=path.name,
        trace_scope=ev.scope,
        window_steps=ev.steps,
        step_source="forward",
        phase="eval",
        notes=(),
        eval=None,
    )
