"""Report -> the plain dict the HTML template gets (golden-tested as JSON).

Everything here is selection and formatting of what the Report already holds (numbers to
strings, chart geometry, evidence capped at ``MAX_EVIDENCE`` rows); nothing is measured.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

from advisor.derive.sources import withheld_note
from advisor.findings import Finding
from advisor.output.charts import fmt_ms, savings_chart, steps_chart, util_chart
from advisor.output.rankmap import HEATMAP_ABOVE, notable_ranks, rank_heatmap
from advisor.output.tables import compiled_rows, kernel_limits_known, kernel_rows, op_rows
from advisor.report import Report

MAX_EVIDENCE = 8
PERFETTO_URL = "https://ui.perfetto.dev"
_CODE_RE = re.compile(r"`([^`]+)`")


def fmt_bytes(n: float | None) -> str | None:
    if n is None:
        return None
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return None


def inline(text: str) -> list[dict[str, Any]]:
    """Text with `code` spans split out: [{"text": ..., "code": bool}]."""
    parts = []
    for i, piece in enumerate(_CODE_RE.split(text)):
        if piece:
            parts.append({"text": piece, "code": i % 2 == 1})
    return parts


def doc_blocks(doc: str) -> list[dict[str, Any]]:
    """A docstring as paragraphs and bullet lists (a tiny subset of Markdown, escaped later).

    Blank lines separate paragraphs; ``- `` or ``* `` starts a list item; indented lines after
    an item continue it; `backticks` mark code."""
    blocks: list[dict[str, Any]] = []
    para: list[str] = []
    items: list[str] = []

    def flush() -> None:
        if para:
            blocks.append({"kind": "p", "parts": inline(" ".join(para))})
            para.clear()
        if items:
            blocks.append({"kind": "list", "items": [inline(it) for it in items]})
            items.clear()

    for raw in inspect.cleandoc(doc or "").splitlines():
        s = raw.strip()
        if not s:
            flush()
        elif s.startswith(("- ", "* ")):
            if para:
                flush()
            items.append(s[2:].strip())
        elif items and raw[:1].isspace():
            items[-1] += " " + s
        else:
            if items:
                flush()
            para.append(s)
    flush()
    return blocks


def _saving(f: Finding) -> dict[str, Any]:
    if f.est_savings_ms <= 0:
        return {"ms": "no measured saving", "pct": "", "range": None, "value": 0.0}
    r = f.est_savings_range_ms
    return {
        "ms": f"{fmt_ms(f.est_savings_ms)}/step",
        "pct": f"{f.est_savings_pct:.1f}% of step",
        "range": f"{fmt_ms(r[0])} to {fmt_ms(r[1])}" if r else None,
        "value": f.est_savings_ms,
    }


def _evidence(f: Finding, origin_us: float | None) -> dict[str, Any]:
    rows = []
    for e in f.evidence[:MAX_EVIDENCE]:
        ts = e.example_ts_us
        rel = (
            f"+{(ts - origin_us) / 1000.0:,.3f} ms"
            if ts is not None and origin_us is not None
            else ""
        )
        rows.append(
            {
                "what": e.what,
                "count": f"{e.count:,}",
                "total": f"{e.total_ms:,.3f}",
                "at": rel,
                "ts": "" if ts is None else f"{ts:.3f}",
            }
        )
    return {"rows": rows, "more": max(0, len(f.evidence) - MAX_EVIDENCE)}


# how a location's line is known (Location.line_is), said under it; nothing for an exact line
LINE_IS = {
    "last-call": "This work ran without a Python call (as `if tensor:`, `float(t)` or an "
    "operator do): the line shown is the function's last call before it, usually the same "
    "line or the one just before.",
    "frame-start": "The line where this function stood when the trace began (or its `def` "
    "line), not the line that was running: the trace has no call sites. `advisor profile` "
    "records them, so its findings name the exact line.",
}


def _locations(f: Finding, sources: dict[str, Any] | None) -> list[dict[str, Any]]:
    out = []
    for i, loc in enumerate(f.locations):
        snip = (sources or {}).get(f"{loc.file}:{loc.line}") if i < 3 else None
        code = None
        if snip:
            code = [
                {"no": snip["start"] + j, "text": t, "hot": snip["start"] + j == loc.line}
                for j, t in enumerate(snip["lines"])
            ]
        out.append(
            {
                "label": f"{Path(loc.file).name}:{loc.line}",
                "file": loc.file,
                "line": loc.line,
                "function": loc.function,
                "count": f"{loc.count:,}",
                "code": code,
                "how": inline(LINE_IS[loc.line_is]) if loc.line_is in LINE_IS else None,
            }
        )
    return out


def _card(rank: int, f: Finding, views: dict[str, Any], origin_us: float | None) -> dict[str, Any]:
    det = (views.get("detectors") or {}).get(f.id) or {}
    return {
        "rank": rank,
        "anchor": f"f{rank}",
        "id": f.id,
        "title": f.title,
        "severity": f.severity,
        "confidence": f.confidence,
        "saving": _saving(f),
        "summary": inline(f.summary),
        "recommendation": inline(f.recommendation),
        "snippet": f.snippet,
        "evidence": _evidence(f, origin_us),
        "locations": _locations(f, views.get("sources")),
        "why": doc_blocks(det.get("doc") or ""),
        "assumptions": list(f.assumptions),
        "where": f"{Path(f.locations[0].file).name}:{f.locations[0].line}" if f.locations else "",
        "phase": f.phase,
    }


def _steps_note(run: dict[str, Any]) -> str:
    src = str(run.get("steps_source") or "")
    if src.startswith("micro-benchmark"):
        return src.removeprefix("micro-benchmark: ")
    if run.get("steps_synthetic"):
        return "whole trace = 1 step"
    return f"from {src} ranges" if src else ""


def _facts(run: dict[str, Any], views: dict[str, Any], n_findings: int) -> list[dict[str, str]]:
    dev = views.get("device") or {}
    steps = run.get("steps_profiled")
    facts = [
        {
            "label": "Steps captured",
            "value": f"{steps}" if steps is not None else "unknown",
            "note": _steps_note(run),
        },
        {
            "label": "Median step",
            "value": fmt_ms(float(run.get("step_ms_median") or 0.0)),
            "note": "",
        },
        {
            "label": "GPU busy",
            "value": "n/a" if run.get("gpu_busy_pct") is None else f"{run['gpu_busy_pct']:.1f}%",
            "note": "of the steps' wall time",
        },
    ]
    peak, total = dev.get("peak_memory_bytes"), dev.get("total_memory_bytes")
    facts.append(
        {
            "label": "Peak memory",
            "value": fmt_bytes(peak) or "not recorded",
            "note": f"of {fmt_bytes(total)}" if peak and total else "",
        }
    )
    facts += _phase_facts(run)
    bound = float(run.get("est_savings_bound_ms") or 0.0)
    step = float(run.get("step_ms_median") or 0.0)
    pct = f"{100.0 * bound / step:.0f}% of step, " if step > 0 and bound > 0 else ""
    how = "replayed together, " if run.get("est_savings_bound_how") == "replayed together" else ""
    facts.append(
        {
            "label": "Possible saving",
            "value": f"≤ {fmt_ms(bound)}" if bound else "none",
            "note": f"{pct}{how}{n_findings} finding(s)",
        }
    )
    bt = bound_fact(run.get("bound"))
    if bt is not None:
        facts.append(bt)
    return facts


BOUND_LABELS = {
    "host": "host",
    "gpu": "GPU compute",
    "comm": "communication",
    "copies": "copies",
    "peer": "waiting for peers",
}


def bound_fact(b: Any) -> dict[str, str] | None:
    """The "Bound by" tile: the largest share of the steps' critical path (run.bound)."""
    if not isinstance(b, dict) or not isinstance(b.get("shares_pct"), dict):
        return None
    sh = {k: float(v) for k, v in b["shares_pct"].items() if isinstance(v, (int, float))}
    by = str(b.get("by") or "")
    if by not in sh:
        return None
    rest = ", ".join(
        f"{BOUND_LABELS.get(k, k)} {v:.0f}%"
        for k, v in sorted(sh.items(), key=lambda kv: -kv[1])
        if k != by and v >= 1
    )
    return {
        "label": "Bound by",
        "value": f"{BOUND_LABELS.get(by, by)} {sh[by]:.0f}%",
        "note": "of the critical path" + (f"; {rest}" if rest else ""),
    }


