"""Analyse several traces (one per rank) in worker processes and merge them into one Report.

One file that holds several ranks (a merged job: :mod:`advisor.trace.ranksplit`) is split at
load and analysed the same way, its ranks one after the other in this process
(:func:`analyze_file`).

Each worker loads one trace, runs the detectors and returns a small :class:`~advisor.digest.Digest`
(never the tables). Workers are bounded by CPU count (at most 4) and by a memory budget, so a
128-rank job never has more than a few traces in memory. The digests are merged by
:mod:`advisor.multirank.merge`: ``run.ranks`` (per-rank step time, GPU busy %, communication
share), the findings of all ranks (each once, with the figures of the rank where it costs most)
and the detectors' cross-rank checks.
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import os
import struct
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from advisor import settings
from advisor.analysis.digest import digest_file, digest_trace, failed_digest
from advisor.analysis.options import Options
from advisor.digest import Digest
from advisor.errors import AdvisorError
from advisor.multirank.merge import merge
from advisor.multirank.workers import run_batched
from advisor.report import Report
from advisor.runfacts import QualityNote
from advisor.trace.source import PEAK_BYTES_PER_TEXT_BYTE, mem_available

if TYPE_CHECKING:
    from advisor.output.annotate_stream import AheadCopy
    from advisor.trace.model import Trace
    from advisor.trace.prefetch import Prefetch

MAX_WORKERS = 4
BYTES_PER_RAW_BYTE = PEAK_BYTES_PER_TEXT_BYTE  # a worker's peak memory per byte of JSON
WORKER_BASE_BYTES = 200 * 1024**2  # interpreter, pandas, numpy
MEMORY_SHARE = 0.6  # of the available memory the workers may use together
DASK_ABOVE = 16  # more traces than this: a Dask LocalCluster instead of the process pool
LOCAL = "local"  # --scheduler local: a LocalCluster even for a few traces


def raw_size(path: Path) -> int:
    """Decompressed size of a trace: the gzip trailer (ISIZE) or the file size."""
    try:
        size = path.stat().st_size
        if path.name.endswith(".gz") and size >= 18:
            with path.open("rb") as fh:
                fh.seek(-4, os.SEEK_END)
                isize = struct.unpack("<I", fh.read(4))[0]
            # ISIZE is modulo 4 GiB: a value below the compressed size means it wrapped
            return isize if isize >= size else size * 20
        return size
    except OSError:
        return 0


def plan_workers(
    raw_sizes: Sequence[int],
    jobs: int | None = None,
    cpus: int | None = None,
    available: int | None = None,
) -> int:
    """How many worker processes: at most ``jobs`` (default min(cpus, 4)), never more than the
    number of traces, and few enough that the largest trace fits in every worker at once."""
    if len(raw_sizes) <= 1:
        return 1
    cap = jobs if jobs and jobs > 0 else min(cpus or os.cpu_count() or 1, MAX_WORKERS)
    per = WORKER_BASE_BYTES + BYTES_PER_RAW_BYTE * max(raw_sizes)
    budget = MEMORY_SHARE * (available if available is not None else mem_available())
    return max(1, min(cap, len(raw_sizes), int(budget // per)))


def digest_all(
    files: Sequence[Path],
    options: Options,
    jobs: int | None = None,
    progress: Callable[[Digest], None] | None = None,
    scheduler: str | None = None,
) -> list[Digest]:
    """Digest every trace: serially for one worker; on a Dask cluster for ``scheduler`` (an
    address, or ``"local"`` for a LocalCluster whatever the number of traces) or more than
    ``DASK_ABOVE`` traces (:mod:`advisor.multirank.daskrun`); else in this machine's worker processes
    (:mod:`advisor.multirank.workers`). Only digests come back."""
    sizes = [raw_size(f) for f in files]
    workers = plan_workers(sizes, jobs)
    if workers <= 1 and scheduler is None:
        out = []
        for f in files:
            out.append(digest_file(f, options))
            if progress:
                progress(out[-1])
        return out
    results: dict[int, Digest] = {}

    def done(i: int, result: Any, err: BaseException | None) -> None:
        if err is None:
            results[i] = result
        else:
            results[i] = failed_digest(files[i], died_why(err))
        if progress:
            progress(results[i])

    task = functools.partial(digest_file, options=options)
    if scheduler is not None or (len(files) > DASK_ABOVE and use_dask()):
        from advisor.multirank.daskrun import run_dask

        per_worker = WORKER_BASE_BYTES + BYTES_PER_RAW_BYTE * max(sizes, default=0)
        address = None if scheduler in (None, LOCAL) else scheduler
        try:
            run_dask(
                task,
                [str(f.absolute()) for f in files],
                workers,
                done,
                scheduler=address,
                memory_limit=worker_memory_limit(per_worker, workers),
            )
        except (OSError, RuntimeError, TimeoutError) as err:
            if address is not None:
                raise AdvisorError(f"--scheduler {address}: {type(err).__name__}: {err}") from None
            # no local cluster here (no loopback sockets, a broken install): the process pool
            print(
                f"advisor: the local Dask cluster failed ({type(err).__name__}: {err}); "
                "using worker processes",
                file=sys.stderr,
            )
            left = [i for i in range(len(files)) if i not in results]
            run_batched(
                task, [files[i] for i in left], workers, lambda j, r, e: done(left[j], r, e)
            )
    else:
        run_batched(task, list(files), workers, done)
    return [results[i] for i in range(len(files))]


def died_why(err: BaseException) -> str:
    if isinstance(err, cf.process.BrokenProcessPool) or type(err).__name__ == "KilledWorker":
        return "worker process died (out of memory?)"
    return f"{type(err).__name__}: {err}"


def use_dask() -> bool:
    """Dask for many ranks unless ``ADVISOR_NO_DASK=1`` or distributed is not installed."""
    if settings.no_dask():
        return False
    import importlib.util

    return importlib.util.find_spec("distributed") is not None


def worker_memory_limit(per_worker: int, workers: int, available: int | None = None) -> int:
    """Bytes one Dask worker may use: its share of ``MEMORY_SHARE`` of the available memory,
    and at least what the largest trace needs."""
    budget = MEMORY_SHARE * (available if available is not None else mem_available())
    return int(max(per_worker, budget // max(workers, 1)))


def analyze_files(
    files: Sequence[Path],
    options: Options,
    root: Path,
    jobs: int | None = None,
    world_size: int | None = None,
    scheduler: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[Report, list[Digest]]:
    """Digest every trace (in parallel) and merge them: the multi-trace ``analyze``;
    ``progress(done, total)`` as each trace is done."""
    done = [0]

    def one_more(_: Digest) -> None:
        done[0] += 1
        if progress is not None:
            progress(done[0], len(files))

    digests = digest_all(files, options, jobs, one_more, scheduler=scheduler)
    return merge(digests, options, root, world_size), digests


def analyze_file(
    path: Path,
    options: Options,
    ahead: AheadCopy | None = None,
    prefetch: Prefetch | None = None,
) -> Report:
    """One trace file: analysed as one process, or, when it holds several ranks, split into
    them and analysed as their job (:func:`analyze_traces`)."""
    from advisor.analysis.pipeline import analyze_loaded, import_writers
    from advisor.trace import load_ranks

    if prefetch is not None:
        import_writers()  # while the child may still be decoding: no wait later
    traces = load_ranks(path, options.max_trace_bytes, prefetch)
    if len(traces) == 1:
        return analyze_loaded(traces[0], path, options, ahead)
    return analyze_traces(traces, options, path)[0]


def analyze_traces(
    traces: list[Trace], options: Options, root: Path
) -> tuple[Report, list[Digest]]:
    """The ranks of one file (``traces``, emptied as each is analysed) merged as a job, with a
    trace-quality note saying so."""
    from advisor.analysis.pipeline import analyze_trace

    n = len(traces)
    digests = []
    while traces:
        t = traces.pop(0)
        digests.append(digest_trace(t, analyze_trace(t, None, options), t.meta.rank))
    report = merge(digests, options, root, world_size=n)
    note = QualityNote(
        f"This file holds {n} ranks (named by process names or args.rank, as a trace merger "
        "writes them): split into its ranks when loading and analysed as a job.",
        "Each rank's figures come from its own events; the job's step, the straggler and "
        "the communication checks compare the ranks, as for a folder of one trace per rank.",
    )
    run = replace(report.run, trace_quality=(note, *report.run.trace_quality))
    return replace(report, run=run), digests
