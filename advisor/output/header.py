"""The head of report.html: title, command, device, the fact tiles (steps, median step, GPU busy,
memory, phases, possible saving, what bounds the step) and the notes on how the run went and
what the trace is missing. Selection and formatting of the Report only."""

from __future__ import annotations

from pathlib import Path

from advisor.derive.sources import withheld_note
from advisor.output.doctext import counted, date_str
from advisor.report import Report
from advisor.runfacts import Bound, RunFacts
from advisor.units import fmt_bytes, fmt_ms, fmt_pct
from advisor.viewdata import DeviceView, Views

BOUND_LABELS = {
    "host": "host",
    "gpu": "GPU compute",
    "comm": "communication",
    "copies": "copies",
    "peer": "waiting for peers",
    "untraced": "waits the trace does not explain",
}


def _device(views: Views) -> DeviceView:
    return views.one_trace.device if views.one_trace is not None else DeviceView()


def _steps_note(run: RunFacts) -> str:
    src = (run.steady.steps_source if run.steady is not None else None) or ""
    if src.startswith("micro-benchmark"):
        return src.removeprefix("micro-benchmark: ")
    if run.steps_synthetic:
        left = run.steady is not None and run.steady.steps_excluded
        return "the recording without its set-up = 1 step" if left else "whole trace = 1 step"
    return f"from {src} ranges" if src else ""


def _facts(run: RunFacts, views: Views, n_findings: int) -> list[dict[str, str]]:
    dev = _device(views)
    facts = [
        {"label": "Steps captured", "value": f"{run.steps_profiled}", "note": _steps_note(run)},
        {"label": "Median step", "value": fmt_ms(run.step_ms_median), "note": _mean_note(run)},
        {
            "label": "GPU busy",
            "value": fmt_pct(run.gpu_busy_pct),
            "note": "of the steps' wall time"
            + (", mean of the ranks" if run.ranks is not None else ""),
        },
    ]
    if run.host_own_pct is not None:
        facts.append(
            {
                "label": "Host's own work",
                "value": fmt_pct(run.host_own_pct),
                "note": "of the steps' wall time, not waiting for the GPU"
                + (", mean of the ranks" if run.ranks is not None else ""),
            }
        )
    peak, total = dev.peak_memory_bytes, dev.total_memory_bytes
    facts.append(
        {
            "label": "Peak memory",
            "value": fmt_bytes(peak) or "not recorded",
            "note": f"of {fmt_bytes(total)}" if peak and total else "",
        }
    )
    facts += _phase_facts(run)
    bound = float(run.est_savings_bound_ms or 0.0)
    step = run.saving_step_ms
    pct = f"{100.0 * bound / step:.0f}% of step, " if step > 0 and bound > 0 else ""
    how = "replayed together, " if run.est_savings_bound_how == "replayed together" else ""
    facts.append(
        {
            "label": "Possible saving",
            "value": f"≤ {fmt_ms(bound)}" if bound else "none",
            "note": f"{pct}{how}{n_findings} finding(s)",
        }
    )
    bt = bound_fact(run.bound)
    if bt is not None:
        facts.append(bt)
    return facts


def _mean_note(run: RunFacts) -> str:
    """The mean step, when some steps run far longer than the median one (savings are means
    per step, shares of the mean step)."""
    mean, med = run.step_ms_mean, float(run.step_ms_median or 0.0)
    if mean is None or med <= 0 or abs(mean - med) < 0.1 * med:
        return ""
    return f"mean {fmt_ms(mean)} (savings are per step on average)"


def bound_fact(b: Bound | None) -> dict[str, str] | None:
    """The "Bound by" tile: the largest share of the steps' critical path (run.bound)."""
    if b is None or b.by not in b.shares_pct:
        return None
    sh = b.shares_pct
    rest = ", ".join(
        f"{BOUND_LABELS.get(k, k)} {v:.0f}%"
        for k, v in sorted(sh.items(), key=lambda kv: -kv[1])
        if k != b.by and v >= 1
    )
    return {
        "label": "Bound by",
        "value": f"{BOUND_LABELS.get(b.by, b.by)} {sh[b.by]:.0f}%",
        "note": "of the critical path" + (f"; {rest}" if rest else ""),
    }


def _phase_facts(run: RunFacts) -> list[dict[str, str]]:
    """One fact per phase after the main window (findings.json ``run.phases``)."""
    out = []
    for ph in (run.phases or ())[1:]:
        name = ph.phase.capitalize()
        if ph.missed is not None:
            why = {
                "ended": "the script ended first",
                "max-seconds": "not within --max-seconds",
                "eval-wait": "none came within the wait",
                "epoch-left": "the epoch was longer than the wait",
                "next-epoch": "the next epoch began without one",
                "no-eval-code": "no evaluation code in the script",
                "not-requested": "not asked for (--phases)",
                "no-training-window": "the run ended before it",
                "no-training": "the script does not train",
                "export-error": "its trace could not be written",
            }.get(str(ph.missed.missing), ph.missed.why or "")
            out.append({"label": f"{name} phase", "value": "not captured", "note": why})
            continue
        if ph.window is None:
            continue
        w = ph.window
        out.append(
            {
                "label": f"{name} step",
                "value": fmt_ms(float(w.step_ms_median or 0)),
                "note": f"median of {w.steps_profiled} step(s), {len(w.findings)} finding(s)",
            }
        )
    return out


