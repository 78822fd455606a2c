"""Analyse several traces (one per rank) in worker processes and merge them into one Report.

Each worker loads one trace, runs the detectors and returns a small :class:`~advisor.analysis.digest.Digest`
(never the tables). Workers are bounded by CPU count (at most 4) and by a memory budget, so a
128-rank job never has more than a few traces in memory. The merged report has ``run.ranks``
(per-rank step time, GPU busy %, communication share), the findings of all ranks (each once,
with the figures of the rank where it costs most) and the detectors' cross-rank checks
(:func:`advisor.detect.registry.across_ranks`: ``straggler``, ``comm-overlap``'s measured wait).
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import os
import struct
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from advisor import settings
from advisor.analysis.detection import all_detectors, rank_checks
from advisor.analysis.digest import Digest, digest_file, failed_digest
from advisor.analysis.isolation import call, check_merged, describe, plugin_limit_s
from advisor.analysis.ranking import rank
from advisor.analysis.toptables import merge_tables
from advisor.derive.lag import rank_lags
from advisor.derive.peerwait import matched
from advisor.derive.quality import rank_skew
from advisor.detect.draft import Draft
from advisor.detect.registry import RanksContext, Skip, is_builtin
from advisor.detect.thresholds import Thresholds
from advisor.errors import AdvisorError
from advisor.findings import Finding, savings_bound_ms
from advisor.multirank.rankstats import ranks_summary
from advisor.multirank.workers import run_batched
from advisor.report import Errored, Report, Skipped
from advisor.trace.source import PEAK_BYTES_PER_TEXT_BYTE, mem_available

MAX_WORKERS = 4
BYTES_PER_RAW_BYTE = PEAK_BYTES_PER_TEXT_BYTE  # a worker's peak memory per byte of JSON
WORKER_BASE_BYTES = 200 * 1024**2  # interpreter, pandas, numpy
MEMORY_SHARE = 0.6  # of the available memory the workers may use together
STRAGGLER = "straggler"
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
    options: Any,
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


def _as_draft(f: Finding) -> Draft:
    return Draft(
        id=f.id,
        title=f.title,
        est_savings_ms=f.est_savings_ms,
        confidence=f.confidence,
        summary=f.summary,
        recommendation=f.recommendation,
        snippet=f.snippet,
        evidence=f.evidence,
        locations=f.locations,
        assumptions=f.assumptions,
        est_savings_range_ms=f.est_savings_range_ms,
        latent=f.severity == "info",
    )


def _finding_key(f: Finding, seen: dict[tuple, int]) -> tuple:
    loc = f.locations[0] if f.locations else None
    base = (f.id, loc.file if loc else "", loc.line if loc else 0)
    n = seen.get(base, 0)
    seen[base] = n + 1
    return base + (n,)


def merge_findings(digests: Sequence[Digest]) -> list[Draft]:
    """Each finding once (by id, first location and occurrence), with the figures of the
    rank where it saves most, and which ranks showed it."""
    groups: dict[tuple, list[tuple[Digest, Finding]]] = {}
    for d in digests:
        seen: dict[tuple, int] = {}
        for fd in d.report.get("findings", ()):
            f = Finding.from_dict(fd)
            groups.setdefault(_finding_key(f, seen), []).append((d, f))
    out = []
    n = len(digests)
    for members in groups.values():
        d, f = max(members, key=lambda m: (m[1].est_savings_ms, -(m[0].rank or 0)))
        if n > 1:
            where = ", ".join(m[0].label for m in members[:8]) + (
                " ..." if len(members) > 8 else ""
            )
            f = f.with_(
                summary=f"{f.summary} ({d.label}; seen on {len(members)} of {n}: {where})",
                assumptions=f.assumptions + (f"Figures from {d.label}.",),
            )
        out.append(_as_draft(f))
    return out


def merge(
    digests: Sequence[Digest], options: Any, root: Path, world_size: int | None = None
) -> Report:
    """One Report for several digests (see the module doc)."""
    ok = [d for d in digests if d.error is None]
    if not ok:
        raise AdvisorError(f"no trace could be read ({digests[0].error})", root)
    th = Thresholds(options.overrides)
    all_steps = np.concatenate([d.step_ms for d in ok]) if ok else np.zeros(0)
    step_ms = float(np.median(all_steps)) if len(all_steps) else 0.0
    ranks = [d.rank for d in ok]
    distinct = None not in ranks and len(set(ranks)) == len(ranks)
    drafts = merge_findings(ok)
    # a check is skipped only where it was skipped on every rank (reason from the first)
    skipped: dict[str, str] = {}
    for s in ok[0].report.get("skipped", ()):
        if all(any(x["id"] == s["id"] for x in d.report.get("skipped", ())) for d in ok[1:]):
            skipped[s["id"]] = s.get("reason", "")
    errored = [
        Errored(e["id"], f"{d.label}: {e.get('error', '')}")
        for d in ok
        for e in d.report.get("errored", ())
    ]
    lags: dict[int, float] = {}
    ordered = sorted(ok, key=lambda d: d.rank or 0)
    across = distinct and len(ok) >= 2
    if across:
        try:
            lags = rank_lags(ordered)
        except Exception:  # noqa: BLE001 (the table's lag column stays empty)
            lags = {}
    rctx = RanksContext(th, step_ms)
    for check in rank_checks():
        if (options.only and check.id not in options.only) or check.id in options.skip:
            continue  # the per-rank reports already say so
        if not across:
            if check.only_across:
                skipped[check.id] = (
                    "needs traces from two or more distinct ranks (rank from "
                    "distributedInfo or the file name)"
                )
            continue
        if check.only_across:
            skipped.pop(check.id, None)
        builtin = is_builtin(check.func.__module__)
        limit = plugin_limit_s(builtin, 0.0)
        result, err = call(functools.partial(check.func, drafts, ordered, rctx), limit)
        if isinstance(err, Skip):
            skipped[check.id] = str(err)
        elif err is not None:  # never sinks the report
            errored.append(Errored(check.id, describe(err)))
        else:
            drafts, problem = check_merged(check.id, drafts, result, builtin)
            if problem:
                errored.append(Errored(check.id, problem))
    findings = rank(drafts, step_ms, th)
    run = run_block(digests, root, step_ms, world_size, lags)
    run["est_savings_bound_ms"] = savings_bound_ms(findings, step_ms)
    run["ranks_summary"] = ranks_summary(run["ranks"], any(f.id == STRAGGLER for f in findings))
    docs = {d.id: {"title": d.title, "doc": d.doc} for d in all_detectors()}
    views = {
        "detectors": docs,
        "kernels": merge_tables([d.report.get("views", {}).get("kernels") or [] for d in ok]),
        "ops": merge_tables([d.report.get("views", {}).get("ops") or [] for d in ok]),
    }
    return Report(
        run=run,
        findings=tuple(findings),
        skipped=tuple(Skipped(i, r) for i, r in sorted(skipped.items())),
        errored=tuple(errored),
        thresholds=th.used(),
        views=views,
    )


def rank_row(d: Digest, lag_ms: float | None = None) -> dict[str, Any]:
    row: dict[str, Any] = {
        "rank": d.rank,
        "trace": Path(d.path).name,
        "steps": d.steps,
        "step_ms_median": round(d.step_ms_median, 3),
        "gpu_busy_pct": d.gpu_busy_pct,
        "comm_pct": d.comm_pct,
        "comm_overlap_pct": d.comm_overlap_pct,
        "exposed_comm_ms_per_step": d.exposed_comm_ms_per_step,
        "lag_ms_per_step": None if lag_ms is None else round(lag_ms, 3),
        "findings": len(d.report.get("findings", ())),
    }
    if d.error is not None:
        row["error"] = d.error
    return row


def run_block(
    digests: Sequence[Digest],
    root: Path,
    step_ms: float,
    world_size: int | None,
    lags: dict[int, float],
) -> dict[str, Any]:
    ok = [d for d in digests if d.error is None]
    first = min(ok, key=lambda d: (d.rank is None, d.rank or 0))
    run = dict(first.report.get("run", {}))
    world = world_size or max((d.world_size or 0 for d in ok), default=0) or None
    known = {d.rank for d in digests if d.rank is not None}
    busy = [d.gpu_busy_pct for d in ok if d.gpu_busy_pct is not None]
    run.update(
        {
            "trace": str(root),
            "rank": None,
            "world_size": world,
            "step_ms_median": round(step_ms, 3),
            "gpu_busy_pct": round(float(np.mean(busy)), 2) if busy else None,
            "steps_profiled": int(np.median([d.steps for d in ok])),
            "ranks": [
                rank_row(d, lags.get(d.rank) if d.rank is not None else None)
                for d in sorted(digests, key=lambda d: (d.rank is None, d.rank or 0, d.path))
            ],
            "ranks_missing": sorted(set(range(world)) - known) if world and known else [],
            "trace_quality": ranks_quality(ok),
        }
    )
    return run


def ranks_quality(digests: Sequence[Digest]) -> list[dict[str, str]]:
    """Each rank's trace-quality notes (labelled), and clock skew between the ranks."""
    out = [
        {"what": f"{d.label}: {q.get('what')}", "effect": str(q.get("effect"))}
        for d in digests
        for q in d.report.get("run", {}).get("trace_quality") or ()
    ]
    ranked = sorted((d for d in digests if d.rank is not None), key=lambda d: d.rank or 0)
    if len(ranked) >= 2:
        colls = [d.collectives for d in ranked]
        take, steps, _ = matched(colls)
        if len(steps):
            ends = np.stack(
                [c.start_abs_ns[t] + c.dur_ns[t] for c, t in zip(colls, take, strict=True)]
            )
            dur = np.stack([c.dur_ns[t] for c, t in zip(colls, take, strict=True)])
            skew = rank_skew(ends, dur, [int(d.rank or 0) for d in ranked])
            if skew is not None:
                out.append(skew.to_dict())
    return out


def analyze_files(
    files: Sequence[Path],
    options: Any,
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
