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
        """Compare two runs: step time, time per category, kernels and findings before/after,
        and why the step changed (kernels paired through renames, grouped by family)."""
        import orjson

        from advisor.analysis.pipeline import options_from_cli
        from advisor.multirank.diff import diff_sides, load_side

        opts = options_from_cli(only, skip, set_, False, False, max_trace_bytes)
        side_a = load_side(a, opts, jobs or None, scheduler)
        side_b = load_side(b, opts, jobs or None, scheduler)
        result = diff_sides(side_a, side_b, top=max(top, 0))
        if json_out:
            sys.stdout.buffer.write(
                orjson.dumps(result, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n"
            )
            sys.stdout.flush()
        else:
            from advisor.output.diff_terminal import print_diff

            print_diff(result)
