"""``advisor analyze TRACE|DIR``: findings.json and report.html from an existing trace.

The options are declared once, here (typer); those every analysis takes in
:mod:`advisor.cli.analysis_options`. The console entry may have started decoding the
trace before typer parsed the line (:func:`advisor.trace.prefetch.start_early`); that
:class:`~advisor.trace.prefetch.Prefetch` arrives as the context object (``ctx.obj``) and is kept
only if it decodes this command's file with its settings.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from advisor.cli.analysis_options import (
    Debug,
    Device,
    FailOn,
    JsonOut,
    MaxTraceBytes,
    NoSource,
    Only,
    OpenReport,
    SetThreshold,
    Skip,
    analysis_options,
)
from advisor.cli.common import finish, list_thresholds, output_guard
from advisor.findings import check_fail_on
from advisor.trace.source import DEFAULT_MAX_TRACE_BYTES

if TYPE_CHECKING:
    from advisor.analysis.pipeline import Options
    from advisor.report import Report
    from advisor.trace.prefetch import Prefetch


def register(app: typer.Typer) -> None:
    @app.command("analyze")
    def analyze_command(
        ctx: typer.Context,
        path: Path | None = typer.Argument(
            None, help="A trace (.json/.json.gz), a run folder, or a folder of per-rank traces."
        ),
        out: Path | None = typer.Option(
            None, "--out", "-o", help="Output folder (default ./advisor-runs/<name>-<time>/)."
        ),
        force: bool = typer.Option(
            False, "--force", help="Write into an existing non-empty --out."
        ),
        json_out: JsonOut = False,
        fail_on: FailOn = None,
        only: Only = None,
        skip: Skip = None,
        set_: SetThreshold = None,
        show_thresholds: bool = typer.Option(
            False, "--list-thresholds", help="List thresholds and exit."
        ),
        open_: OpenReport = False,
        no_source: NoSource = False,
        source_root: list[Path] = typer.Option(
            [], "--source-root", help="Also show code from files under this folder (repeatable)."
        ),
        detector: list[str] = typer.Option(
            [],
            "--detector",
            metavar="FILE|MODULE",
            help="Also run the detectors of this Python file or module (repeatable): try one "
            "without packaging it (docs/plugins.md).",
        ),
        debug: Debug = False,
        max_trace_bytes: MaxTraceBytes = DEFAULT_MAX_TRACE_BYTES,
        device: Device = None,
        jobs: int = typer.Option(
            0, "--jobs", "-j", help="Worker processes for per-rank traces (0: automatic)."
        ),
        scheduler: str = typer.Option(
            None,
            "--scheduler",
            metavar="ADDRESS",
            help="Run the per-rank analysis on this running Dask scheduler (tcp://host:8786; "
            "its workers must see the trace files), or 'local' for a local Dask cluster "
            "(the default above 16 traces).",
        ),
    ) -> None:
        """Analyze a trace you already have and rank the fixes by time saved per step."""
        if show_thresholds:
            list_thresholds()
            return
        if path is None:
            raise typer.BadParameter("missing TRACE|DIR argument", param_hint="PATH")
        from advisor.output.outfiles import release
        from advisor.output.outfolder import default_out_dir, prepare_out_dir, trace_stem
        from advisor.trace import prefetch
        from advisor.trace.discover import traces_at

        check_fail_on(fail_on)
        files = traces_at(path)  # an earlier analysis's output folder: the trace it read
        target = out or default_out_dir(trace_stem(files[0]))
        prepare_out_dir(target, force, create=False)  # refuse first; create after loading
        t0 = time.perf_counter()
        # decode in a child process while this one imports pandas and the detectors
        pre = prefetch.take_over(ctx.obj, files[0], max_trace_bytes) if len(files) == 1 else None
        try:
            # pandas and the detectors: after the fork
            opts = analysis_options(
                only, skip, set_, debug, no_source, max_trace_bytes, source_root, device, detector
            )
            report, written = _analyze(files, path, target, opts, force, jobs, scheduler, pre)
        finally:
            release(target)
            if pre is not None:
                pre.cancel()
        sys.exit(finish(report, written, json_out, fail_on, open_, time.perf_counter() - t0))


def _analyze(
    files: list[Path],
    root: Path,
    target: Path,
    opts: Options,
    force: bool,
    jobs: int,
    scheduler: str | None,
    pre: Prefetch | None,
) -> tuple[Report, dict[str, Path]]:
    from advisor.analysis.pipeline import write_outputs
    from advisor.output.annotate_stream import AheadCopy
    from advisor.output.outfolder import prepare_out_dir
    from advisor.output.terminal import progress

    ahead = AheadCopy()
    with progress(f"Analyzing {files[0].name}") as prog:
        if len(files) > 1:  # one trace per rank: worker processes, merged report
            from advisor.multirank.analyze import analyze_files

            report, _ = analyze_files(
                files, opts, root, jobs=jobs or None, scheduler=scheduler, progress=prog.count
            )
        else:  # one file: one process, or the ranks of a job merged into it
            from advisor.multirank.analyze import analyze_file

            # its detectors on this process's core and a helper's (where there is a second)
            opts = replace(opts, share_cores=True)
            report = analyze_file(files[0], opts, ahead=ahead, prefetch=pre)
        prog.update("Writing the report")
        with output_guard(target):
            prepare_out_dir(target, force)
            written = write_outputs(report, target, opts.debug, ahead=ahead)
    return report, written
