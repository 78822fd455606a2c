"""The ranks of a multi-rank analysis (``run.ranks``, ``run.ranks_summary``): the terminal's
table and standouts line, and the rows, note and heatmap of the report's Ranks section."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from advisor.output.printable import printable
from advisor.output.rankmap import HEATMAP_ABOVE, notable_ranks, rank_heatmap
from advisor.runfacts import Ranks, RanksSummary, RunFacts
from advisor.units import fmt_ms, fmt_pct


def _f(v: float | None, fmt: str) -> str:
    return "–" if v is None else format(v, fmt)


def print_ranks(con: Console, run: RunFacts, top: int = 16) -> None:
    group = run.ranks
    if group is None or not group.ranks:
        return
    ranks = list(group.ranks)
    world = run.world_size
    missing = group.ranks_missing
    head = f"{len(ranks)} trace(s)" + (f" of {world} ranks" if world else "")
    if missing:
        head += f"; no trace for {len(missing)} rank(s)"
    con.print(head)
    t = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    arrival = any(r.late_ms_per_step is not None for r in ranks)
    cols = ["rank", "step ms", "GPU busy %", "comm %", "overlap %", "exposed ms", "lag ms"]
    for col in cols + (["late ms", "wait ms"] if arrival else []):
        t.add_column(col, justify="right")
    t.add_column("trace")
    # the slowest ranks first when there are many
    rows = sorted(ranks, key=lambda r: -(r.lag_ms_per_step or 0.0)) if len(ranks) > top else ranks
    for r in rows[:top]:
        t.add_row(
            _f(r.rank, "d"),
            _f(r.step_ms_median, ".2f"),
            _f(r.gpu_busy_pct, ".1f"),
            _f(r.comm_pct, ".1f"),
            _f(r.comm_overlap_pct, ".1f"),
            _f(r.exposed_comm_ms_per_step, ".2f"),
            _f(r.lag_ms_per_step, ".2f"),
            *([_f(r.late_ms_per_step, ".2f"), _f(r.wait_ms_per_step, ".2f")] if arrival else []),
            Text(printable(r.trace) + (f" (unreadable: {printable(r.error)})" if r.error else "")),
        )
    con.print(t)
    if len(rows) > top:
        con.print(f"... and {len(rows) - top} more ranks in the report")
    line = standouts(group.ranks_summary)
    if line:
        con.print(line, markup=False, highlight=False)


def standouts(summary: RanksSummary | None) -> str:
    """One line naming the straggler and the outliers (advisor.multirank.rankstats)."""
    if summary is None:
        return ""
    parts = []
    strag = summary.straggler
    if strag:
        parts.append(f"straggler: rank {strag.rank} (+{strag.lag_ms_per_step:.2f} ms/step)")
    for m in summary.metrics.values():
        outs = m.outliers
        if outs:
            unit = "%" if m.unit == "%" else " ms"
            shown = ", ".join(f"rank {o.rank} ({o.value:.2f}{unit})" for o in outs[:5])
            more = f" and {len(outs) - 5} more" if len(outs) > 5 else ""
            parts.append(f"{m.label.lower()} outliers: {shown}{more}")
    return "; ".join(parts)


# ---------------------------------------------------------------- the report's Ranks section


def _rows(group: Ranks, only: set[int] | None = None) -> list[dict[str, str]]:
    rows = []
    for r in group.ranks:
        if only is None or r.rank in only:
            lag, exp = r.lag_ms_per_step, r.exposed_comm_ms_per_step
            rows.append(
                {
                    "rank": str(r.rank),
                    "step": fmt_ms(float(r.step_ms_median or 0.0)),
                    "busy": fmt_pct(r.gpu_busy_pct),
                    "comm": fmt_pct(r.comm_pct),
                    "overlap": fmt_pct(r.comm_overlap_pct),
                    "exposed": "n/a" if exp is None else fmt_ms(float(exp)),
                    "lag": "n/a" if lag is None else f"{lag:+.2f} ms",
                    "late": _ms_or(r.late_ms_per_step),
                    "wait": _ms_or(r.wait_ms_per_step),
                    "trace": str(r.trace or ""),
                    "error": str(r.error or ""),
                }
            )
    return rows


def _ms_or(v: float | None) -> str:
    return "n/a" if v is None else fmt_ms(float(v))


def job_note(run: RunFacts) -> str | None:
    """The job replay's step against the measured one (advisor.replay.job)."""
    job = run.ranks.job_step if run.ranks is not None else None
    if job is None:
        return None
    return (
        f"Job replay: the ranks' step graphs joined at {job.collectives_joined} collective(s) "
        f"give back the job's step (the slowest rank's) as {fmt_ms(job.replayed_ms)} for the "
        f"{fmt_ms(job.measured_ms)} measured; every rank's replayed step is within "
        f"{job.worst_rank_error_pct:.1f}% of its own."
    )


def ranks_note(run: RunFacts) -> str | None:
    """The ranks without a trace, when some are missing."""
    missing = list(run.ranks.ranks_missing) if run.ranks is not None else []
    if not missing:
        return None
    shown = ", ".join(str(m) for m in missing[:20]) + (", ..." if len(missing) > 20 else "")
    return (
        f"No trace for {len(missing)} of {run.world_size} rank(s): {shown}. "
        "The figures cover the ranks analysed."
    )


def rank_views(run: RunFacts) -> dict[str, Any]:
    """Up to ``HEATMAP_ABOVE`` ranks: a row each. Above: the heatmap, and rows for the
    straggler, the outliers and the slowest ranks only."""
    group = run.ranks
    if group is None:
        return {"ranks": [], "rankmap": None, "ranks_short": None}
    n = len(group.ranks)
    if n <= HEATMAP_ABOVE or not group.ranks_summary:
        return {"ranks": _rows(group), "rankmap": None, "ranks_short": None}
    heat = rank_heatmap(group)
    short = notable_ranks(group)
    strag = group.ranks_summary.straggler
    lead = (
        (
            f"Straggler: rank {strag.rank} (the others wait {strag.lag_ms_per_step:.2f} "
            "ms per step for it). "
        )
        if strag
        else "No straggler. "
    )
    return {
        "ranks": _rows(group, short),
        "rankmap": heat,
        "ranks_short": f"{lead}The table lists {len(short)} of {n} ranks: the straggler, the "
        "outliers of each metric and the five slowest; the heatmap shows "
        "every rank (findings.json has all rows).",
    }