def _phase_facts(run: dict[str, Any]) -> list[dict[str, str]]:
    """One fact per phase after the main window (findings.json ``run.phases``)."""
    out = []
    for ph in (run.get("phases") or [])[1:]:
        if not isinstance(ph, dict):
            continue
        name = str(ph.get("phase") or "").capitalize()
        if ph.get("captured") is False:
            why = {
                "ended": "the script ended first",
                "max-seconds": "not within --max-seconds",
            }.get(str(ph.get("missing")), "")
            out.append({"label": f"{name} phase", "value": "not captured", "note": why})
            continue
        n = len(ph.get("findings") or ())
        out.append(
            {
                "label": f"{name} step",
                "value": fmt_ms(float(ph.get("step_ms_median") or 0)),
                "note": f"median of {ph.get('steps_profiled')} step(s), {n} finding(s)",
            }
        )
    return out


def _notes(report: Report) -> list[dict[str, str]]:
    run = report.run
    notes = []
    for text in run.get("notes") or ():  # how an ``advisor profile`` run went (run.json)
        notes.append({"level": "info", "text": str(text)})
    if run.get("ended_early"):
        notes.append(
            {
                "level": "warn",
                "text": "The run ended early "
                f"({run.get('end_reason') or 'reason unknown'}): the figures cover only "
                "what was captured before that.",
            }
        )
    how = str(run.get("device_source") or "")
    if how and how not in ("deviceProperties", "run.json"):
        notes.append({"level": "info", "text": f"Device {run.get('device')}: {how}."})
    if run.get("gpu_busy_pct") is None:
        notes.append(
            {
                "level": "warn",
                "text": "No GPU activity in this trace: GPU checks were "
                "skipped or report what the pattern will cost on a GPU, without savings.",
            }
        )
    if run.get("trace_kind") and run.get("trace_kind_evidence"):
        notes.append(
            {
                "level": "info",
                "text": f"Trace kind: {run['trace_kind']} ({run['trace_kind_evidence']}).",
            }
        )
    if run.get("trace_kind") == "micro-benchmark":
        notes.append(
            {
                "level": "info",
                "text": "The step is the measured window: the repeated calls are iterations "
                "of the benchmark, not steps of a model.",
            }
        )
    elif run.get("steps_synthetic"):
        notes.append(
            {
                "level": "info",
                "text": "No ProfilerStep markers: the whole trace is "
                "treated as one step (profile with a schedule to get per-step figures).",
            }
        )
    notes += _step_notes(run)
    total = int(report.views.get("steps_total") or 0)
    shown = len(report.views.get("steps") or ())
    if total > shown > 0:
        notes.append(
            {"level": "info", "text": f"The charts show the first {shown} of {total} steps."}
        )
    if run.get("events_skipped") and "trace_quality" not in run:  # else a trace-quality note
        notes.append(
            {
                "level": "info",
                "text": f"{run['events_skipped']:,} malformed trace "
                "events were skipped while loading.",
            }
        )
    withheld = report.views.get("sources_withheld")
    if isinstance(withheld, list) and withheld:
        notes.append({"level": "info", "text": withheld_note([str(w) for w in withheld])})
    if report.errored:
        notes.append(
            {
                "level": "warn",
                "text": f"{len(report.errored)} check(s) failed with an "
                "error and are listed at the bottom; the other results are unaffected.",
            }
        )
    return notes


