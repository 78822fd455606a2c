"""Stragglers: ranks that reach the collectives late, so every other rank waits for them.

**What it detects.** A rank that is consistently late: it reaches the collectives (all-reduce,
all-to-all, ...) after the other ranks, who wait inside them until it arrives. The check needs
one trace per rank (`advisor analyze DIR` with per-rank traces, or `advisor profile` under
torchrun); on a single trace it is skipped.

**Why it costs time.** In synchronous training every rank waits inside each collective until the
last rank arrives, so the whole job runs at the pace of its latest rank. The ranks that wait
longest have the longest steps: they are the victims, not the cause.

**How it is found.** The copies of one collective are matched across ranks by name and end time
(copies of one collective end together; instances of process groups a rank is not in stay
out), or by step, name, stream and order when no ends agree. A rank's *arrival* is measured
back from the common end (end minus its kernel's duration: no agreement between the hosts'
clocks is needed). At each collective a rank's *lateness* is its arrival after the earliest
rank's and its *waiting* the time until the last rank's; waiting is never counted against a
rank. Its *lag* is its arrival after the median of the other ranks'; lags add up over a step,
the other ranks' typical (median) lag is subtracted (ranks taking turns cancel out) and the median over
the steps is the figure. The rank with the largest lag is the straggler. The finding says what
it did before it arrived: whether its step started late (before the first collective: what it
did then is before the recorded step when that is the trace's first), and which part of the
time before its arrival was longer than the other ranks' (computation and its longest kernel,
other GPU work, data loading, host work with the GPU idle). Without matched collectives, ranks
whose step time exceeds the others' are reported (low confidence).

**How the saving is estimated.** The job replay (docs/multirank.md): every rank's step graph,
reduced to its collectives, joined at the collectives (a collective's transfer starts when the
last rank arrives), replayed with the straggler arriving at each collective no later than the
other ranks' median. The saving is how much shorter the job's step (the slowest rank's) gets.
When several ranks lag, removing one rank's lateness saves only down to the next latest rank:
the finding also gives the saving with every lagging rank on time. Without a replay of every
rank, the saving is the straggler's lag.

**How to fix.** Look at what the late rank did before it arrived (the finding names it): a
data-loading stall or host-side work on that rank only (logging, checkpointing, a slower CPU or
NUMA placement), uneven work (shards of different size, variable sequence lengths: use
`DistributedSampler(drop_last=True)` and bucket by length), a slower or throttled GPU (a kernel
slower there than on the other ranks). Open its trace next to another rank's at the timestamps
in the evidence.

**Known false positives.** Pipeline-parallel stages and ranks that do different work by design
(a parameter-server rank, rank 0 doing extra logging or checkpointing on purpose) lag by design.
"""

from __future__ import annotations

from collections.abc import Sequence

from advisor.derive.lag import PART_LABELS, Arrivals, Explanation, arrivals, explain, step_lags
from advisor.detect.draft import Draft
from advisor.detect.registry import Context, RanksContext, Skip, across_ranks, detector
from advisor.detect.thresholds import register
from advisor.digest import Digest
from advisor.findings import Evidence
from advisor.trace.model import Trace

ID = "straggler"
register("straggler.min_lag_pct", 5.0, "report a rank lagging by this % of the median step")
register("straggler.min_lag_ms", 0.5, "and by at least this many ms per step")
MAX_NAMED = 6  # other lagging ranks named in the summary

SNIPPET = """\
# Give every rank the same amount of work per step
sampler = torch.utils.data.distributed.DistributedSampler(dataset, drop_last=True)
loader = torch.utils.data.DataLoader(
    dataset, batch_size=batch_size, sampler=sampler,
    num_workers=4, pin_memory=True, persistent_workers=True,
)
for epoch in range(epochs):
    sampler.set_epoch(epoch)   # new shuffle per epoch, same shard sizes on every rank
    for batch in loader:
        ...
"""

RECOMMENDATION = (
    "Find what makes rank {r} late: the time before its arrival that is longer than the other "
    "ranks' (above), its own findings and its row in the per-rank table. Check for uneven "
    "work per rank (shard sizes, sequence lengths), host-side work on that rank only, and a "
    "slower or busier machine. Open rank {r}'s trace beside another rank's at the evidence "
    "timestamps."
)


