"""Exposed communication: collectives the GPU runs while no computation hides them.

**What it detects.** Communication kernels (NCCL/RCCL all-reduce, all-gather, reduce-scatter,
all-to-all, send/recv) running while no computation kernel runs on the same GPU. That time is
*exposed*: the GPU only moves data (or waits for the other ranks) and the step is longer by it.
The overlap share follows Holistic Trace Analysis (`get_comm_comp_overlap`): the part of the
union of communication kernels covered by the union of computation kernels.

**Why it costs time.** Data-parallel training hides gradient all-reduce under the backward pass:
DDP all-reduces a bucket of gradients as soon as it is ready, while later layers' gradients are
still being computed. When buckets are too large, gradients become ready late, collectives sit
behind a synchronization, or the collectives run on the compute stream, the GPU waits.

**How the saving is estimated.** The exposed communication time per step (union of
communication minus its overlap with computation, over the steps HTA counts), capped at the
computation time per step that does not already overlap communication (what could hide it).
The low end of the range assumes half of it can be hidden. Exposed time also includes time spent
waiting for a slower rank: when `straggler` fires too, fix that first.

**How to fix.** With DDP: smaller `bucket_cap_mb` so the first all-reduce starts earlier,
`gradient_as_bucket_view=True`, `no_sync()` on gradient-accumulation micro-steps, no host syncs
(`.item()`, logging) between `backward()` and the optimizer step. With FSDP: `forward_prefetch`
and `backward_prefetch=BACKWARD_PRE`. For all-to-all in recommendation models: pipeline the
embedding exchange with the dense compute (TorchRec `TrainPipelineSparseDist`). Larger batches
per GPU raise the compute that can hide a fixed amount of communication.

**Known false positives.** The last all-reduce of a step cannot overlap anything in plain DDP;
a trace with very short steps may show that as exposed. Exposed time that is really waiting for
another rank is a straggler problem, not an overlap problem.
"""

from __future__ import annotations

import numpy as np

from advisor.comm import comm_stats, per_kernel_exposed
from advisor.findings import Draft, Evidence
from advisor.locate import aggregate
from advisor.registry import Context, Skip, detector
from advisor.thresholds import register
from advisor.trace.model import Trace

ID = "comm-overlap"
register("comm_overlap.min_exposed_pct", 3.0,
         "report exposed communication from this % of the median step")  # fmt: skip
register("comm_overlap.min_exposed_ms", 0.1, "and from this many ms per step")

_ADVICE = {
    "AllReduce": "tune DDP gradient bucketing (smaller bucket_cap_mb so all-reduce starts during "
    "backward; gradient_as_bucket_view=True) and skip it on accumulation micro-steps with "
    "no_sync()",
    "AllGather": "prefetch parameters (FSDP forward_prefetch=True, "
    "backward_prefetch=BackwardPrefetch.BACKWARD_PRE) so all-gathers run under compute",
    "ReduceScatter": "let FSDP overlap reduce-scatter with backward (backward_prefetch="
    "BackwardPrefetch.BACKWARD_PRE; avoid limit_all_gathers stalls)",
    "SendRecv": "pipeline the exchange with computation (for embedding all-to-all, TorchRec "
    "TrainPipelineSparseDist; for pipeline parallelism, more micro-batches)",
}
_ADVICE["AllToAll"] = _ADVICE["SendRecv"]

SNIPPET = """\
model = torch.nn.parallel.DistributedDataParallel(
    model, device_ids=[local_rank],
    bucket_cap_mb=10,               # smaller buckets: the first all-reduce starts earlier
    gradient_as_bucket_view=True,   # no copy between gradients and buckets
)
for i, batch in enumerate(loader):
    last_micro_step = (i + 1) % accum_steps == 0
    ctx = contextlib.nullcontext() if last_micro_step else model.no_sync()
    with ctx:                        # all-reduce only on the last micro-step
        loss = model(batch).mean() / accum_steps
        loss.backward()
    if last_micro_step:
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
"""


@detector(ID, "Communication not hidden under computation", needs=("kernels",), gpu_only=True)
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    cs = comm_stats(trace)
    if cs is None:
        raise Skip("no communication kernels (NCCL/RCCL) in this trace")
    exposed_ms = cs.exposed_ms_per_step
    step_ms = ctx.step_ms_median
    floor = max(ctx.t("comm_overlap.min_exposed_ms"),
                step_ms * ctx.t("comm_overlap.min_exposed_pct") / 100.0)  # fmt: skip
    if exposed_ms < floor:
        return []
    free_compute_ms = (cs.compute_ns - cs.overlap_ns) / 1e6 / max(cs.steps, 1)
    saving = min(exposed_ms, free_compute_ms)
    if saving <= 0:
        return []
    k = per_kernel_exposed(trace, cs.device)
    g = k.groupby("collective", sort=False).agg(
        count=("exposed_ns", "size"), exposed=("exposed_ns", "sum"), total=("dur_ns", "sum")
    )
    g = g.sort_values("exposed", ascending=False)
    evidence = []
    for name, r in g.head(5).iterrows():
        rows = k[k["collective"] == name]
        worst = rows.iloc[int(np.argmax(rows["exposed_ns"].to_numpy()))]
        evidence.append(Evidence(
            f"{name}: {r['exposed'] / 1e6:.2f} ms exposed of {r['total'] / 1e6:.2f} ms",
            int(r["count"]), round(float(r["exposed"]) / 1e6, 3),
            trace.to_trace_us(int(worst["ts_ns"]))))  # fmt: skip
    top = [str(n) for n in g.index[:3]]
    advice = "; ".join(dict.fromkeys(_ADVICE[n] for n in top if n in _ADVICE))
    rt = trace.runtime
    ops = rt["op_idx"].to_numpy()[k["launch_idx"].to_numpy()] if len(rt) and len(k) else []
    locations = aggregate(ctx.locator.for_op(int(i)) for i in ops if i >= 0)
    names = ", ".join(f"{n} ({g.loc[n, 'exposed'] / 1e6 / max(cs.steps, 1):.2f} ms)" for n in top)
    return [Draft(
        id=ID,
        title="Communication not hidden under computation",
        est_savings_ms=round(saving, 3),
        est_savings_range_ms=(round(saving / 2, 3), round(saving, 3)),
        confidence="medium",
        summary=(f"{exposed_ms:.2f} ms of communication per step ({exposed_ms / step_ms:.0%} of "
                 f"the {step_ms:.1f} ms step) runs with no computation beside it; only "
                 f"{cs.overlap_pct:.1f}% of the {cs.comm_ns / 1e6 / max(cs.steps, 1):.2f} ms of "
                 f"communication per step overlaps compute. Most exposed: {names}."),  # fmt: skip
        recommendation=(f"Start collectives earlier and keep them off the critical path: "
                        f"{advice or _ADVICE['AllReduce']}. Check first that no rank is a "
                        "straggler: waiting for a slow rank also shows as exposed communication."),
        snippet=SNIPPET,
        evidence=tuple(evidence),
        locations=locations,
        assumptions=(
            f"Over {cs.steps} step(s) on device {cs.device}, the last step dropped as HTA does.",
            "Saving = exposed communication, capped at the computation per step that does not "
            f"already overlap communication ({free_compute_ms:.2f} ms); low end: half of it.",
            "Exposed time includes waiting for slower ranks.",
        ),
    )]  # fmt: skip
