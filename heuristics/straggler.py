"""Stragglers: ranks that reach the collectives late, so every other rank waits for them.

**What it detects.** A rank that is consistently the last one: it reaches the collectives
(all-reduce, all-to-all, ...) later than the other ranks, or its steps take longer. The check
needs one trace per rank (`advisor analyze DIR` with per-rank traces, or `advisor profile` under
torchrun); on a single trace it is skipped.

**Why it costs time.** In synchronous data-parallel training every rank waits inside each
collective until the last rank arrives, so the whole job runs at the pace of its slowest rank:
the others spend the straggler's lag idle, every step.

**How the saving is estimated.** Collectives are matched across ranks by name and end time
(copies of one collective end together; instances of process groups a rank is not in stay
out), or by step, name, stream and order when no ends agree. For each collective a rank's lag
is the smaller of two independent signals: its arrival (kernel start) after the median of the
other ranks, and how much shorter its collective kernel is than theirs (the others' kernels include the wait for it; this signal does
not depend on the hosts' clocks agreeing). Lags add up over a step's collectives; a rank's lag
per step is that sum minus the other ranks' typical sum (so mutual, random waiting cancels), and
the figure is the median over steps. Ranks whose step time exceeds the others' are reported too
(low confidence). The others wait about the straggler's lag per step, so removing its cause
saves that much (the largest lag when several ranks straggle).

**How to fix.** Look at what differs on the slow rank: its own findings and its row in the
per-rank table (a data-loading stall or host-side work on one rank only), uneven work (shards of
different size, variable sequence lengths: use `DistributedSampler(drop_last=True)` and bucket by
length), the machine (a slower or throttled GPU, another job or too many DataLoader workers on
that node, CPU/NUMA placement). Open the straggler's trace next to another rank's at the
timestamps in the evidence.

**Known false positives.** Pipeline-parallel stages and ranks that do different work by design
(a parameter-server rank, rank 0 doing extra logging or checkpointing on purpose) lag by design.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from advisor.derive.lag import collective_lags, combine, step_lags
from advisor.detect import Draft, Evidence
from advisor.detect.registry import Context, RanksContext, Skip, across_ranks, detector
from advisor.detect.thresholds import register
from advisor.trace.model import Trace

ID = "straggler"
register("straggler.min_lag_pct", 5.0, "report a rank lagging by this % of the median step")
register("straggler.min_lag_ms", 0.5, "and by at least this many ms per step")

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


@detector(ID, "A slow rank holds the others back", needs=("steps",))
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    raise Skip("needs one trace per rank: analyze a folder of per-rank traces")


@across_ranks(ID, only_across=True)
def detect_ranks(drafts: list[Draft], digests: Sequence[Any], ctx: RanksContext) -> list[Draft]:
    """The cross-rank check: digests of distinct, known ranks (two or more), in rank order."""
    if len(digests) < 2:
        raise Skip("needs traces from two or more ranks")
    step_ms = ctx.step_ms_median
    floor = max(ctx.t("straggler.min_lag_ms"), step_ms * ctx.t("straggler.min_lag_pct") / 100.0)
    csteps, clag, rows = collective_lags(digests)
    ssteps, slag, excess = step_lags(digests)
    if not csteps and not ssteps:
        raise Skip("the ranks' traces share no step numbers or collectives to compare")
    lag = combine(clag, slag)
    late = sorted((r for r in lag if lag[r] >= floor), key=lambda r: (-lag[r], r))
    if not late:
        return drafts
    worst = late[0]
    by_coll = clag.get(worst, 0.0) >= slag.get(worst, 0.0)
    evidence: list[Evidence] = []
    if by_coll:
        for r, s, ms, n, name, ts in rows:
            if r == worst and len(evidence) < 5:
                evidence.append(
                    Evidence(
                        f"step {s}: rank {r} late at {n} collective(s), worst {name}",
                        n,
                        round(ms, 3),
                        ts,
                    )
                )
        how = (
            f"reaches the collectives {lag[worst]:.2f} ms per step after the other ranks "
            f"(median over {len(csteps)} step(s)), while they wait inside them"
        )
    else:
        i = [int(d.rank) for d in digests].index(worst)
        for j, s in enumerate(ssteps[:5]):
            evidence.append(
                Evidence(
                    f"step {s}: rank {worst} step time above the others",
                    1,
                    round(float(excess[i, j]), 3),
                )
            )
        how = (
            f"takes {lag[worst]:.2f} ms longer per step than the other ranks "
            f"(median over {len(ssteps)} step(s))"
        )
    others = (
        f"; also lagging: {', '.join(f'rank {r} ({lag[r]:.2f} ms)' for r in late[1:6])}"
        if len(late) > 1
        else ""
    )
    return [
        *drafts,
        Draft(
            id=ID,
            title=f"Rank {worst} holds the other ranks back",
            est_savings_ms=round(lag[worst], 3),
            confidence="medium" if by_coll else "low",
            summary=(
                f"Rank {worst} {how}: {lag[worst] / step_ms:.0%} of the {step_ms:.1f} ms "
                f"step{others}."
            ),
            recommendation=(
                f"Find what makes rank {worst} slower: compare its row in the per-rank "
                "table and its own findings with the others', check for uneven work per "
                "rank (shard sizes, sequence lengths) and for a slower or busier machine. "
                f"Open rank {worst}'s trace beside another rank's at the evidence "
                "timestamps."
            ),
            snippet=SNIPPET,
            evidence=tuple(evidence),
            assumptions=(
                f"{len(digests)} ranks compared; lag = the smaller of arrival delay and shorter "
                "collective time, summed per step, minus the other ranks' typical lag.",
                "The others wait about this long per step for the straggler; removing its cause "
                "saves that much.",
            ),
        ),
    ]