@detector(ID, "A slow rank holds the others back", needs=("steps",))
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    raise Skip("needs one trace per rank: analyze a folder of per-rank traces")


@across_ranks(ID, only_across=True)
def detect_ranks(drafts: list[Draft], digests: Sequence[Digest], ctx: RanksContext) -> list[Draft]:
    """The cross-rank check: digests of distinct, known ranks (two or more), in rank order."""
    if len(digests) < 2:
        raise Skip("needs traces from two or more ranks")
    floor = max(
        ctx.t("straggler.min_lag_ms"), ctx.step_ms_median * ctx.t("straggler.min_lag_pct") / 100.0
    )
    arr = arrivals(digests)
    if arr is not None:
        found = _by_arrival(digests, arr, floor, ctx.step_ms_median)
    else:
        found = _by_step_time(digests, floor, ctx.step_ms_median)
    return [*drafts, found] if found is not None else drafts


def _others(lag: dict[int, float], late: list[int]) -> str:
    if len(late) < 2:
        return ""
    shown = ", ".join(f"rank {r} ({lag[r]:.2f} ms)" for r in late[1 : 1 + MAX_NAMED])
    return f"; also lagging: {shown}"


def _what_before(ex: Explanation | None, lag_ms: float) -> str:
    """What the rank did before it arrived, as one sentence (empty: not known); parts that
    explain less than a tenth of its lag are left out."""
    if ex is None:
        return ""
    least = max(0.01, 0.1 * lag_ms)
    parts = []
    if ex.late_start_ms >= least:
        where = " (before the recorded step: not in the trace)" if ex.first_step else ""
        parts.append(f"its step started {ex.late_start_ms:.2f} ms after the others'{where}")
    more = sorted(((v, k) for k, v in ex.extra_ms.items() if v >= least), reverse=True)
    for v, k in more[:2]:
        parts.append(f"{v:.2f} ms more {PART_LABELS[k]} than the others")
        if k == "compute" and ex.kernel:
            parts[-1] += f" (longest kernel: {ex.kernel.split('(')[0][:80]}, {ex.kernel_ms:.2f} ms)"
    if not parts:
        return ""
    return f" Before it arrived, per step: {'; '.join(parts)}."


def _job_saving(digests: Sequence[Digest], ranks: list[int]) -> tuple[float, float] | None:
    """(the job's replayed step, how much shorter it is with ``ranks`` arriving on time)."""
    from advisor.replay.job import job_replay  # (only across ranks: not at start-up)

    base = job_replay(digests)
    fixed = job_replay(digests, late_ranks=ranks)
    if base is None or fixed is None:
        return None
    return base.job_replayed_ms, max(base.job_replayed_ms - fixed.job_replayed_ms, 0.0)


