"""The last stage of ``advisor profile``: analyze the trace it wrote, as ``advisor analyze`` would.

:func:`_analyze_and_write` never raises: when the analysis fails (or there is no trace), it
still writes a valid findings.json and report.html that say what happened, so every run leaves
all four files behind. Only a folder that cannot take the files (disk full, read-only) is an
error, raised for the caller to report.
"""

from __future__ import annotations

import html
import sys
import time
from pathlib import Path
from typing import Any

from advisor import runinfo
from advisor.errors import AdvisorError
from advisor.runfacts import RunFacts
from advisor.runfolder import FINDINGS_NAME, REPORT_NAME
from advisor.runinfo import RunInfo
from advisor.trace.source import DEFAULT_MAX_TRACE_BYTES


class _CannotWrite(Exception):
    def __init__(self, error: AdvisorError) -> None:
        super().__init__(str(error))
        self.error = error


def _run_block(run: RunInfo, trace_path: Path) -> RunFacts:
    """The findings.json ``run`` block when there is no trace to analyze."""
    dev = run.device
    return RunFacts(
        notes=run.notes,
        script=run.script,
        argv=run.argv,
        trace=str(trace_path) if trace_path.is_file() else None,
        torch=run.torch,
        cuda=run.cuda,
        device=dev.name if dev.type == "cuda" else None,
        compute_capability=dev.compute_capability,
        ended_early=bool(run.ended_early),
        end_reason=run.end_reason,
    )


def _minimal_outputs(
    out_dir: Path, run: RunFacts, notes: list[str], error: str | None
) -> dict[str, Path]:
    """findings.json and report.html without findings (the analysis did not run)."""
    from advisor.output.outfiles import atomic_write
    from advisor.report import Errored, Report

    errored = (Errored("analysis", error),) if error else ()
    atomic_write(out_dir / FINDINGS_NAME, Report(run=run, findings=(), errored=errored).dump())
    items = "".join(f"<p>{html.escape(n)}</p>" for n in [*notes, *([error] if error else [])])
    page = (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>torch-advisor report: {html.escape(str(run.script or ''))}</title></head>"
        f"<body><h1>torch-advisor report</h1><p>Script: {html.escape(str(run.script))}"
        f"</p>{items}<p>No findings: the trace could not be analyzed.</p></body></html>\n"
    )
    atomic_write(out_dir / REPORT_NAME, page.encode("utf-8"))
    return {"findings": out_dir / FINDINGS_NAME, "report": out_dir / REPORT_NAME}


def _analyze_and_write(
    out_dir: Path,
    trace_path: Path,
    run_json_path: Path,
    options: Any = None,
    debug: bool = False,
) -> tuple[Any, dict[str, Path], dict[str, float]]:
    """Analyze ``trace_path`` with the run context in ``run_json_path``; write findings.json and
    report.html into ``out_dir``. Returns (Report or None, files written, timings in seconds)."""
    timings: dict[str, float] = {}
    run = runinfo.read_file(run_json_path) or RunInfo()
    notes = list(run.notes)
    try:
        from advisor.analysis.pipeline import analyze_run, write_outputs
        from advisor.output.terminal import progress
        from advisor.report import Report
        from advisor.trace import load_trace

        with progress(f"Analyzing {trace_path.name}") as prog:
            t0 = time.perf_counter()
            if trace_path.is_file():
                # no name holds the trace: its tables and derived data go before the writing
                report = analyze_run(
                    load_trace(
                        trace_path, getattr(options, "max_trace_bytes", DEFAULT_MAX_TRACE_BYTES)
                    ),
                    run,
                    options,
                )
            else:
                report = Report(run=_run_block(run, trace_path), findings=())
            timings["analysis"] = time.perf_counter() - t0
            prog.update("Writing the report")
            t0 = time.perf_counter()
            try:
                written = write_outputs(report, out_dir, debug)
            except AdvisorError as err:  # the folder cannot take them (disk full, ...)
                raise _CannotWrite(err) from err
            timings["report"] = time.perf_counter() - t0
        return report, written, timings
    except _CannotWrite as err:
        raise err.error from err.error.__context__  # the caller says so; no fallback to try
    except Exception as err:  # noqa: BLE001 (the run's outputs are written regardless)
        msg = f"analysis failed: {type(err).__name__}: {err}"
        print(f"advisor: {msg}", file=sys.stderr)
        t0 = time.perf_counter()
        written = _minimal_outputs(out_dir, _run_block(run, trace_path), notes, msg)
        timings["report"] = time.perf_counter() - t0
        return None, written, timings
