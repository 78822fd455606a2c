"""Several digests (one per rank) merged into one Report: each finding once (with the figures
of the rank where it costs most), the per-rank rows (``run.ranks``), who stands out
(:mod:`advisor.multirank.rankstats`), the merged top tables, and the detectors' cross-rank checks
(:func:`advisor.detect.registry.across_ranks`: ``straggler``, ``comm-overlap``'s measured wait).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from advisor.analysis.detection import all_detectors, rank_checks, run_check
from advisor.analysis.options import Options
from advisor.analysis.ranking import rank
from advisor.analysis.toptables import merge_kernels, merge_ops
from advisor.derive.lag import RankLateness, rank_lateness
from advisor.derive.peerwait import matched
from advisor.derive.quality import rank_skew
from advisor.detect.draft import Draft
from advisor.detect.registry import RanksContext
from advisor.detect.thresholds import Thresholds
from advisor.digest import Digest
from advisor.errors import AdvisorError
from advisor.findings import Finding, savings_bound_ms
from advisor.multirank.rankstats import ranks_summary
from advisor.replay.job import JobReplay, job_replay
from advisor.report import Errored, Report, Skipped
from advisor.runfacts import JobStep, QualityNote, RankRow, Ranks, RunFacts
from advisor.viewdata import DetectorDoc, Views

STRAGGLER = "straggler"


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
        related=f.related,
    )


def _finding_key(f: Finding, seen: dict[tuple[Any, ...], int]) -> tuple[Any, ...]:
    loc = f.locations[0] if f.locations else None
    base = (f.id, loc.file if loc else "", loc.line if loc else 0)
    n = seen.get(base, 0)
    seen[base] = n + 1
    return base + (n,)


def merge_findings(digests: Sequence[Digest]) -> list[Draft]:
    """Each finding once (by id, first location and occurrence), with the figures of the
    rank where it saves most, and which ranks showed it."""
    groups: dict[tuple[Any, ...], list[tuple[Digest, Finding]]] = {}
    for d in digests:
        seen: dict[tuple[Any, ...], int] = {}
        for f in d.report.findings:
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
    digests: Sequence[Digest], options: Options, root: Path, world_size: int | None = None
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
    for s in ok[0].report.skipped:
        if all(any(x.id == s.id for x in d.report.skipped) for d in ok[1:]):
            skipped[s.id] = s.reason
    errored = [Errored(e.id, f"{d.label}: {e.error}") for d in ok for e in d.report.errored]
    lags: dict[int, RankLateness] = {}
    job: JobReplay | None = None
    ordered = sorted(ok, key=lambda d: d.rank or 0)
    across = distinct and len(ok) >= 2
    if across:
        try:
            lags = rank_lateness(ordered)
        except Exception:  # noqa: BLE001 (the table's lag columns stay empty)
            lags = {}
        try:
            job = job_replay(ordered)
        except Exception:  # noqa: BLE001 (no job replay: the report goes on without it)
            job = None
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
        drafts, reason, problem = run_check(check, drafts, ordered, rctx)  # never sinks it
        if reason is not None:
            skipped[check.id] = reason
        elif problem is not None:
            errored.append(Errored(check.id, problem))
    findings = rank(drafts, step_ms, th)
    run = run_block(digests, root, step_ms, world_size, lags, job)
    assert run.ranks is not None
    summary = ranks_summary(run.ranks.ranks, any(f.id == STRAGGLER for f in findings))
    run = replace(
        run,
        est_savings_bound_ms=savings_bound_ms(findings, step_ms),
        ranks=replace(run.ranks, ranks_summary=summary),
    )
    views = Views(
        detectors={d.id: DetectorDoc(title=d.title, doc=d.doc) for d in all_detectors()},
        kernels=merge_kernels([d.report.views.kernels for d in ok]),
        ops=merge_ops([d.report.views.ops for d in ok]),
    )
    return Report(
        run=run,
        findings=tuple(findings),
        skipped=tuple(Skipped(i, r) for i, r in sorted(skipped.items())),
        errored=tuple(errored),
        thresholds=th.used(),
        views=views,
    )


def rank_row(
    d: Digest, lag: RankLateness | None = None, replayed_ms: float | None = None
) -> RankRow:
    def r3(v: float | None) -> float | None:
        return None if v is None else round(v, 3)

    return RankRow(
        rank=d.rank,
        trace=Path(d.path).name,
        steps=d.steps,
        step_ms_median=round(d.step_ms_median, 3),
        gpu_busy_pct=d.gpu_busy_pct,
        comm_pct=d.comm_pct,
        comm_overlap_pct=d.comm_overlap_pct,
        exposed_comm_ms_per_step=d.exposed_comm_ms_per_step,
        lag_ms_per_step=r3(lag.lag_ms) if lag else None,
        findings=len(d.report.findings),
        error=d.error,
        late_ms_per_step=r3(lag.lateness_ms) if lag else None,
        wait_ms_per_step=r3(lag.waiting_ms) if lag else None,
        replayed_step_ms=r3(replayed_ms),
    )


def run_block(
    digests: Sequence[Digest],
    root: Path,
    step_ms: float,
    world_size: int | None,
    lags: dict[int, RankLateness],
    job: JobReplay | None = None,
) -> RunFacts:
    """The merged ``run``: the first rank's facts, with the figures of all ranks."""
    ok = [d for d in digests if d.error is None]
    first = min(ok, key=lambda d: (d.rank is None, d.rank or 0))
    world = world_size or max((d.world_size or 0 for d in ok), default=0) or None
    known = {d.rank for d in digests if d.rank is not None}
    busy = [d.gpu_busy_pct for d in ok if d.gpu_busy_pct is not None]
    own = [d.report.run.host_own_pct for d in ok if d.report.run.host_own_pct is not None]
    replayed: dict[int, float] = {}
    if job is not None:
        replayed = {r: float(np.median(job.replayed_ms[i])) for i, r in enumerate(job.ranks)}
    rows = tuple(
        rank_row(d, lags.get(d.rank), replayed.get(d.rank)) if d.rank is not None else rank_row(d)
        for d in sorted(digests, key=lambda d: (d.rank is None, d.rank or 0, d.path))
    )
    return replace(
        first.report.run,
        trace=str(root),
        rank=None,
        world_size=world,
        step_ms_median=round(step_ms, 3),
        step_ms_mean=None,  # the job's findings are shares of its median step
        gpu_busy_pct=round(float(np.mean(busy)), 2) if busy else None,
        host_own_pct=round(float(np.mean(own)), 2) if own else None,
        steps_profiled=int(np.median([d.steps for d in ok])),
        ranks=Ranks(
            ranks=rows,
            ranks_missing=tuple(sorted(set(range(world)) - known)) if world and known else (),
            job_step=job_step(job),
        ),
        trace_quality=ranks_quality(ok),
    )


def job_step(job: JobReplay | None) -> JobStep | None:
    """``run.job_step`` from the unchanged job replay (None: no replay)."""
    if job is None or not job.steps:
        return None
    return JobStep(
        measured_ms=round(job.job_measured_ms, 3),
        replayed_ms=round(job.job_replayed_ms, 3),
        worst_rank_error_pct=round(job.worst_error_pct, 2),
        collectives_joined=job.matched,
        steps=len(job.steps),
    )


def ranks_quality(digests: Sequence[Digest]) -> tuple[QualityNote, ...]:
    """Each rank's trace-quality notes (labelled), and clock skew between the ranks."""
    out = [
        QualityNote(f"{d.label}: {q.what}", q.effect, q.kind)
        for d in digests
        for q in d.report.run.trace_quality
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
                out.append(QualityNote(skew.what, skew.effect, skew.kind))
    return tuple(out)
