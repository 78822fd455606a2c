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
from typing import Any

from advisor.report import Report
from advisor.runfacts import Phase, PhaseMissed, PhaseWindow

# loads and analyzes another trace of the run with the main window's options
Analyze = Callable[[Path, dict[str, Any]], Report]


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


def eval_trace(trace_path: Path, run_ctx: dict[str, Any] | None) -> Path | None:
    """The evaluation window's trace beside ``trace_path``, when run.json names one."""
    ev = (run_ctx or {}).get("eval")
    name = ev.get("trace") if isinstance(ev, dict) and ev.get("trace_written") else None
    if not isinstance(name, str) or "/" in name or "\\" in name:
        return None
    p = trace_path.parent / name
    return p if p.is_file() else None


def with_phases(
    report: Report, trace_path: Path, run_ctx: dict[str, Any] | None, analyze: Analyze
) -> Report:
    """``report`` (the main window) with ``run.phases`` and the evaluation window's findings
    (``analyze``: how the evaluation trace is loaded and analyzed); unchanged for a trace
    without a run.json that records phases."""
    rc = run_ctx or {}
    first = rc.get("phase")
    if first not in ("train", "eval"):
        return report
    phases = [_row(first, trace_path.name, report)]
    findings = list(report.findings)
    views = report.views
    ev = rc.get("eval")
    path = eval_trace(trace_path, rc)
    if path is not None:
        ev_report = analyze(path, _eval_context(path, rc))
        phases.append(_row("eval", path.name, ev_report))
        # two phases: every finding says its own (each is per step of its phase)
        findings = [replace(f, phase=first) for f in findings]
        findings += [replace(f, phase="eval") for f in ev_report.findings]
        sources = {**(ev_report.views.sources or {}), **(views.sources or {})}
        if sources:
            views = replace(views, sources=sources)
    missing = rc.get("missing_phases")
    if isinstance(missing, list):  # every phase not captured, with why (advisor profile)
        for m in missing:
            if isinstance(m, dict) and m.get("phase") in ("train", "eval"):
                code, why = m.get("missing"), m.get("why")
                missed = PhaseMissed(
                    missing=code if isinstance(code, str) else None,
                    why=why if isinstance(why, str) else None,
                )
                phases.append(Phase(phase=m["phase"], missed=missed))
    elif path is None and isinstance(ev, dict) and first == "train":  # run.json before it
        code = ev.get("missing")
        missed = PhaseMissed(missing=code if isinstance(code, str) else None)
        phases.append(Phase(phase="eval", missed=missed))
    return replace(
        report,
        run=replace(report.run, phases=tuple(phases)),
        findings=tuple(findings),
        views=views,
    )


def _eval_context(path: Path, rc: dict[str, Any]) -> dict[str, Any]:
    """The run context the evaluation trace is analyzed with."""
    ev = rc.get("eval") or {}
    return {
        **rc,
        "trace": path.name,
        "trace_scope": ev.get("scope"),
        "window_steps": ev.get("steps"),
        "step_source": "forward",
        "phase": "eval",
        "notes": [],
        "eval": None,
    }
