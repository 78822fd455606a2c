"""``comm-overlap`` across ranks: with one trace per rank, the waiting for a peer inside each
collective is measured instead of estimated (see :mod:`advisor.derive.peerwait`), the merged
finding claims only exposed *transfer*, naming the rank the others wait for, and the claim is
valued for the job (:mod:`advisor.replay.job`: every rank's transfer hidden, the slowest rank's
step)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from advisor.arrays import unique_ints
from advisor.derive.peerwait import cross_rank_wait_ns, match_by_end
from advisor.detect.draft import Draft
from advisor.detect.registry import RanksContext, across_ranks
from advisor.digest import Digest

ID = "comm-overlap"


def cross_rank_split(digests: Sequence[Digest]) -> dict[str, Any] | None:
    """Per rank: exposed transfer and exposed waiting (ms per step), the clock offsets, and
    which rank arrives last; None when the ranks share no collective instance."""
    colls = [d.collectives for d in digests]
    if len(colls) < 2 or any(
        c.exposed_ns is None or c.transfer_ns is None or not len(c) for c in colls
    ):
        return None
    m = match_by_end(
        [c.name for c in colls], [c.start_abs_ns for c in colls], [c.dur_ns for c in colls]
    )
    if not m.shape[1]:
        return None
    start = np.stack([c.start_abs_ns[r] for c, r in zip(colls, m, strict=True)])
    dur = np.stack([c.dur_ns[r] for c, r in zip(colls, m, strict=True)])
    wait_x, off = cross_rank_wait_ns(start, dur)
    world = max((d.world_size or 0) for d in digests)
    partial = world > len(digests)
    tr, wt = [], []
    for i, c in enumerate(colls):
        assert c.exposed_ns is not None and c.transfer_ns is not None  # checked above
        wait = c.dur_ns - c.transfer_ns  # one-rank estimate, kept for unmatched instances
        # all ranks at hand: the measured wait; some missing: at least the one-rank estimate
        wait[m[i]] = np.maximum(wait_x[i], wait[m[i]]) if partial else wait_x[i]
        xw = np.minimum(c.exposed_ns, wait)  # the wait is at the start: counted exposed first
        steps = max(1, len(unique_ints(c.step)))
        wt.append(float(xw.sum()) / 1e6 / steps)
        tr.append(float((c.exposed_ns - xw).sum()) / 1e6 / steps)
    last = np.argmin(wait_x, axis=0)  # the rank that arrived last at each matched instance
    late = int(np.bincount(last, minlength=len(digests)).argmax())
    others = [i for i in range(len(digests)) if i != late]
    steps = max(1, len(unique_ints(colls[late].step)))
    return {
        "ranks": [d.rank_id for d in digests],
        "transfer_ms": tr,
        "wait_ms": wt,
        "offset_ms": (off / 1e6).tolist(),
        "late": late,
        "late_count": int(np.sum(last == late)),
        "matched": int(m.shape[1]),
        "world": world,
        "partial": partial,
        "others_wait_ms": float(np.mean([wait_x[i].sum() for i in others]) / 1e6 / steps),
        "max_start_gap_ms": float((start.max(axis=0) - start.min(axis=0)).max()) / 1e6,
        "max_end_gap_ms": float(((start + dur).max(axis=0) - (start + dur).min(axis=0)).max())
        / 1e6,
    }


def _job_value(digests: Sequence[Digest]) -> tuple[float, float] | None:
    """(the job's replayed step, how much shorter it is with every transfer hidden), ms; None
    when not every rank's steps could be replayed."""
    from advisor.replay.job import job_replay  # (only across ranks: not at start-up)

    base = job_replay(digests)
    hidden = job_replay(digests, hide_transfer=True)
    if base is None or hidden is None:
        return None
    return base.job_replayed_ms, max(base.job_replayed_ms - hidden.job_replayed_ms, 0.0)


@across_ranks(ID)
def refine(drafts: list[Draft], digests: Sequence[Digest], ctx: RanksContext) -> list[Draft]:
    """Replace the merged comm-overlap draft's figures with the cross-rank split."""
    at = [i for i, d in enumerate(drafts) if d.id == ID]
    sp = cross_rank_split(digests) if at else None
    if sp is None:
        return drafts
    tr, wt = sp["transfer_ms"], sp["wait_ms"]
    # a rank's saving: its exposed transfer, capped at its compute that could hide it and at
    # what its replayed steps lose with all its communication hidden (nothing, host-bound)
    per = [
        max(
            0.0,
            min(
                t,
                float("inf") if d.free_compute_ms is None else d.free_compute_ms,
                float("inf") if d.comm_hidden_replay_ms is None else d.comm_hidden_replay_ms,
            ),
        )
        for t, d in zip(tr, digests, strict=True)
    ]
    b = int(np.argmax(per))
    saving = round(per[b], 3)
    job = _job_value(digests)
    if job is not None:  # valued for the job: the slowest rank's step, every rank's transfer hidden
        saving = round(min(saving, job[1]), 3)
    rk = sp["ranks"]
    late = rk[sp["late"]]
    waits = sp["others_wait_ms"] >= 0.05 * max(tr[b] + wt[b], 1e-9)
    wait_line = (
        f" Rank {late} arrives last at {sp['late_count']} of {sp['matched']} "
        f"collectives; the other ranks wait {sp['others_wait_ms']:.2f} ms per step "
        "inside them for it, which overlap cannot hide (see straggler)."
        if waits
        else ""
    )
    per_rank = "; ".join(
        f"rank {r}: {t:.2f} ms transfer, {w:.2f} ms waiting"
        for r, t, w in zip(rk, tr, wt, strict=True)
    )
    old = drafts[at[0]]
    head = old.summary.split(" Of the exposed time", 1)[0]
    cut = old.summary.rfind(" (rank ")
    seen = old.summary[cut:] if cut >= 0 and "seen on" in old.summary[cut:] else ""
    summary = (
        f"{head} Aligned across {len(rk)} ranks (clocks matched on the collectives' "
        f"ends), the exposed time per step is {per_rank}.{wait_line}{seen}"
    )
    rec = old.recommendation
    if waits:
        rec = f"Rank {late} holds the collectives back: start there. {rec}"
    seen = (
        f"only {len(rk)} of the job's {sp['world']} ranks are here, so a wait is at least "
        "the one-rank estimate (the last rank here may wait for one that is not)"
        if sp["partial"]
        else f"all {len(rk)} ranks are here"
    )
    valued = (
        f"Valued for the job: replayed across the ranks (each rank's step graph joined at the "
        f"collectives), the job's step ({job[0]:.2f} ms, the slowest rank's) is {job[1]:.2f} ms "
        "shorter with every collective's transfer hidden (the waiting kept); the claim is the "
        "smaller of that and the largest rank's own."
        if job is not None
        else "Each rank's claim is capped at what its replayed steps lose with all of its "
        "communication hidden (see docs/savings.md); the claim is the largest rank's."
    )
    assumptions = tuple(a for a in old.assumptions if not a.startswith("One rank:")) + (
        valued,
        f"{sp['matched']} collective instances matched across ranks by name and end time (their "
        f"ends differ by at most {sp['max_end_gap_ms']:.2f} ms, their starts by up to "
        f"{sp['max_start_gap_ms']:.2f} ms); a rank's wait is the time from its start to the last "
        "rank's start (clock offsets "
        + ", ".join(f"rank {r} {o:+.3f} ms" for r, o in zip(rk, sp["offset_ms"], strict=True))
        + f"); {seen}; unmatched instances keep the one-rank estimate. The wait is counted as "
        "exposed first, so the transfer claimed is a lower bound.",
    )
    new = replace(
        old,
        est_savings_ms=saving,
        est_savings_range_ms=(round(saving / 2, 3), saving),
        summary=summary,
        recommendation=rec,
        assumptions=assumptions,
        confidence="medium",
    )
    return [new if i == at[0] else d for i, d in enumerate(drafts)]