def _step_notes(run: dict[str, Any]) -> list[dict[str, str]]:
    """How the steady steps were found and what was left out; what the trace is missing."""
    notes, left = [], [e for e in run.get("steps_excluded") or () if isinstance(e, dict)]
    src = str(run.get("steps_source") or "")
    if src and src != "ProfilerStep" and not src.startswith("micro-benchmark"):
        notes.append(
            {
                "level": "info",
                "text": "No ProfilerStep markers: steps were found from "
                f"{run['steps_source']} ranges.",
            }
        )
    if left:
        ms = sum(float(e.get("ms") or 0.0) for e in left)
        notes.append(
            {
                "level": "info",
                "text": f"{fmt_ms(ms)} of the window is left out of the "
                "per-step figures: " + "; ".join(str(e.get("reason")) for e in left) + ".",
            }
        )
    for q in run.get("trace_quality") or ():
        if isinstance(q, dict):
            notes.append(
                {"level": "warn", "text": f"Trace quality: {q.get('what')} {q.get('effect')}"}
            )
    return notes


def _header(report: Report, generated_at: str) -> dict[str, Any]:
    run, views = report.run, report.views
    dev = views.get("device") or {}
    script = run.get("script")
    argv = [str(a) for a in (run.get("argv") or [])]
    command = " ".join(["python", str(script), *argv]) if script else None
    dev_parts = [dev.get("name") or run.get("device")]
    cc = dev.get("compute_capability") or run.get("compute_capability")
    if cc:
        dev_parts.append(f"compute capability {cc}")
    if dev.get("total_memory_bytes"):
        dev_parts.append(fmt_bytes(dev["total_memory_bytes"]))
    versions = [
        f"torch {run['torch']}" if run.get("torch") else None,
        f"CUDA {run['cuda']}" if run.get("cuda") else None,
    ]
    trace = views.get("trace") or {}
    return {
        "title": f"torch-advisor: {Path(str(script)).name}"
        if script
        else f"torch-advisor: {trace.get('file') or Path(str(run.get('trace') or 'trace')).name}",
        "command": command,
        "trace_path": run.get("trace"),
        "recorded_at": trace.get("recorded_at"),
        "generated_at": generated_at,
        "device": " · ".join(p for p in dev_parts if p)
        if dev_parts[0]
        else ("unknown GPU" if run.get("gpu_busy_pct") is not None else "no GPU (CPU-only trace)"),
        "versions": " · ".join(v for v in versions if v) or None,
        "kind": run.get("trace_kind"),
        "rank": None
        if run.get("rank") is None
        else f"rank {run['rank']} of {run.get('world_size')}",
        "facts": _facts(run, views, len(report.findings)),
        "notes": _notes(report),
    }


