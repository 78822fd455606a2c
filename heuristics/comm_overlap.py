"""Exposed communication: collectives the GPU runs while no computation hides them.

**What it detects.** Communication kernels (NCCL/RCCL all-reduce, all-gather, reduce-scatter,
all-to-all, send/recv; DeepEP and the other libraries of ``advisor/trace/commroles.py``, and
kernels taken for communication by how they run: a side stream beside compute, few blocks)
running while no computation kernel runs on the same GPU. That time is
*exposed*: the GPU only moves data (or waits for the other ranks) and the step is longer by it.
The overlap share follows Holistic Trace Analysis (`get_comm_comp_overlap`): the part of the
union of communication kernels covered by the union of computation kernels.

**Why it costs time.** Data-parallel training hides gradient all-reduce under the backward pass:
DDP all-reduces a bucket of gradients as soon as it is ready, while later layers' gradients are
still being computed. When buckets are too large, gradients become ready late, collectives sit
behind a synchronization, or the collectives run on the compute stream, the GPU waits.

**How the saving is estimated.** Only exposed *transfer* is claimed, never waiting for a peer.
A collective kernel starts when its rank reaches it and spins until the last rank arrives;
that waiting is the slow rank's doing and overlap cannot hide it. With one trace per rank
(a folder), the instances of each collective are matched across ranks by their ends (which
coincide) and a rank's wait is the time to the last rank's start. With one trace, the
shortest instance of the same collective kernel is taken as its transfer time and the rest
of each instance as waiting (message sizes are not in the trace: this errs towards waiting,
so the claim stays conservative). The steady steps are then replayed (see docs/savings.md)
with each collective's transfer hidden under compute and its waiting kept: the saving is what
the step loses (nothing when the host, not the GPU, limits the step); the low end of the range
hides half of the transfer. For traces the replay cannot place: the exposed transfer per step,
capped at the computation per step that does not already overlap communication. With a folder
of per-rank traces the saving is valued for the job: the ranks' step graphs joined at the
collectives (a collective's transfer starts when the last rank arrives) are replayed with every
transfer hidden, and the claim is how much shorter the slowest rank's step gets (never more than
the largest one rank's own claim).

**How to fix.** The advice follows the pattern found. Mostly waiting: find the rank that
arrives last (`straggler`, per-rank table) and what delays it; for all-to-all, uneven splits.
Many per-parameter collectives and no DDP reducer: bucket or coalesce them (see
`unbucketed-collectives`). With a DDP reducer: smaller `bucket_cap_mb` so the first all-reduce
starts earlier, `gradient_as_bucket_view=True`, `no_sync()` on gradient-accumulation
micro-steps, no host syncs (`.item()`, logging) between `backward()` and the optimizer step.
With FSDP: `forward_prefetch` and `backward_prefetch=BACKWARD_PRE`. For all-to-all in
recommendation models: pipeline the embedding exchange with the dense compute (TorchRec
`TrainPipelineSparseDist`). Larger batches per GPU raise the compute that can hide a fixed
amount of communication.

**Known false positives.** The last all-reduce of a step cannot overlap anything in plain DDP;
a trace with very short steps may show that as exposed. On one trace, a collective whose every
instance waited (a rank always late) counts its shortest wait as transfer.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from advisor.derive.comm import CommStats, comm_stats, compute_union, per_kernel_exposed
from advisor.derive.locate import aggregate
from advisor.derive.peerwait import single_rank_transfer_ns, split_exposed
from advisor.detect.draft import Draft
from advisor.detect.registry import Context, Skip, detector
from advisor.detect.thresholds import register
from advisor.findings import Evidence, Location
from advisor.replay.fixes import HideComm
from advisor.trace.model import Trace

from ._comm_advice import comm_pattern
from ._comm_ranks import refine as refine  # registers the cross-rank split

ID = "comm-overlap"
register(
    "comm_overlap.min_exposed_pct",
    3.0,
    "report exposed communication from this % of the median step",
)
register("comm_overlap.min_exposed_ms", 0.1, "and from this many ms per step")


class _Facts(NamedTuple):
    """What the trace shows: the communication kernels with their exposed transfer and waiting
    (``k``), and the per-step figures the saving and the text read."""

    cs: CommStats
    k: pd.DataFrame
    steps: int
    step_ms: float
    free_compute_ms: float
    transfer_ms: float
    wait_ms: float


@detector(ID, "Communication not hidden under computation", needs=("kernels",), gpu_only=True)
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    f = _measure(trace, ctx)
    if f is None:
        return []
    fields, how, valued = _value(trace, ctx, f)
    pattern = comm_pattern(trace, ctx, f.k, f.steps, f.wait_ms, f.transfer_ms)
    g = _by_collective(f.k)
    return [
        Draft(
            id=ID,
            title="Communication not hidden under computation",
            **fields,
            confidence="low" if f.wait_ms > f.transfer_ms else "medium",
            summary=_summary(f, g, how),
            recommendation=pattern.advice,
            snippet=pattern.snippet,
            evidence=_evidence(trace, f.k, g),
            locations=_locations(trace, ctx, f.k),
            assumptions=(
                f"Over {f.cs.steps} step(s) on device {f.cs.device}, the last step dropped as "
                "HTA does.",
                "One rank: the shortest instance of each collective kernel (same name and stream) "
                "is taken as its transfer time and the rest of every instance as waiting for other "
                "ranks; message sizes are not in the trace, so waiting may be overstated and the "
                "saving understated. A folder with one trace per rank aligns the ranks instead.",
                valued,
                pattern.why,
            ),
            extra={
                "exposed_wait_ms": round(f.wait_ms, 3),
                "exposed_transfer_ms": round(f.transfer_ms, 3),
            },
        )
    ]


def _measure(trace: Trace, ctx: Context) -> _Facts | None:
    """The exposed communication split into transfer and waiting; None when it is under the
    report floor or no computation is left to hide it under."""
    cs = comm_stats(trace)
    if cs is None:
        raise Skip("no communication kernels (NCCL/RCCL) in this trace")
    step_ms = ctx.step_ms_median
    floor = max(
        ctx.t("comm_overlap.min_exposed_ms"),
        step_ms * ctx.t("comm_overlap.min_exposed_pct") / 100.0,
    )
    if cs.exposed_ms_per_step < floor:
        return None
    steps = max(cs.steps, 1)
    free_compute_ms = (cs.compute_ns - cs.overlap_ns) / 1e6 / steps
    k = per_kernel_exposed(trace, cs.device)
    transfer = single_rank_transfer_ns(
        k["name"].tolist(), k["stream"].to_numpy(), k["dur_ns"].to_numpy()
    )
    wait = k["dur_ns"].to_numpy() - transfer
    xt, xw = split_exposed(
        k["ts_ns"].to_numpy(), k["dur_ns"].to_numpy(), wait, *compute_union(trace, cs.device)
    )
    k = k.assign(exposed_transfer_ns=xt, exposed_wait_ns=xw)
    transfer_ms, wait_ms = float(xt.sum()) / 1e6 / steps, float(xw.sum()) / 1e6 / steps
    if free_compute_ms <= 0:
        return None
    return _Facts(cs, k, steps, step_ms, free_compute_ms, transfer_ms, wait_ms)


def _value(trace: Trace, ctx: Context, f: _Facts) -> tuple[dict[str, Any], str, str]:
    """The draft's saving fields, the summary's sentence on them and the assumption saying how
    they were found: the transfer hidden under compute, replayed; without a replayable step,
    the exposed transfer capped at the free computation."""
    kk = trace.kernels
    comm_rows = np.flatnonzero(
        kk["is_comm"].to_numpy(dtype=bool) & (kk["device"] == f.cs.device).to_numpy()
    )
    rep = ctx.whatif(HideComm(comm_rows, share=1.0, low=0.5, label="communication overlapped"))
    if rep.replayed:
        how = (
            f"Replayed with that transfer hidden under compute, the step is "
            f"{rep.ms:.2f} ms shorter."
        )
        return rep.draft_fields(), how, rep.assumption + " Low end: half of the transfer hidden."
    saving = max(0.0, min(f.transfer_ms, f.free_compute_ms))
    fields = {
        "est_savings_ms": round(saving, 3),
        "est_savings_range_ms": (round(saving / 2, 3), round(saving, 3)),
    }
    return (
        fields,
        "",
        "Saving = exposed transfer, capped at the computation per step that does not "
        f"already overlap communication ({f.free_compute_ms:.2f} ms); low end: half of it.",
    )


def _by_collective(k: pd.DataFrame) -> pd.DataFrame:
    """Per collective: instances, exposed, total and waiting time, most exposed first."""
    g = k.groupby("collective", sort=False).agg(
        count=("exposed_ns", "size"),
        exposed=("exposed_ns", "sum"),
        total=("dur_ns", "sum"),
        waiting=("exposed_wait_ns", "sum"),
    )
    return g.sort_values("exposed", ascending=False)


def _summary(f: _Facts, g: pd.DataFrame, how: str) -> str:
    cs, steps, step_ms = f.cs, f.steps, f.step_ms
    exposed_ms = cs.exposed_ms_per_step
    top = [str(n) for n in g.index[:3]]
    names = ", ".join(f"{n} ({g.loc[n, 'exposed'] / 1e6 / steps:.2f} ms)" for n in top)
    return (
        f"{exposed_ms:.2f} ms of communication per step ({exposed_ms / step_ms:.0%} of "
        f"the {step_ms:.1f} ms step) runs with no computation beside it; only "
        f"{cs.overlap_pct:.1f}% of the {cs.comm_ns / 1e6 / steps:.2f} ms of "
        f"communication per step overlaps compute. Of the exposed time, about "
        f"{f.wait_ms:.2f} ms is waiting for other ranks (overlap cannot hide it) and "
        f"{f.transfer_ms:.2f} ms is transfer. Most exposed: {names}. {how}"
    ).strip()


def _evidence(trace: Trace, k: pd.DataFrame, g: pd.DataFrame) -> tuple[Evidence, ...]:
    """The five most exposed collectives, each at its most exposed instance."""
    evidence = []
    for name, r in g.head(5).iterrows():
        rows = k[k["collective"] == name]
        worst = rows.iloc[int(np.argmax(rows["exposed_ns"].to_numpy()))]
        evidence.append(
            Evidence(
                f"{name}: {r['exposed'] / 1e6:.2f} ms exposed of {r['total'] / 1e6:.2f} ms "
                f"({r['waiting'] / 1e6:.2f} ms of it waiting for other ranks)",
                int(r["count"]),
                round(float(r["exposed"]) / 1e6, 3),
                trace.to_trace_us(int(worst["ts_ns"])),
            )
        )
    return tuple(evidence)


def _locations(trace: Trace, ctx: Context, k: pd.DataFrame) -> tuple[Location, ...]:
    """Where the ops that launched the communication kernels are called."""
    rt = trace.runtime
    ops = rt["op_idx"].to_numpy()[k["launch_idx"].to_numpy()] if len(rt) and len(k) else []
    return aggregate(ctx.locator.for_ops(i for i in np.asarray(ops, np.int64).tolist() if i >= 0))
