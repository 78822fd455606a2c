"""The phases of one ``advisor profile`` run in one report: the main window (``trace.json.gz``,
training, or evaluation for a script without an optimizer) and the evaluation window recorded
after it (``trace.eval.json.gz``, run.json ``eval``; see :mod:`advisor.profile.evalwindow`).

:func:`with_phases` analyzes the evaluation trace with the same options and adds its findings
after the main window's, each marked ``phase: "eval"`` (its savings and percentages are per
evaluation step); findings.json ``run.phases`` gets one row per phase: ``phase``, ``trace``,
``steps_profiled``, ``step_ms_median``, ``findings`` (their ids), or for a phase not
captured ``captured: false``, ``missing`` (a code: ``ended``, ``eval-wait``,
``no-eval-code``, ``not-requested``, ``no-training-window``, ``no-training``, ...) and ``why``
(the sentence run.json ``missing_phases`` holds).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from advisor.analysis.pipeline import Options
    from advisor.report import Report

EVAL_SUFFIX = ".eval.json.gz"


def _row(phase: str, trace: str, report: Report) -> dict[str, Any]:
    return {
        "phase": phase,
        "trace": trace,
        "steps_profiled": report.run.get("steps_profiled"),
        "step_ms_median": report.run.get("step_ms_median"),
        "findings": [f.id for f in report.findings],
    }


def eval_trace(trace_path: Path, run_ctx: dict[str, Any] | None) -> Path | None:
    """The evaluation window's trace beside ``trace_path``, when run.json names one."""
    ev = (run_ctx or {}).get("eval")
    name = ev.get("trace") if isinstance(ev, dict) and ev.get("trace_written") else None
    if not isinstance(name, str) or "/" in name or "\\" in name:
        return None
    p = trace_path.parent / name
    return p if p.is_file() else None


def with_phases(
    report: Report, trace_path: Path, run_ctx: dict[str, Any] | None, options: Options | None
) -> Report:
    """``report`` (the main window) with ``run.phases`` and the evaluation window's findings;
    unchanged for a trace without a run.json that records phases."""
    rc = run_ctx or {}
    first = rc.get("phase")
    if first not in ("train", "eval"):
        return report
    phases = [_row(first, trace_path.name, report)]
    findings = list(report.findings)
    views = dict(report.views)
    ev = rc.get("eval")
    path = eval_trace(trace_path, rc)
    if path is not None:
        ev_report = _analyze_eval(path, rc, options)
        phases.append(_row("eval", path.name, ev_report))
        findings += [replace(f, phase="eval") for f in ev_report.findings]
        sources = {**(ev_report.views.get("sources") or {}), **(views.get("sources") or {})}
        if sources:
            views["sources"] = sources
    missing = rc.get("missing_phases")
    if isinstance(missing, list):  # every phase not captured, with why (advisor profile)
        for m in missing:
            if isinstance(m, dict) and m.get("phase") in ("train", "eval"):
                phases.append(
                    {
                        "phase": m["phase"],
                        "captured": False,
                        "missing": m.get("missing"),
                        "why": m.get("why"),
                    }
                )
    elif path is None and isinstance(ev, dict) and first == "train":  # run.json before it
        phases.append({"phase": "eval", "captured": False, "missing": ev.get("missing")})
    return replace(
        report, run={**report.run, "phases": phases}, findings=tuple(findings), views=views
    )


def _analyze_eval(path: Path, rc: dict[str, Any], options: Options | None) -> Report:
    from advisor.analysis.pipeline import Options, analyze_trace
    from advisor.trace import load_trace

    opts = options or Options()
    ev = rc.get("eval") or {}
    ctx = {
        **rc,
        "trace": path.name,
        "trace_scope": ev.get("scope"),
        "window_steps": ev.get("steps"),
        "step_source": "forward",
        "phase": "eval",
        "notes": [],
        "eval": None,
    }
    return analyze_trace(load_trace(path, opts.max_trace_bytes), ctx, opts)