def _pct(v: Any) -> str:
    return "n/a" if v is None else f"{v:.1f}%"


def _ranks(run: dict[str, Any], only: set[int] | None = None) -> list[dict[str, str]]:
    rows = []
    for r in run.get("ranks") or ():
        if isinstance(r, dict) and (only is None or r.get("rank") in only):
            lag, exp = r.get("lag_ms_per_step"), r.get("exposed_comm_ms_per_step")
            rows.append(
                {
                    "rank": str(r.get("rank")),
                    "step": fmt_ms(float(r.get("step_ms_median") or 0.0)),
                    "busy": _pct(r.get("gpu_busy_pct")),
                    "comm": _pct(r.get("comm_pct")),
                    "overlap": _pct(r.get("comm_overlap_pct")),
                    "exposed": "n/a" if exp is None else fmt_ms(float(exp)),
                    "lag": "n/a" if lag is None else f"{lag:+.2f} ms",
                    "trace": str(r.get("trace") or ""),
                    "error": str(r.get("error") or ""),
                }
            )
    return rows


def _ranks_note(run: dict[str, Any]) -> str | None:
    missing = list(run.get("ranks_missing") or ())
    if not missing:
        return None
    shown = ", ".join(str(m) for m in missing[:20]) + (", ..." if len(missing) > 20 else "")
    return (
        f"No trace for {len(missing)} of {run.get('world_size')} rank(s): {shown}. "
        "The figures cover the ranks analysed."
    )


