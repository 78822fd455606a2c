"""Terminal table of the ranks of a multi-rank analysis (``run.ranks``), side by side."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from advisor.output.printable import printable


def _f(v: Any, fmt: str) -> str:
    return "–" if v is None else format(v, fmt)


def print_ranks(con: Console, run: dict[str, Any], top: int = 16) -> None:
    ranks = run.get("ranks") or []
    if not ranks:
        return
    world = run.get("world_size")
    missing = run.get("ranks_missing") or []
    head = f"{len(ranks)} trace(s)" + (f" of {world} ranks" if world else "")
    if missing:
        head += f"; no trace for {len(missing)} rank(s)"
    con.print(head)
    t = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for col in ("rank", "step ms", "GPU busy %", "comm %", "overlap %", "exposed ms", "lag ms"):
        t.add_column(col, justify="right")
    t.add_column("trace")
    # the slowest ranks first when there are many
    rows = (
        sorted(ranks, key=lambda r: -(r.get("lag_ms_per_step") or 0.0))
        if len(ranks) > top
        else ranks
    )
    for r in rows[:top]:
        t.add_row(
            _f(r.get("rank"), "d"),
            _f(r.get("step_ms_median"), ".2f"),
            _f(r.get("gpu_busy_pct"), ".1f"),
            _f(r.get("comm_pct"), ".1f"),
            _f(r.get("comm_overlap_pct"), ".1f"),
            _f(r.get("exposed_comm_ms_per_step"), ".2f"),
            _f(r.get("lag_ms_per_step"), ".2f"),
            Text(
                printable(r.get("trace"))
                + (f" (unreadable: {printable(r['error'])})" if r.get("error") else "")
            ),
        )
    con.print(t)
    if len(rows) > top:
        con.print(f"... and {len(rows) - top} more ranks in the report")
    line = standouts(run.get("ranks_summary") or {})
    if line:
        con.print(line, markup=False, highlight=False)


def standouts(summary: dict[str, Any]) -> str:
    """One line naming the straggler and the outliers (advisor.multirank.rankstats)."""
    parts = []
    strag = summary.get("straggler")
    if strag:
        parts.append(f"straggler: rank {strag['rank']} (+{strag['lag_ms_per_step']:.2f} ms/step)")
    for m in (summary.get("metrics") or {}).values():
        outs = m.get("outliers") or []
        if outs:
            unit = "%" if m.get("unit") == "%" else " ms"
            shown = ", ".join(f"rank {o['rank']} ({o['value']:.2f}{unit})" for o in outs[:5])
            more = f" and {len(outs) - 5} more" if len(outs) > 5 else ""
            parts.append(f"{str(m.get('label', '')).lower()} outliers: {shown}{more}")
    return "; ".join(parts)
