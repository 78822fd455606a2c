"""Terminal output: a compact rich table of the top findings and the files written.

Plain text when stdout is not a TTY; honours NO_COLOR.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TextIO

from rich.console import Console
from rich.table import Table

from advisor.report import Report


def console(file: TextIO | None = None) -> Console:
    f = file or sys.stdout
    tty = f.isatty()
    return Console(
        file=f,
        force_terminal=tty,
        no_color=bool(os.environ.get("NO_COLOR")) or not tty,
        highlight=False,
        soft_wrap=not tty,
        width=None if tty else 120,
    )


def _loc(f) -> str:  # type: ignore[no-untyped-def]
    if not f.locations:
        return ""
    loc = f.locations[0]
    return f"{Path(loc.file).name}:{loc.line}"


def print_summary(
    report: Report, written: dict[str, Path], top: int = 10, file: TextIO | None = None
) -> None:
    con = console(file)
    run = report.run
    head = f"median step {run.get('step_ms_median', 0):.2f} ms over {run.get('steps_profiled')} step(s)"
    if run.get("gpu_busy_pct") is not None:
        head += f", GPU busy {run['gpu_busy_pct']:.1f}%"
    else:
        head += ", no GPU activity"
    if run.get("device"):
        head = f"{run['device']}: " + head
    con.print(head)
    if run.get("ranks"):
        from advisor.render.ranks import print_ranks

        print_ranks(con, run)
    if run.get("ended_early"):
        con.print(f"note: the run ended early ({run.get('end_reason') or 'unknown reason'})")
    if report.findings:
        t = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
        t.add_column("#", justify="right")
        t.add_column("finding")
        t.add_column("sev")
        t.add_column("saves ms", justify="right")
        t.add_column("%", justify="right")
        t.add_column("where")
        t.add_column("summary", overflow="fold")
        for i, f in enumerate(report.findings[:top], 1):
            t.add_row(str(i), f.id, f.severity, f"{f.est_savings_ms:.2f}", f"{f.est_savings_pct:.1f}",
                      _loc(f), f.summary)  # fmt: skip
        con.print(t)
        if len(report.findings) > top:
            con.print(f"... and {len(report.findings) - top} more in the report")
        bound = run.get("est_savings_bound_ms")
        if bound:
            con.print(f"savings overlap; together at most {bound:.2f} ms per step")
    else:
        con.print("no problems found")
    if report.errored:
        con.print(
            f"{len(report.errored)} detector(s) errored: " + ", ".join(e.id for e in report.errored)
        )
    for name, path in written.items():
        con.print(f"{name:>9}: {path}")
