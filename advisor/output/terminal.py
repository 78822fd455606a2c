"""Terminal output: the headline figures, a compact table of the top findings, the files written.

Plain text (no colour, no box drawing, fixed width) when the stream is not a TTY; honours
``NO_COLOR``. :func:`progress` shows a spinner on long loads and analyses, on a TTY only.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from advisor import settings
from advisor.findings import Finding
from advisor.output.header import bound_fact
from advisor.output.phased import phase_groups
from advisor.output.printable import printable
from advisor.report import Report
from advisor.runfacts import RunFacts
from advisor.units import fmt_ms

SEV_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan", "info": "dim"}
LABELS = {"report": "report", "findings": "findings", "annotated": "timeline"}


class _Console(Console):
    """rich's console, except that a reader that went away (``| head``) raises
    :class:`BrokenPipeError` (rich would exit 1 on its own): the command decides what it means
    (:func:`advisor.cli.guard.guarded`: a quiet end, as Unix tools have)."""

    def on_broken_pipe(self) -> None:
        quiet_stdout()
        raise BrokenPipeError("standard output: the reader went away")


def quiet_stdout() -> None:
    """Point stdout at /dev/null, so that no later write or the flush at exit can fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    except OSError:
        pass
    if sys.stdout is None or sys.stdout.closed:
        sys.stdout = open(os.devnull, "w")  # kept until the process ends


def console(file: TextIO | None = None, markup: bool = True) -> Console:
    f = file or sys.stdout
    tty = _isatty(f)
    return _Console(
        file=f,
        force_terminal=tty,
        no_color=settings.no_color() or not tty,
        highlight=False,
        markup=markup,
        emoji=False,
        soft_wrap=not tty,
        width=None if tty else 120,
    )


def _isatty(f: Any) -> bool:
    try:
        return bool(f.isatty())
    except (AttributeError, ValueError):
        return False


PROGRESS_LINES_FROM = 100  # traces: from here stderr that is no terminal gets a line per tenth


class _Progress:
    def __init__(self, status: Any = None, file: TextIO | None = None) -> None:
        self._status = status
        self._file = file  # a stderr that is no terminal (a log), or None
        self._shown = 0  # tenths reported on it

    def update(self, message: str) -> None:
        if self._status is not None:
            self._status.update(Text(message))

    def count(self, done: int, total: int, what: str = "traces") -> None:
        """``done`` of ``total`` finished: the spinner says so; a log gets a line at each
        tenth when there are at least PROGRESS_LINES_FROM."""
        self.update(f"Analyzing {total:,} {what}: {done:,} done")
        if self._file is None or total < PROGRESS_LINES_FROM:
            return
        tenth = done * 10 // total
        if tenth > self._shown:
            self._shown = tenth
            print(f"advisor: analyzed {done:,} of {total:,} {what}", file=self._file, flush=True)


@contextlib.contextmanager
def progress(message: str, file: TextIO | None = None) -> Iterator[_Progress]:
    """A spinner with ``message`` on stderr while the block runs; nothing on a non-TTY."""
    f = file or sys.stderr
    if not _isatty(f):
        yield _Progress(file=f)
        return
    con = Console(file=f, no_color=settings.no_color(), markup=False)
    with con.status(Text(message)) as st:
        yield _Progress(st)


def _where(f: Finding) -> str:
    if not f.locations:
        return ""
    loc = f.locations[0]
    start = " (frame start)" if loc.line_is == "frame-start" else ""
    return printable(f"{Path(loc.file).name}:{loc.line}") + start


def device_label(run: RunFacts) -> str:
    """The device as the header names it: inferred ones say so; a trace with GPU activity but
    no named device is never called CPU-only."""
    if run.device:
        how = run.device_source or ""
        return f"{run.device} (inferred)" if how.startswith("inferred") else run.device
    return "unknown GPU" if run.gpu_busy_pct is not None else "no GPU activity (CPU-only trace)"


def quality_notes(run: RunFacts) -> list[str]:
    """Every trace-quality note the report shows, one line each (what the trace is missing)."""
    return [f"trace quality: {q.what}" for q in run.trace_quality if q.what]


def headline(report: Report) -> str:
    run = report.run
    if run.before_first_step:
        return "the script ended before its first step: nothing of its work was profiled"
    one = report.views.one_trace
    parts = [printable(device_label(run))]
    if run.trace_kind:
        parts.append(printable(run.trace_kind))
    steps = run.steps_profiled
    src = (run.steady.steps_source if run.steady is not None else None) or ""
    if src.startswith("micro-benchmark"):
        how = f" ({printable(src.removeprefix('micro-benchmark: '))})"
    else:
        how = " (no step markers)" if run.steps_synthetic else ""
    parts.append(f"{steps} step{'s' if steps != 1 else ''}{how}")
    parts.append(f"median step {fmt_ms(float(run.step_ms_median or 0))}")
    if run.gpu_busy_pct is not None:
        parts.append(f"GPU busy {run.gpu_busy_pct:.1f}%")
    peak = one.device.peak_memory_bytes if one is not None else None
    if peak:
        parts.append(f"peak memory {peak / 1024**3:.1f} GiB")
    return " · ".join(parts)


