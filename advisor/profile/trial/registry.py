"""Every fix ``advisor try`` can apply, and every finding it cannot fix at run time (with why).

``--fix`` takes fix ids (the finding id they answer, plus ``amp``) separated by commas, or
``all-safe``: every fix that does not change numerics and whose finding fired in the before
run. A finding listed in :data:`NOT_APPLICABLE` needs a change to the code (or to the job) and
is reported as such, never run.
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor.errors import AdvisorError
from advisor.profile.trial.backends import Autocast, CudnnBenchmark, Tf32Matmul
from advisor.profile.trial.base import Fix, RunFacts
from advisor.profile.trial.loaders import DataLoaderStall, PinnedCopies
from advisor.profile.trial.modules import ChannelsLast, InferenceWithoutNoGrad
from advisor.profile.trial.optim import SingleTensorOptimizer, ZeroGradNotNone

ALL_SAFE = "all-safe"

FIXES: dict[str, Fix] = {
    f.id: f
    for f in (
        DataLoaderStall(),
        PinnedCopies("pageable-memcpy"),
        PinnedCopies("blocking-copy"),
        ZeroGradNotNone(),
        SingleTensorOptimizer(),
        CudnnBenchmark(),
        Tf32Matmul(),
        Autocast(),
        ChannelsLast(),
        InferenceWithoutNoGrad(),
    )
}

_CODE = "needs a change to the code: "
NOT_APPLICABLE: dict[str, str] = {
    "conv-bias-before-bn": _CODE + "Conv2d(bias=False) changes the model's parameters (and "
    "its checkpoints), which a run-time patch must not do",
    "misaligned-dims": _CODE + "padding vocabulary, hidden or batch sizes changes the model "
    "and the data",
    "python-loop": _CODE + "the per-element Python loop has to be rewritten as batched "
    "tensor operations",
    "cat-in-loop": _CODE + "the loop must collect the pieces and call torch.cat once",
    "sync-point": _CODE + "which .item()/.cpu()/branches can move is the script's logic",
    "tiny-kernels": _CODE + "larger batches, fused ops or torch.compile/CUDA graphs change "
    "how the script computes",
    "host-tensor-creation": _CODE + "tensors must be created with device=... where they are built",
    "fusible-elementwise": _CODE + "torch.compile of the right function (compiling whole "
    "models at run time changes too much to measure one fix)",
    "data-parallel": "needs a change to the launch: DistributedDataParallel runs one process "
    "per GPU under torchrun",
    "memory-headroom": "a larger batch changes the training itself (learning rate, steps per "
    "epoch); no saving is estimated",
    "gpu-idle": "a summary of idle time: the fix is the one of the finding it names "
    "(dataloader-stall, sync-point, ...)",
    "one-time-init": "one-time work is already kept out of the per-step figures",
    "comm-overlap": "needs a multi-rank job and changes to the DDP/FSDP setup",
    "straggler": "needs a multi-rank job; the cause is outside the script",
    "unbucketed-collectives": "needs a multi-rank job and a change to how gradients are reduced",
    "host-overhead": _CODE + "torch.compile or CUDA graphs, or fewer, larger operations",
    "allocator-churn": _CODE + "empty_cache() calls or changing shapes come from the script",
    "device-copies": _CODE + "the copies (.contiguous(), .clone(), casts) are the script's",
    "kernel-efficiency": _CODE + "a different kernel, dtype or shape",
    "attention-materialized": _CODE + "the attention must call "
    'F.scaled_dot_product_attention (or load the model with attn_implementation="sdpa")',
    "optimizer-host-time": "try the single-tensor-optimizer fix (foreach); fused=True or "
    "torch.compile of the step is a code change",
    "activation-recompute": _CODE + "which blocks are checkpointed is the model's choice, "
    "and removing it can run out of memory",
    "host-preprocessing": _CODE + "moving preprocessing into DataLoader workers or onto the "
    "GPU restructures the input pipeline",
    "compile-graph-breaks": _CODE + "the code dynamo cannot trace has to be rewritten",
    "compile-recompiles": _CODE + "marking sizes dynamic or keeping guarded values fixed "
    "happens where the inputs are built",
    "inference-in-train-mode": _CODE + "model.eval() belongs where the script evaluates",
    "uneven-kernel-speed": "the cause lies outside the script's code (clocks, another process "
    "on the GPU) or in where its slow calls' data lives",
}


@dataclass(frozen=True)
class Selection:
    """What ``--fix`` asked for, split by what the before run allows."""

    run: tuple[str, ...]  # fix ids to apply
    skipped: tuple[tuple[str, str], ...]  # (id, reason): a fix that cannot act on this run
    not_applicable: tuple[tuple[str, str], ...]  # (finding id, why try cannot fix it)


def parse_fix_ids(spec: str) -> tuple[str, ...]:
    """The ids named by ``--fix`` (``all-safe`` stays itself); AdvisorError for unknown ids."""
    ids = tuple(dict.fromkeys(s.strip() for s in spec.split(",") if s.strip()))
    if not ids:
        raise AdvisorError("--fix expects fix ids (comma-separated) or all-safe")
    for i in ids:
        if i != ALL_SAFE and i not in FIXES and i not in NOT_APPLICABLE:
            known = ", ".join(sorted(FIXES))
            raise AdvisorError(f"--fix: unknown fix {i!r} (known: {known}, or {ALL_SAFE})")
    return ids


def select(ids: tuple[str, ...], facts: RunFacts) -> Selection:
    """Resolve ``ids`` against the before run: ``all-safe`` picks every fix that keeps numerics
    and whose finding fired; a named fix runs when it can act on this run."""
    run: list[str] = []
    skipped: list[tuple[str, str]] = []
    na: list[tuple[str, str]] = []
    for i in ids:
        if i == ALL_SAFE:
            for fid, fix in FIXES.items():
                if fix.numerics_changing or not set(fix.finding_ids) & facts.findings:
                    continue
                reason = fix.applies_to(facts)
                if reason is None:
                    run.append(fid)
            for fid in sorted(facts.findings & NOT_APPLICABLE.keys()):
                na.append((fid, NOT_APPLICABLE[fid]))
        elif i in NOT_APPLICABLE:
            na.append((i, NOT_APPLICABLE[i]))
        else:
            reason = FIXES[i].applies_to(facts)
            if reason is None:
                run.append(i)
            else:
                skipped.append((i, reason))
    return Selection(tuple(dict.fromkeys(run)), tuple(skipped), tuple(dict.fromkeys(na)))
