"""``advisor diff A B``: compare two runs (did the fix help, and what is left?)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from advisor.cli.analysis_options import MaxTraceBytes
from advisor.trace.source import DEFAULT_MAX_TRACE_BYTES


def register(app: typer.Typer) -> None:
    @app.command("diff")
    def diff_command(
        a: Path = typer.Argument(
            ...,
            help="Before: a trace, a run folder, a folder of per-rank traces, or the folder "
            "an earlier 'advisor analyze --out' wrote.",
        ),
        b: Path = typer.Argument(..., help="After: the same kinds as A."),
        json_out: bool = typer.Option(False, "--json", help="Print the comparison as JSON."),
        html: Path = typer.Option(
            None,
            "--html",
            metavar="FILE",
            help="Also write the comparison as one self-contained HTML page to FILE.",
        ),
        force: bool = typer.Option(False, "--force", help="Replace an existing --html FILE."),
        top: int = typer.Option(10, "--top", help="Kernels and ops to list."),
        only: list[str] = typer.Option([], "--only", help="Run only these finding ids."),
        skip: list[str] = typer.Option([], "--skip", help="Skip these finding ids."),
        set_: list[str] = typer.Option([], "--set", help="Override a threshold: key=value."),
        jobs: int = typer.Option(0, "--jobs", "-j", help="Worker processes (0: automatic)."),
        scheduler: str = typer.Option(
            None,
            "--scheduler",
            metavar="ADDRESS",
            help="Analyse per-rank traces on this running Dask scheduler.",
        ),
        max_trace_bytes: MaxTraceBytes = DEFAULT_MAX_TRACE_BYTES,
    ) -> None:
        """Compare two runs: whether they computed the same thing, the steady step time and what
        bounds it, the runtime calls, the kernels and why the step changed (kernels paired
        through renames, grouped by family), and the findings before/after (matched by what
        they are) with what is still to fix."""
        from advisor.analysis.pipeline import options_from_cli
        from advisor.multirank.diff import diff_sides, load_side, near_pass

        if html is not None:
            _check_html(html, force)
        opts = options_from_cli(only, skip, set_, False, False, max_trace_bytes)
        side_a = load_side(a, opts, jobs or None, scheduler)
        side_b = load_side(b, opts, jobs or None, scheduler)
        near = near_pass(a, b, opts, jobs or None, scheduler)
        result = diff_sides(side_a, side_b, top=max(top, 0), near=near)
        if json_out:
            from advisor.jsontext import document

            sys.stdout.buffer.write(document(result))
            sys.stdout.flush()
        else:
            from advisor.output.diff_terminal import print_diff

            print_diff(result)
        if html is not None:
            from advisor.output.diff_html import render_diff_html
            from advisor.output.outfiles import atomic_write

            atomic_write(html, render_diff_html(result).encode("utf-8"))
            print(f"html: {html}", file=sys.stderr if json_out else sys.stdout)


def _check_html(path: Path, force: bool) -> None:
    """Before any analysis: an existing FILE is kept unless ``--force`` (and never a folder);
    its folder must exist."""
    from advisor.errors import AdvisorError

    if path.is_dir():
        raise AdvisorError("--html expects a file name, not a folder", path)
    if path.exists() and not force:
        raise AdvisorError("already exists; pass --force to replace it", path)
    if not path.parent.is_dir():
        raise AdvisorError("--html: no such folder", path.parent)
