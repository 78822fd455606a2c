"""``advisor profile`` under torchrun, the end of the run: rank 0 waits (bounded) for the other
ranks' files and writes one merged findings.json and report.html (see ``advisor.profile.torchrun``)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from advisor import runinfo
from advisor.profile.torchrun import RankEnv, rank_traces, wait_for_ranks
from advisor.runinfo import RunInfo


def _ranks(rs: list[int]) -> str:
    return ", ".join(str(r) for r in rs[:20]) + (", ..." if len(rs) > 20 else "")


def _notes(run_json: Path) -> list[str]:
    run = runinfo.read_file(run_json)
    return list(run.notes) if run is not None else []


def merge_ranks_and_write(
    out_dir: Path, renv: RankEnv, options: Any, debug: bool, timeout_s: float
) -> tuple[Any, dict[str, Path], dict[str, float]]:
    """Rank 0: wait for the other ranks, analyse every rank's trace (worker processes) and
    write the merged outputs. Never raises: on failure the minimal outputs say what happened."""
    from advisor.profile.analysis import _analyze_and_write, _minimal_outputs, _run_block

    timings: dict[str, float] = {}
    t0 = time.perf_counter()

    def told(missing: list[int]) -> None:
        print(
            f"advisor: rank 0 waits up to {timeout_s:g} s for rank(s) {_ranks(missing)}",
            file=sys.stderr,
            flush=True,
        )

    missing = wait_for_ranks(out_dir, renv, timeout_s, told)
    timings["wait_ranks"] = time.perf_counter() - t0
    notes = _notes(out_dir / renv.run_name)
    if missing:
        notes.append(
            f"No result from rank(s) {_ranks(missing)} within {timeout_s:g} s "
            "(--rank-timeout); the report covers the ranks that finished."
        )
        print(f"advisor: {notes[-1]}", file=sys.stderr, flush=True)
    files = rank_traces(out_dir, renv.world_size)
    if not files:  # not even rank 0's trace: the single-run path writes what it can
        return _analyze_and_write(
            out_dir, out_dir / renv.trace_name, out_dir / renv.run_name, options, debug
        )
    try:
        from advisor.analysis.pipeline import Options, write_outputs
        from advisor.multirank.analyze import analyze_files

        t0 = time.perf_counter()
        report, _ = analyze_files(files, options or Options(), out_dir, world_size=renv.world_size)
        timings["analysis"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        written = write_outputs(report, out_dir, debug, extra={"notes": notes})
        timings["report"] = time.perf_counter() - t0
        return report, written, timings
    except Exception as err:  # noqa: BLE001 (the run's outputs are written regardless)
        msg = f"analysis failed: {type(err).__name__}: {err}"
        print(f"advisor: {msg}", file=sys.stderr)
        run = runinfo.read_file(out_dir / renv.run_name) or RunInfo()
        block = _run_block(run, out_dir / renv.trace_name)
        return None, _minimal_outputs(out_dir, block, notes, msg), timings