def findings_table(
    findings: tuple[Finding, ...], top: int, tty: bool, numbers: tuple[int, ...] = ()
) -> Table:
    t = Table(box=None, show_edge=False, pad_edge=False, header_style="bold" if tty else "")
    t.add_column("#", justify="right")
    t.add_column("severity")
    t.add_column("saves/step", justify="right")
    t.add_column("%", justify="right")
    t.add_column("finding", overflow="fold", max_width=70)
    t.add_column("where", overflow="fold", max_width=40)
    for i, f in zip(numbers or range(1, len(findings) + 1), findings[:top], strict=False):
        saving = f"{f.est_savings_ms:.2f} ms" if f.est_savings_ms > 0 else "-"
        pct = f"{f.est_savings_pct:.1f}" if f.est_savings_ms > 0 else ""
        title = Text(printable(f.title))
        title.append(f"  {printable(f.id)}", style="dim")
        if f.phase:
            title.append(f"  ({f.phase})")
        if f.related:  # the same cause found by other checks: one row
            title.append("  + " + ", ".join(printable(r.id) for r in f.related), style="dim")
        t.add_row(
            str(i),
            Text(f.severity.upper(), style=SEV_STYLE.get(f.severity, "")),
            saving,
            pct,
            title,
            Text(_where(f)),
        )
    return t


def print_summary(
    report: Report, written: dict[str, Path], top: int = 10, file: TextIO | None = None
) -> None:
    con = console(file, markup=False)  # kernel names hold "[...]": never parse them as markup
    tty = con.is_terminal
    run = report.run
    script = run.script
    title = Text("torch-advisor", style="bold")
    if script:
        title.append(" · " + " ".join([printable(a) for a in [script, *(run.argv or [])]]))
    con.print(title)
    con.print(Text(headline(report)))
    if run.ranks is not None and run.ranks.ranks:
        from advisor.output.ranks import print_ranks

        print_ranks(con, run)
    if run.ended_early:
        con.print(
            Text(
                f"note: the run ended early ({printable(run.end_reason or 'reason unknown')})",
                style="yellow",
            )
        )
    for note in quality_notes(run):
        con.print(Text(printable(note), style="yellow"))
    con.print()
    if report.findings:
        for g in phase_groups(report):  # phases ranked apart: each per step of its own
            if g.heading:
                median = f", median {fmt_ms(g.step_ms)}" if g.step_ms > 0 else ""
                con.print(Text(f"{g.heading} (savings per {g.per}{median})", style="bold"))
            found = tuple(f for _, f in g.findings)
            if not found:
                con.print(Text("No problems found in this phase."))
                continue
            con.print(findings_table(found, top, tty, tuple(i for i, _ in g.findings)))
            if len(found) > top:
                con.print(Text(f"... and {len(found) - top} more in the report"))
        bound = float(run.est_savings_bound_ms or 0.0)
        if bound > 0:
            step = run.saving_step_ms
            share = f" ({100.0 * bound / step:.0f}% of the step)" if step > 0 else ""
            how = (
                "replayed together, at most"
                if run.est_savings_bound_how == "replayed together"
                else "Savings overlap; together at most"
            )
            con.print(
                Text(f"{how[0].upper()}{how[1:]} {bound:.2f} ms per step{share}.", style="dim")
            )
        if run.host_own_pct is not None and run.gpu_busy_pct is not None:
            con.print(
                Text(
                    f"Host's own work {run.host_own_pct:.1f}% of the steps (the rest waits "
                    f"for the GPU); GPU busy {run.gpu_busy_pct:.1f}%.",
                    style="dim",
                )
            )
        bt = bound_fact(run.bound)
        if bt is not None:
            con.print(Text(f"Bound by {bt['value']} {bt['note']}.", style="dim"))
    elif not run.before_first_step:  # no work profiled: no verdict on it either
        con.print(Text("No problems found."))
    if report.skipped:
        con.print(
            Text(
                f"{len(report.skipped)} check(s) not run for missing data (listed in the report).",
                style="dim",
            )
        )
    if report.errored:
        con.print(
            Text(
                f"{len(report.errored)} check(s) failed: "
                + ", ".join(e.id for e in report.errored),
                style="red",
            )
        )
    if written:
        con.print()
        for key, path in written.items():
            label = LABELS.get(key, key)
            line = Text(f"{label:>9}  ", style="bold")
            line.append(printable(path))
            if key == "annotated":
                line.append("  (open in ui.perfetto.dev)", style="dim")
            con.print(line)
