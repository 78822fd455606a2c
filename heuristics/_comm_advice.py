"""Advice for exposed communication that fits the pattern found (used by ``comm-overlap``).

- *waiting for peers* (most exposed time is before the last rank arrives): overlap cannot hide
  it; point to the rank that arrives last (``straggler``) and, for all-to-all, to uneven splits;
- *per-parameter collectives* (many collectives per step and no DDP reducer): bucket or
  coalesce them (``unbucketed-collectives``), never DDP's ``bucket_cap_mb`` (there is no DDP);
- otherwise, the overlap advice of the most exposed collective, with DDP bucket tuning only
  when a DDP reducer runs (``DistributedDataParallel.forward``/reducer ranges, or run.json's
  ``modules.distributed_data_parallel``).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from advisor.comm import has_ddp_reducer
from advisor.registry import Context
from advisor.trace.model import Trace


@dataclass(frozen=True)
class CommPattern:
    kinds: tuple[str, ...]  # "peer-wait", "per-parameter", "overlap"
    advice: str
    snippet: str
    why: str


_OVERLAP = {
    "AllReduce": "start each all-reduce as soon as its gradients are ready, under the rest of "
    "the backward pass",
    "AllGather": "prefetch parameters (FSDP forward_prefetch=True, "
    "backward_prefetch=BackwardPrefetch.BACKWARD_PRE) so all-gathers run under compute",
    "ReduceScatter": "let FSDP overlap reduce-scatter with backward (backward_prefetch="
    "BackwardPrefetch.BACKWARD_PRE; avoid limit_all_gathers stalls)",
    "SendRecv": "pipeline the exchange with computation (for embedding all-to-all, TorchRec "
    "TrainPipelineSparseDist; for pipeline parallelism, more micro-batches)",
}
_OVERLAP["AllToAll"] = _OVERLAP["SendRecv"]
_DDP = ("tune DDP gradient bucketing (smaller bucket_cap_mb so all-reduce starts during "
        "backward; gradient_as_bucket_view=True) and skip it on accumulation micro-steps with "
        "no_sync()")  # fmt: skip

DDP_SNIPPET = """\
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
COALESCE_SNIPPET = """\
# one collective per bucket of gradients instead of one per parameter
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors
grads = [p.grad for p in model.parameters() if p.grad is not None]
flat = _flatten_dense_tensors(grads)
dist.all_reduce(flat)
for g, synced in zip(grads, _unflatten_dense_tensors(flat, grads)):
    g.copy_(synced)
# or wrap the model in DistributedDataParallel, which buckets gradients for you
"""
WAIT_SNIPPET = """\
# waiting for the slowest rank: compare the ranks side by side
#   advisor analyze TRACE_DIR/      (one trace per rank: the straggler finding names it)
# give every rank the same work per step
sampler = torch.utils.data.distributed.DistributedSampler(dataset, drop_last=True)
"""
OVERLAP_SNIPPET = """\
# issue the collective asynchronously and wait for it only where the result is needed
work = dist.all_reduce(bucket, async_op=True)
...                                   # independent computation runs meanwhile
work.wait()
"""


def comm_pattern(trace: Trace, ctx: Context, k: pd.DataFrame, steps: int, wait_ms: float,
                 transfer_ms: float) -> CommPattern:  # fmt: skip
    """The advice for the communication kernels ``k`` (per_kernel_exposed rows with
    exposed_ns) given the exposed waiting and transfer per step."""
    ddp = has_ddp_reducer(trace) or bool(ctx.run_get("modules", "distributed_data_parallel"))
    per_step = len(k) / max(steps, 1)
    g = k.groupby("collective", sort=False)["exposed_ns"].sum().sort_values(ascending=False)
    top = str(g.index[0]) if len(g) else "AllReduce"
    kinds, advice, snippets = [], [], []
    # the most specific advice first: per-parameter collectives, then a late peer
    if not ddp and per_step >= ctx.t("comm_overlap.per_param_min_per_step"):
        kinds.append("per-parameter")
        advice.append(f"{per_step:.0f} collectives per step with no DDP reducer: one per "
                      "parameter. Bucket or coalesce them (see unbucketed-collectives): wrap the "
                      "model in DistributedDataParallel, or flatten the gradients into a few "
                      "buffers before all_reduce.")  # fmt: skip
        snippets.append(COALESCE_SNIPPET)
    if wait_ms > transfer_ms:
        kinds.append("peer-wait")
        extra = (" For all-to-all, uneven splits (embedding lookups or tokens routed unevenly) "
                 "make one rank late: balance them." if top in ("AllToAll", "SendRecv") else "")  # fmt: skip
        advice.append("Most of the exposed time is waiting for other ranks to reach the "
                      "collective, which overlap cannot hide: find the rank that arrives last "
                      "(analyze the folder with every rank's trace; see straggler) and what "
                      f"delays it (uneven work, data loading, host-side work).{extra}")  # fmt: skip
        snippets.append(WAIT_SNIPPET)
    if transfer_ms > 0 and "per-parameter" not in kinds:
        kinds.append("overlap")
        how = _DDP if ddp and top == "AllReduce" else _OVERLAP.get(top, _OVERLAP["AllReduce"])
        advice.append(f"Start collectives earlier and keep them off the critical path: {how}.")
        snippets.append(DDP_SNIPPET if ddp and top == "AllReduce" else OVERLAP_SNIPPET)
    why = (f"Pattern: {', '.join(kinds) or 'overlap'}; DDP reducer "
           f"{'present' if ddp else 'absent'}; {per_step:.0f} collective kernel(s) per step.")  # fmt: skip
    return CommPattern(tuple(kinds), " ".join(advice) or "Start collectives earlier.",
                       snippets[0] if snippets else OVERLAP_SNIPPET, why)  # fmt: skip
