"""Advice for exposed communication that fits the pattern found (used by ``comm-overlap``).

- *waiting for peers* (most exposed time is before the last rank arrives): overlap cannot hide
  it; point to the rank that arrives last (``straggler``) and, for all-to-all, to uneven splits;
- *per-parameter collectives* (many collectives per step and no DDP reducer): only a pointer to
  ``unbucketed-collectives``, which owns that fix, its snippet and its saving (never DDP's
  ``bucket_cap_mb``: there is no DDP);
- otherwise, the overlap advice of the most exposed collective, with DDP bucket tuning only
  when a DDP reducer runs (``DistributedDataParallel.forward``/reducer ranges, or run.json's
  ``modules.distributed_data_parallel``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from advisor.derive.comm import has_ddp_reducer
from advisor.detect.registry import Context
from advisor.detect.thresholds import register
from advisor.trace.model import Trace

# unbucketed-collectives' threshold, declared here: it also picks comm-overlap's advice
register(
    "unbucketed_collectives.min_per_step",
    100.0,
    "collectives of one kind per step from which they count as unbucketed",
)


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
_DDP = (
    "tune DDP gradient bucketing (smaller bucket_cap_mb so all-reduce starts during "
    "backward; gradient_as_bucket_view=True) and skip it on accumulation micro-steps with "
    "no_sync()"
)

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


def comm_pattern(
    trace: Trace, ctx: Context, k: pd.DataFrame, steps: int, wait_ms: float, transfer_ms: float
) -> CommPattern:
    """The advice for the communication kernels ``k`` (per_kernel_exposed rows with
    exposed_ns) given the exposed waiting and transfer per step."""
    ddp = has_ddp_reducer(trace) or bool(ctx.live.modules.distributed_data_parallel)
    per_step = len(k) / max(steps, 1)
    g = k.groupby("collective", sort=False)["exposed_ns"].sum().sort_values(ascending=False)
    top = str(g.index[0]) if len(g) else "AllReduce"
    kinds, advice, snippets = [], [], []
    # the most specific advice first: per-parameter collectives, then a late peer
    if not ddp and per_step >= ctx.t("unbucketed_collectives.min_per_step"):
        kinds.append("per-parameter")
        advice.append(
            f"{per_step:.0f} collectives per step with no DDP reducer: one per "
            "parameter. Bucketing them comes first; the unbucketed-collectives "
            "finding gives that fix and its saving."
        )
    if wait_ms > transfer_ms:
        kinds.append("peer-wait")
        extra = (
            " For all-to-all, uneven splits (embedding lookups or tokens routed unevenly) "
            "make one rank late: balance them."
            if top in ("AllToAll", "SendRecv")
            else ""
        )
        advice.append(
            "Most of the exposed time is waiting for other ranks to reach the "
            "collective, which overlap cannot hide: find the rank that arrives last "
            "(analyze the folder with every rank's trace; see straggler) and what "
            f"delays it (uneven work, data loading, host-side work).{extra}"
        )
        snippets.append(WAIT_SNIPPET)
    if transfer_ms > 0 and "per-parameter" not in kinds:
        kinds.append("overlap")
        how = _DDP if ddp and top == "AllReduce" else _OVERLAP.get(top, _OVERLAP["AllReduce"])
        advice.append(f"Start collectives earlier and keep them off the critical path: {how}.")
        snippets.append(DDP_SNIPPET if ddp and top == "AllReduce" else OVERLAP_SNIPPET)
    why = (
        f"Pattern: {', '.join(kinds) or 'overlap'}; DDP reducer "
        f"{'present' if ddp else 'absent'}; {per_step:.0f} collective kernel(s) per step."
    )
    return CommPattern(
        tuple(kinds),
        " ".join(advice) or "Start collectives earlier.",
        snippets[0] if snippets else OVERLAP_SNIPPET,
        why,
    )


# ---- unbucketed-collectives: the bucketing fix for where the collectives come from

COMPILED_MARKS = (
    "CompiledFunction",
    "Torch-Compiled Region",
    "CompiledAutograd",
    "compiled_autograd",
)
FSDP_MARKS = ("FullyShardedDataParallel", "FSDP::", "fsdp::")


@dataclass(frozen=True)
class BucketAdvice:
    source_text: str
    text: str
    snippet: str


def collective_source(trace: Trace, ops: Any, ddp: bool, fsdp: bool = False) -> tuple[str, str]:
    """Where the collective calls ``ops`` (cpu_ops rows) come from: ("compiled", "fsdp",
    "ddp" or "manual", the enclosing op or range that shows it, "" when none); ``fsdp``:
    run.json saw an FSDP module."""
    names = trace.cpu_ops["name"].astype(str).to_numpy() if len(trace.cpu_ops) else []
    parent = trace.cpu_ops["parent_idx"].to_numpy() if len(trace.cpu_ops) else []
    seen: dict[str, int] = {}
    for i in list(ops)[:200]:
        j, hops = int(i), 0
        while 0 <= j < len(names) and hops < 32:
            seen[str(names[j])] = seen.get(str(names[j]), 0) + 1
            j, hops = int(parent[j]), hops + 1
    for marks, src in ((COMPILED_MARKS, "compiled"), (FSDP_MARKS, "fsdp")):
        hit = [n for n in seen if any(m in n for m in marks)]
        if hit:
            return src, min(hit, key=len)
    cats = [
        str(c)
        for df in (trace.annotations, trace.cpu_ops)
        if len(df)
        for c in df["name"].array.categories
    ]
    fsdp_ranges = [c for c in cats if any(m in c for m in FSDP_MARKS)]
    if fsdp_ranges:
        return "fsdp", min(fsdp_ranges, key=len)
    if fsdp:
        return "fsdp", "an FSDP module (run.json)"
    return ("ddp", "a DDP reducer") if ddp else ("manual", "")


_SOURCE_TEXT = {
    "compiled": "issued one by one from a compiled (torch.compile) function",
    "fsdp": "issued by FSDP units",
    "ddp": "issued by a DDP reducer",
    "manual": "issued by direct torch.distributed calls, with no DDP reducer",
}


def bucketing_advice(source: str, kind: str) -> BucketAdvice:
    """The bucketing fix for collectives of ``kind`` from ``source`` (collective_source)."""
    if source == "compiled":
        text = (
            "The collectives were traced into the compiled graph, one per gradient. Keep "
            "DistributedDataParallel outside torch.compile (torch.compile(DDP(model))): its "
            "reducer buckets gradients (25 MB by default) and "
            "torch._dynamo.config.optimize_ddp (default 'ddp_optimizer') splits the graph "
            "at bucket boundaries so all-reduce overlaps the backward pass; with compiled "
            "autograd use optimize_ddp = 'python_reducer'. If the compiled function "
            "all-reduces gradients itself, flatten them into one buffer first."
        )
        snippet = COMPILED_DDP_SNIPPET
    elif source == "fsdp":
        text = (
            f"FSDP issues one {kind} per wrapped unit: the wrap policy is too fine. Wrap "
            "whole transformer blocks (ModuleWrapPolicy({Block}) or fully_shard(block) per "
            "block), never individual nn.Linear layers, or use a size-based policy with a "
            "larger min_num_params."
        )
        snippet = FSDP_SNIPPET
    elif source == "ddp":
        text = (
            "The DDP reducer sends many small buckets: wrap the whole model in one "
            "DistributedDataParallel (not one per submodule) and raise bucket_cap_mb "
            "(default 25) so gradients travel in a few large all-reduces; "
            "static_graph=True lets DDP reorder buckets to the backward order."
        )
        snippet = DDP_BUCKET_SNIPPET
    else:
        text = (
            "Each tensor is sent in its own collective. Flatten the gradients into a few "
            "buffers (or torch.distributed's coalescing manager) before all_reduce, or wrap "
            "the model in DistributedDataParallel, which buckets gradients and overlaps the "
            "all-reduce with the backward pass."
        )
        snippet = COALESCE_SNIPPET
    return BucketAdvice(_SOURCE_TEXT.get(source, source), text, snippet)


COMPILED_DDP_SNIPPET = """\
# let DDP bucket the gradients, and compile the DDP-wrapped model
import torch._dynamo
torch._dynamo.config.optimize_ddp = "ddp_optimizer"   # the default: graph split at buckets
model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
model = torch.compile(model)
# no dist.all_reduce(p.grad) per parameter inside the compiled function
"""
FSDP_SNIPPET = """\
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import ModuleWrapPolicy
# one FSDP unit per transformer block: one all-gather / reduce-scatter per block
model = FSDP(model, auto_wrap_policy=ModuleWrapPolicy({TransformerBlock}))
"""
DDP_BUCKET_SNIPPET = """\
# one DDP wrapper around the whole model, with larger buckets
model = torch.nn.parallel.DistributedDataParallel(
    model, device_ids=[local_rank],
    bucket_cap_mb=100,       # default 25: fewer, larger all-reduces
    static_graph=True,       # the same graph every step
)
"""
