"""Many ranks on one machine: ``advisor analyze`` of N synthetic rank traces on the local Dask
cluster, wall time and peak memory per N.

The ranks are built from one real trace (``tests.mr_helpers.synth_ranks``: the same trace per
rank with ``distributedInfo`` set, each rank's timeline stretched by up to 2%, and one rank 25%
slower, the straggler to find). Each N runs ``advisor analyze DIR --scheduler local`` (a
LocalCluster of worker processes even for a few traces; ``--engine pool`` uses the advisor's own
process pool instead) in a fresh process while this script samples the memory of its whole process
tree (the command, the Dask scheduler thread, the nanny-started workers) every 0.1 s.

    python benchmarks/many_ranks.py [--trace T] [--ranks 8 64 256] [--engine dask|pool]

Printed per N: wall seconds, the peak memory of the whole tree (the sum of RSS, which counts the
pages a forked worker shares with its fork server once per process, and the sum of PSS, which
counts them once: the memory all the processes hold at once), the largest worker's peak RSS, the
straggler the report names, whether every rank was read, and the progress lines the command
printed (one per tenth done from 100 traces on: its stderr is a log here, not a terminal).

A 1,000-trace folder (issue 31): ``python benchmarks/many_ranks.py --ranks 1000 --trace
../shared/traces/hta/trace_filter/sampled_rank-0.json.gz``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import _pss  # noqa: E402

from tests.mr_helpers import synth_ranks  # noqa: E402

DEFAULT_TRACE = REPO / "sample_traces" / "sync_point.cpu.json.gz"


def _tree_rss(root: int) -> tuple[int, int, int]:
    """(total RSS of ``root`` and its descendants, largest single descendant RSS, their total
    PSS: shared pages split between the processes that share them, so counted once), bytes."""
    parent: dict[int, int] = {}
    rss: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", encoding="ascii", errors="replace") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            parent[int(d)] = int(fields[1])
            rss[int(d)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            continue
    tree = {root}
    grew = True
    while grew:
        new = {p for p, pp in parent.items() if pp in tree and p not in tree}
        tree |= new
        grew = bool(new)
    total = sum(rss.get(p, 0) for p in tree)
    largest = max((rss.get(p, 0) for p in tree if p != root), default=0)
    return total, largest, sum(_pss(p) for p in tree)


def measure(folder: Path, out: Path, engine: str) -> dict[str, object]:
    cmd = [sys.executable, "-m", "advisor", "analyze", str(folder), "--out", str(out), "--force"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if engine == "dask":
        cmd += ["--scheduler", "local"]
    else:
        env["ADVISOR_NO_DASK"] = "1"
    t0 = time.perf_counter()
    # output to files, not pipes: nobody reads a pipe while the command runs
    log = out.parent / f"{out.name}.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
        peak = worker_peak = peak_pss = 0
        while proc.poll() is None:
            total, largest, pss = _tree_rss(proc.pid)
            peak, worker_peak = max(peak, total), max(worker_peak, largest)
            peak_pss = max(peak_pss, pss)
            time.sleep(0.1)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(
            f"advisor analyze failed ({proc.returncode}): {log.read_text(errors='replace')[-2000:]}"
        )
    progress = sum(
        1
        for ln in log.read_text(errors="replace").splitlines()
        if ln.startswith("advisor: analyzed")
    )
    data = json.loads((out / "findings.json").read_text())
    ranks = data["run"]["ranks"]
    strag = (data["run"].get("ranks_summary") or {}).get("straggler") or {}
    return {
        "wall_s": wall,
        "peak_mb": peak / 2**20,
        "peak_pss_mb": peak_pss / 2**20,
        "worker_peak_mb": worker_peak / 2**20,
        "ranks_read": sum(1 for r in ranks if "error" not in r),
        "ranks": len(ranks),
        "straggler": strag.get("rank"),
        "progress_lines": progress,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="the real trace to copy")
    ap.add_argument("--ranks", type=int, nargs="+", default=[8, 64, 256])
    ap.add_argument("--engine", choices=["dask", "pool"], default="dask")
    ap.add_argument("--keep", type=Path, help="build the rank folders here and keep them")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="advisor-many-ranks-"))
    size = args.trace.stat().st_size
    print(
        f"trace: {args.trace.name} ({size / 2**20:.2f} MB), engine: {args.engine}, "
        f"cpus: {os.cpu_count()}"
    )
    print(
        f"{'ranks':>6} {'build s':>8} {'wall s':>8} {'peak MB':>8} {'PSS MB':>7} {'worker MB':>10} "
        f"{'read':>9} {'straggler':>9} {'progress':>8}"
    )
    try:
        for n in args.ranks:
            folder = work / f"ranks{n}"
            t0 = time.perf_counter()
            if not folder.is_dir():
                synth_ranks(args.trace, folder, n, straggler=n // 3)
            build = time.perf_counter() - t0
            r = measure(folder, work / f"out{n}", args.engine)
            print(
                f"{n:>6} {build:>8.1f} {r['wall_s']:>8.1f} {r['peak_mb']:>8.0f} "
                f"{r['peak_pss_mb']:>7.0f} "
                f"{r['worker_peak_mb']:>10.0f} {r['ranks_read']:>4}/{r['ranks']:<4} "
                f"{r['straggler']!s:>9} {r['progress_lines']:>8}",
                flush=True,
            )
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
