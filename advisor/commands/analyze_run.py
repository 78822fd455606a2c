"""What ``advisor analyze`` does once its command line is parsed (typer-free: the console entry's
fast path calls it directly, see :mod:`advisor.entry`)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from advisor.commands.common import (
    OutputOptions,
    default_out_dir,
    finish,
    options_from_cli,
    output_guard,
)
from advisor.trace.source import DEFAULT_MAX_TRACE_BYTES

if TYPE_CHECKING:
    from advisor.report import Report
    from advisor.trace.prefetch import Prefetch


@dataclass
class AnalyzeArgs:
    """The parsed command line of ``advisor analyze`` (defaults as in ``--help``)."""

    path: Path
    out: Path | None = None
    force: bool = False
    json_out: bool = False
    fail_on: str | None = None
    only: list[str] = field(default_factory=list)
    skip: list[str] = field(default_factory=list)
    set_: list[str] = field(default_factory=list)
    open_: bool = False
    no_source: bool = False
    debug: bool = False
    max_trace_bytes: int = DEFAULT_MAX_TRACE_BYTES
    jobs: int = 0
    source_root: list[Path] = field(default_factory=list)


def run_analyze(a: AnalyzeArgs) -> None:
    """Analyze, write the outputs, print the summary; ends with ``SystemExit(code)``."""
    from advisor.outfiles import prepare_out_dir, release
    from advisor.trace import find_traces, prefetch

    oo = OutputOptions.parse(a.fail_on)
    files = find_traces(a.path)
    target = a.out or default_out_dir(files[0])
    prepare_out_dir(target, a.force, create=False)  # refuse first; create after loading
    t0 = time.perf_counter()
    # decode in a child process while this one imports pandas and the detectors
    pre = None
    if len(files) == 1:
        pre = prefetch.claim(files[0], a.max_trace_bytes, annotate=True)
    try:
        report, written = _analyze(a, files, target, pre)
    finally:
        release(target)
        if pre is not None:
            pre.cancel()
    code = finish(report, written, a.json_out, oo, a.open_, time.perf_counter() - t0)
    sys.exit(code)


def _analyze(a: AnalyzeArgs, files: list[Path], target: Path,
             pre: Prefetch | None) -> tuple[Report, dict[str, Path]]:  # fmt: skip
    from advisor.outfiles import prepare_out_dir
    from advisor.pipeline import analyze_path, write_outputs
    from advisor.render.terminal import progress

    opts = options_from_cli(a.only, a.skip, a.set_, a.debug, a.no_source, a.max_trace_bytes,
                            [Path(p) for p in a.source_root])  # fmt: skip
    with progress(f"Analyzing {files[0].name}") as prog:
        if len(files) > 1:  # one trace per rank: worker processes, merged report
            from advisor.multirank import analyze_files

            report, _ = analyze_files(files, opts, a.path, jobs=a.jobs or None)
        else:
            _, report = analyze_path(files[0], opts, annotate_ahead=True, prefetch=pre)
        prog.update("Writing the report")
        with output_guard(target):
            prepare_out_dir(target, a.force)
            written = write_outputs(report, target, a.debug)
    return report, written