def _by_arrival(
    digests: Sequence[Digest], arr: Arrivals, floor: float, step_ms: float
) -> Draft | None:
    lag = arr.lag_ms()
    late = sorted((r for r in lag if lag[r] >= floor), key=lambda r: (-lag[r], r))
    if not late:
        return None
    worst = late[0]
    i = arr.ranks.index(worst)
    lateness, waiting, last = arr.lateness_ms(), arr.waiting_ms(), arr.last_counts()
    victim = max(waiting, key=lambda r: (waiting[r], -r))
    ex = explain(digests, arr, worst)
    job = _job_saving(digests, [worst])
    every = _job_saving(digests, late) if len(late) > 1 else None
    if job is not None:
        saving = job[1]
        how = (
            f" Replayed across the ranks (each rank's step graph joined at the collectives) "
            f"with rank {worst} arriving no later than the other ranks' median, the job's step "
            f"({job[0]:.2f} ms, the slowest rank's) is {job[1]:.2f} ms shorter"
        )
        how += (
            f"; with ranks {', '.join(str(r) for r in late[: MAX_NAMED + 1])} all on time, "
            f"{every[1]:.2f} ms shorter."
            if every is not None
            else "."
        )
        basis = (
            "Saving: the job replay (docs/multirank.md) with the straggler arriving at each "
            "collective no later than the other ranks' median; the job's step is the slowest "
            "rank's."
        )
    else:
        saving = lag[worst]
        how = ""
        basis = (
            "Not every rank's steps could be replayed: the saving is the straggler's lag, about "
            "how long the others wait for it per step."
        )
    evidence: list[Evidence] = []
    c = digests[i].collectives
    for s in arr.steps[:5]:
        m = [j for j in range(len(arr.step)) if arr.step[j] == s and arr.lag_ns[i, j] > 0]
        if not m:
            continue
        w = max(m, key=lambda j: int(arr.lateness_ns[i, j]))
        evidence.append(
            Evidence(
                f"step {s}: rank {worst} late at {len(m)} collective(s), worst {arr.name[w]} "
                f"({arr.lateness_ns[i, w] / 1e6:.2f} ms after the earliest rank)",
                len(m),
                round(float(arr.lag_ns[i, m].sum()) / 1e6, 3),
                float(c.ts_us[arr.rows[i][w]]),
            )
        )
    summary = (
        f"Rank {worst} reaches the collectives late: it arrives last at {last[worst]} of "
        f"{arr.per_step_count()} collectives per step, {lateness[worst]:.2f} ms per step after "
        f"the earliest rank in all ({lag[worst]:.2f} ms after the other ranks' median, "
        f"{lag[worst] / step_ms:.0%} of the {step_ms:.1f} ms step){_others(lag, late)}. The "
        f"others wait for it inside the collectives (rank {victim} longest, "
        f"{waiting[victim]:.2f} ms per step): their longer steps are waiting, not their own "
        f"work.{_what_before(ex, lag[worst])}{how}"
    )
    return Draft(
        id=ID,
        title=f"Rank {worst} holds the other ranks back",
        est_savings_ms=round(saving, 3),
        confidence="medium",
        summary=summary,
        recommendation=RECOMMENDATION.format(r=worst),
        snippet=SNIPPET,
        evidence=tuple(evidence),
        assumptions=(
            f"{len(digests)} ranks compared at {arr.per_step_count()} collectives per step matched "
            "by name and end time; a rank's arrival is its collective's end minus its kernel's "
            "duration (copies of one collective end together), so the hosts' clocks need not "
            "agree.",
            "Lag = arrival after the other ranks' median, summed per step, minus the other "
            "ranks' typical lag; waiting inside a collective is never counted against a rank.",
            basis,
        ),
        extra={
            "lag_ms_by_rank": {int(r): round(v, 3) for r, v in sorted(lag.items())},
            "late_ms_by_rank": {int(r): round(v, 3) for r, v in sorted(lateness.items())},
            "wait_ms_by_rank": {int(r): round(v, 3) for r, v in sorted(waiting.items())},
        },
    )


def _by_step_time(digests: Sequence[Digest], floor: float, step_ms: float) -> Draft | None:
    """No collective matched across the ranks: ranks whose steps take longer (low confidence)."""
    ssteps, slag, excess = step_lags(digests)
    if not ssteps:
        raise Skip("the ranks' traces share no step numbers or collectives to compare")
    late = sorted((r for r in slag if slag[r] >= floor), key=lambda r: (-slag[r], r))
    if not late:
        return None
    worst = late[0]
    i = [d.rank_id for d in digests].index(worst)
    evidence = tuple(
        Evidence(
            f"step {s}: rank {worst} step time above the others", 1, round(float(excess[i, j]), 3)
        )
        for j, s in enumerate(ssteps[:5])
    )
    return Draft(
        id=ID,
        title=f"Rank {worst} holds the other ranks back",
        est_savings_ms=round(slag[worst], 3),
        confidence="low",
        summary=(
            f"Rank {worst} takes {slag[worst]:.2f} ms longer per step than the other ranks "
            f"(median over {len(ssteps)} step(s)): {slag[worst] / step_ms:.0%} of the "
            f"{step_ms:.1f} ms step{_others(slag, late)}. No collective could be matched "
            "across the ranks, so who waits for whom is not measured."
        ),
        recommendation=RECOMMENDATION.format(r=worst),
        snippet=SNIPPET,
        evidence=evidence,
        assumptions=(
            f"{len(digests)} ranks compared by step time only (no collective matched across them).",
            "The others wait about this long per step for the straggler; removing its cause "
            "saves that much.",
        ),
        extra={"lag_ms_by_rank": {int(r): round(v, 3) for r, v in sorted(slag.items())}},
    )