def _notes(report: Report) -> list[dict[str, str]]:
    run, views = report.run, report.views
    notes = [  # first: the trace misses GPU work, which the figures cannot claim
        {"level": "warn", "text": f"Trace quality: {q.what} {q.effect}"}
        for q in run.trace_quality
        if q.kind == "untraced"
    ]
    for text in run.notes:  # how an ``advisor profile`` run went (run.json)
        notes.append({"level": "info", "text": text})
    if run.ended_early:
        notes.append(
            {
                "level": "warn",
                "text": "The run ended early "
                f"({run.end_reason or 'reason unknown'}): the figures cover only "
                "what was captured before that.",
            }
        )
    how = run.device_source or ""
    if how and how not in ("deviceProperties", "run.json"):
        notes.append({"level": "info", "text": f"Device {run.device}: {how}."})
    if run.gpu_busy_pct is None:
        notes.append(
            {
                "level": "warn",
                "text": "No GPU activity in this trace: GPU checks were "
                "skipped or report what the pattern will cost on a GPU, without savings.",
            }
        )
    if run.trace_kind and run.trace_kind_evidence:
        notes.append(
            {"level": "info", "text": f"Trace kind: {run.trace_kind} ({run.trace_kind_evidence})."}
        )
    if run.trace_kind == "micro-benchmark":
        notes.append(
            {
                "level": "info",
                "text": "The step is the measured window: the repeated calls are iterations "
                "of the benchmark, not steps of a model.",
            }
        )
    elif run.steps_synthetic:
        notes.append(
            {
                "level": "info",
                "text": "No ProfilerStep markers and no unit of work that repeats: the "
                "recording is treated as one step (profile with a schedule to get per-step "
                "figures).",
            }
        )
    notes += _step_notes(run)
    one = views.one_trace
    total = one.steps_total if one is not None else 0
    shown = len(one.steps) if one is not None else 0
    if total > shown > 0:
        notes.append(
            {"level": "info", "text": f"The charts show the first {shown} of {total} steps."}
        )
    if run.events_skipped and not run.trace_quality:  # else a trace-quality note says it
        notes.append(
            {
                "level": "info",
                "text": f"{run.events_skipped:,} malformed trace "
                "events were skipped while loading.",
            }
        )
    if views.sources_withheld:
        notes.append({"level": "info", "text": withheld_note(list(views.sources_withheld))})
    if report.errored:
        notes.append(
            {
                "level": "warn",
                "text": f"{len(report.errored)} check(s) failed with an "
                "error (listed at the bottom); the other results are unaffected.",
            }
        )
    return notes


def _step_notes(run: RunFacts) -> list[dict[str, str]]:
    """How the steady steps were found and what was left out; what the trace is missing."""
    notes = []
    steady = run.steady
    src = (steady.steps_source if steady is not None else None) or ""
    if src and src not in ("ProfilerStep", "whole trace") and not src.startswith("micro-benchmark"):
        notes.append(
            {
                "level": "info",
                "text": f"No ProfilerStep markers: steps were found from {src} ranges.",
            }
        )
    if run.step_unit and run.step_unit != "ProfilerStep#N" and not run.steps_synthetic:
        why = f" ({run.step_unit_evidence})" if run.step_unit_evidence else ""
        notes.append({"level": "info", "text": f"Step unit: {run.step_unit}{why}."})
    left = steady.steps_excluded if steady is not None else ()
    if left:
        ms = sum(float(e.ms or 0.0) for e in left)
        notes.append(
            {
                "level": "info",
                "text": f"{fmt_ms(ms)} of the window is left out of the "
                "per-step figures: " + "; ".join(e.reason for e in left) + ".",
            }
        )
    for q in run.trace_quality:
        if q.kind != "untraced":  # (those lead the notes)
            notes.append({"level": "warn", "text": f"Trace quality: {q.what} {q.effect}"})
    return notes


def header(report: Report, generated_at: str) -> dict[str, object]:
    """The head of the report (title, command, device, versions, facts, notes)."""
    run, views = report.run, report.views
    dev = _device(views)
    script = run.script
    argv = [str(a) for a in (run.argv or ())]
    command = " ".join(["python", str(script), *argv]) if script else None
    dev_parts = [dev.name or run.device]
    cc = dev.compute_capability or run.compute_capability
    if cc:
        dev_parts.append(f"compute capability {cc}")
    if dev.total_memory_bytes:
        dev_parts.append(fmt_bytes(dev.total_memory_bytes))
    versions = [
        f"torch {run.torch}" if run.torch else None,
        f"CUDA {run.cuda}" if run.cuda else None,
    ]
    trace = views.one_trace.trace if views.one_trace is not None else None
    file = trace.file if trace is not None else None
    facts = [{**f, "note": counted(f["note"])} for f in _facts(run, views, len(report.findings))]
    return {
        "title": f"torch-advisor: {Path(str(script)).name}"
        if script
        else f"torch-advisor: {file or Path(run.trace or 'trace').name}",
        "command": command,
        "trace_path": run.trace,
        "recorded_at": date_str(str(trace.recorded_at))
        if trace is not None and trace.recorded_at
        else None,
        "generated_at": generated_at,
        "device": " · ".join(p for p in dev_parts if p)
        if dev_parts[0]
        else ("unknown GPU" if run.gpu_busy_pct is not None else "no GPU (CPU-only trace)"),
        "versions": " · ".join(v for v in versions if v) or None,
        "kind": "nothing profiled: the script ended before its first step"
        if run.before_first_step
        else run.trace_kind,
        "before_first_step": bool(run.before_first_step),
        "rank": None if run.rank is None else f"rank {run.rank} of {run.world_size}",
        "facts": facts,
        # a balanced grid: one row up to 4 cards, else two rows as even as can be (6 -> 3 + 3)
        "fact_columns": len(facts) if len(facts) <= 4 else -(-len(facts) // 2),
        "notes": [{**n, "text": counted(n["text"])} for n in _notes(report)],
    }