def _rank_views(run: dict[str, Any]) -> dict[str, Any]:
    """Up to ``HEATMAP_ABOVE`` ranks: a row each. Above: the heatmap, and rows for the
    straggler, the outliers and the slowest ranks only."""
    n = len(run.get("ranks") or ())
    if n <= HEATMAP_ABOVE or not run.get("ranks_summary"):
        return {"ranks": _ranks(run), "rankmap": None, "ranks_short": None}
    heat = rank_heatmap(run)
    short = notable_ranks(run)
    strag = (run.get("ranks_summary") or {}).get("straggler")
    lead = (
        (
            f"Straggler: rank {strag['rank']} (the others wait {strag['lag_ms_per_step']:.2f} "
            "ms per step for it). "
        )
        if strag
        else "No straggler. "
    )
    return {
        "ranks": _ranks(run, short),
        "rankmap": heat,
        "ranks_short": f"{lead}The table lists {len(short)} of {n} ranks: the straggler, the "
        "outliers of each metric and the five slowest; the heatmap shows "
        "every rank (findings.json has all rows).",
    }


def _footer(report: Report, generated_at: str) -> dict[str, Any]:
    titles = {
        k: (v or {}).get("title", "") for k, v in (report.views.get("detectors") or {}).items()
    }
    return {
        "skipped": [
            {"id": s.id, "title": titles.get(s.id, ""), "reason": s.reason} for s in report.skipped
        ],
        "errored": [
            {"id": e.id, "title": titles.get(e.id, ""), "error": e.error} for e in report.errored
        ],
        "thresholds": [{"key": k, "value": f"{v:g}"} for k, v in sorted(report.thresholds.items())],
        "version": report.advisor_version,
        "generated_at": generated_at,
    }


def build_viewmodel(
    report: Report, generated_at: str, annotated_trace: str | None = None
) -> dict[str, Any]:
    """The template's whole input. ``generated_at`` is passed in so the output is reproducible."""
    views = report.views
    trace = views.get("trace") or {}
    origin = trace.get("origin_us")
    steps = list(views.get("steps") or ())
    cards = [_card(i, f, views, origin) for i, f in enumerate(report.findings, 1)]
    summary = [
        {k: c[k] for k in ("rank", "anchor", "id", "title", "severity", "confidence", "where")}
        | {"saving": c["saving"]["ms"], "pct": c["saving"]["pct"], "sort": c["saving"]["value"]}
        for c in cards
    ]
    trace_name = trace.get("file") or Path(str(report.run.get("trace") or "")).name or None
    return {
        "header": _header(report, generated_at),
        "top_kernels": kernel_rows(views),
        "top_kernels_limit": kernel_limits_known(views),
        "compiled": compiled_rows(views),
        "top_ops": op_rows(views),
        "top_ops_gpu": any(
            r.get("gpu_ms") is not None for r in views.get("ops") or () if isinstance(r, dict)
        ),
        **_rank_views(report.run),
        "ranks_note": _ranks_note(report.run),
        "charts": {
            "steps": steps_chart(steps),
            "util": util_chart(views.get("utilization"), steps),
            "savings": savings_chart(report.findings, float(report.run.get("step_ms_median") or 0)),
        },
        "summary": summary,
        "overlap_note": len([f for f in report.findings if f.est_savings_ms > 0]) > 1,
        "findings": cards,
        "deeper": {
            "trace": trace_name,
            "trace_path": report.run.get("trace"),
            "annotated": annotated_trace,
            "perfetto": PERFETTO_URL,
        },
        "footer": _footer(report, generated_at),
    }
