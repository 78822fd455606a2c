"""Report -> the plain dict the HTML template gets (golden-tested as JSON).

Everything here is selection and formatting of what the Report already holds (numbers to
strings, chart geometry, evidence capped at ``MAX_EVIDENCE`` rows); nothing is measured. The
head of the page is :mod:`advisor.output.header`, the Ranks section :mod:`advisor.output.ranks`,
the tables :mod:`advisor.output.tables`, the charts :mod:`advisor.output.charts`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from advisor.findings import Finding
from advisor.output.charts import savings_chart, steps_chart, util_chart
from advisor.output.doctext import counted, doc_blocks, inline, shown_path
from advisor.output.header import header
from advisor.output.phased import phase_groups
from advisor.output.ranks import job_note, rank_views, ranks_note
from advisor.output.tables import (
    collective_rows,
    compiled_rows,
    kernel_limits_known,
    kernel_rows,
    op_rows,
)
from advisor.report import Report
from advisor.units import fmt_ms
from advisor.viewdata import Snippet, Views

MAX_EVIDENCE = 8
PERFETTO_URL = "https://ui.perfetto.dev"


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
                "what": counted(e.what),
                "count": f"{e.count:,}",
                # a row that counts things (kernels, calls) without timing them has no total
                "total": f"{e.total_ms:,.3f}" if e.total_ms else "–",
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


def _locations(f: Finding, sources: Mapping[str, Snippet] | None) -> list[dict[str, Any]]:
    out = []
    for i, loc in enumerate(f.locations):
        snip = (sources or {}).get(f"{loc.file}:{loc.line}") if i < 3 else None
        code = None
        if snip:
            code = [
                {"no": snip.start + j, "text": t, "hot": snip.start + j == loc.line}
                for j, t in enumerate(snip.lines)
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


def _card(rank: int, f: Finding, views: Views, origin_us: float | None) -> dict[str, Any]:
    det = views.detectors.get(f.id)
    return {
        "rank": rank,
        "anchor": f"f{rank}",
        "id": f.id,
        "title": f.title,
        "severity": f.severity,
        "confidence": f.confidence,
        "saving": _saving(f),
        "summary": inline(counted(f.summary)),
        "recommendation": inline(counted(f.recommendation)),
        "snippet": f.snippet,
        "evidence": _evidence(f, origin_us),
        "locations": _locations(f, views.sources),
        "why": doc_blocks((det.doc if det is not None else None) or ""),
        "assumptions": [counted(a) for a in f.assumptions],
        "related": [
            {
                "id": r.id,
                "title": r.title,
                "saving": f"{fmt_ms(r.est_savings_ms)}/step" if r.est_savings_ms > 0 else "",
                "summary": inline(r.summary),
                "shared": f"{r.shared_pct:.0f}%",
            }
            for r in f.related
        ],
        "where": f"{Path(f.locations[0].file).name}:{f.locations[0].line}" if f.locations else "",
        "phase": f.phase,
    }


def _phases(report: Report, summary: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The overview phase by phase (:mod:`advisor.output.phased`): each with its own heading,
    bar scale and table; one group without a heading for a run of one phase."""
    out = []
    for g in phase_groups(report):
        nums = [i for i, _ in g.findings]
        out.append(
            {
                "phase": g.phase,
                "heading": g.heading,
                "per": g.per,
                "step": fmt_ms(g.step_ms) if g.step_ms > 0 else "",
                "chart": savings_chart([f for _, f in g.findings], g.step_ms, nums),
                "rows": [summary[i - 1] for i in nums],
            }
        )
    return out


def _footer(report: Report, generated_at: str) -> dict[str, Any]:
    titles = {k: v.title for k, v in report.views.detectors.items()}
    return {
        "skipped": [
            {"id": s.id, "title": titles.get(s.id, ""), "reason": inline(s.reason)}
            for s in report.skipped
        ],
        "errored": [
            {"id": e.id, "title": titles.get(e.id, ""), "error": inline(e.error)}
            for e in report.errored
        ],
        "thresholds": [{"key": k, "value": f"{v:g}"} for k, v in sorted(report.thresholds.items())],
        "version": report.advisor_version,
        "generated_at": generated_at,
    }


def build_viewmodel(
    report: Report,
    generated_at: str,
    annotated_trace: str | None = None,
    report_dir: str | None = None,
) -> dict[str, Any]:
    """The template's whole input. ``generated_at`` is passed in so the output is reproducible;
    ``report_dir``: the folder the report is written to (paths are shown relative to it)."""
    views = report.views
    one = views.one_trace
    origin = one.trace.origin_us if one is not None else None
    steps = list(one.steps) if one is not None else []
    cards = [_card(i, f, views, origin) for i, f in enumerate(report.findings, 1)]
    summary = [
        {
            k: c[k]
            for k in ("rank", "anchor", "id", "title", "severity", "confidence", "where", "phase")
        }
        | {"saving": c["saving"]["ms"], "pct": c["saving"]["pct"], "sort": c["saving"]["value"]}
        for c in cards
    ]
    trace_name = (
        (one.trace.file if one is not None else None) or Path(report.run.trace or "").name or None
    )
    return {
        "header": {
            **header(report, generated_at),
            "trace_path": shown_path(report.run.trace, report_dir),
        },
        "top_kernels": kernel_rows(views.kernels),
        "top_kernels_limit": kernel_limits_known(views.kernels),
        "compiled": compiled_rows(views.compiled),
        "collectives": collective_rows(views.collectives),
        "top_ops": op_rows(views.ops),
        "top_ops_gpu": any(isinstance(r.gpu_ms, int | float) for r in views.ops),
        **rank_views(report.run),
        "ranks_note": ranks_note(report.run),
        "job_note": job_note(report.run),
        "charts": {
            "steps": steps_chart(steps),
            "util": util_chart(one.utilization if one is not None else None, steps),
            "savings": savings_chart(report.findings, report.run.saving_step_ms),
        },
        "summary": summary,
        "phases": _phases(report, summary),
        "overlap_note": len([f for f in report.findings if f.est_savings_ms > 0]) > 1,
        "findings": cards,
        "deeper": {
            "trace": trace_name,
            "trace_path": shown_path(report.run.trace, report_dir),
            "annotated": annotated_trace,
            "perfetto": PERFETTO_URL,
        },
        "footer": _footer(report, generated_at),
    }
