"""``advisor analyze TRACE|DIR``: findings.json and report.html from an existing trace."""

from __future__ import annotations

from pathlib import Path

import typer

from advisor.commands.analyze_run import AnalyzeArgs, run_analyze
from advisor.commands.common import list_thresholds
from advisor.trace.source import DEFAULT_MAX_TRACE_BYTES


def register(app: typer.Typer) -> None:
    @app.command("analyze")
    def analyze_command(
        path: Path | None = typer.Argument(
            None, help="A trace (.json/.json.gz), a run folder, or a folder of per-rank traces."
        ),
        out: Path | None = typer.Option(
            None, "--out", "-o", help="Output folder (default ./advisor-runs/<name>-<time>/)."
        ),
        force: bool = typer.Option(
            False, "--force", help="Write into an existing non-empty --out."
        ),
        json_out: bool = typer.Option(False, "--json", help="Print findings.json to stdout."),
        fail_on: str | None = typer.Option(
            None,
            "--fail-on",
            help="Exit 3 when a finding at or above this severity exists: high, medium or low.",
        ),
        only: list[str] = typer.Option(
            [], "--only", help="Run only these finding ids (repeat or comma-separate)."
        ),
        skip: list[str] = typer.Option([], "--skip", help="Skip these finding ids."),
        set_: list[str] = typer.Option(
            [], "--set", help="Override a threshold: key=value (see --list-thresholds)."
        ),
        show_thresholds: bool = typer.Option(
            False, "--list-thresholds", help="List thresholds and exit."
        ),
        open_: bool = typer.Option(False, "--open", help="Open report.html in a browser."),
        no_source: bool = typer.Option(
            False, "--no-source", help="Keep source code out of the report."
        ),
        source_root: list[Path] = typer.Option(
            [], "--source-root", help="Also show code from files under this folder (repeatable)."
        ),
        debug: bool = typer.Option(
            False, "--debug", help="Include detector tracebacks in findings.json."
        ),
        max_trace_bytes: int = typer.Option(
            DEFAULT_MAX_TRACE_BYTES,
            "--max-trace-bytes",
            min=1,
            help="Refuse traces larger than this decompressed (guards against gzip bombs).",
        ),
        jobs: int = typer.Option(
            0, "--jobs", "-j", help="Worker processes for per-rank traces (0: automatic)."
        ),
    ) -> None:
        """Analyze a trace you already have and rank the fixes by time saved per step."""
        if show_thresholds:
            list_thresholds()
            return
        if path is None:
            raise typer.BadParameter("missing TRACE|DIR argument", param_hint="PATH")
        run_analyze(AnalyzeArgs(path=path, out=out, force=force, json_out=json_out,
                                fail_on=fail_on, only=only, skip=skip, set_=set_, open_=open_,
                                no_source=no_source, debug=debug,
                                max_trace_bytes=max_trace_bytes, jobs=jobs,
                                source_root=source_root))  # fmt: skip
