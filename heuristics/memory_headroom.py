"""GPU memory far below capacity (room for a larger batch) or close to it (OOM risk).

**What it detects.** Peak GPU memory against the device's capacity. Sources, best first:
run.json ``memory`` (``torch.cuda.max_memory_allocated`` / ``max_memory_reserved`` over the
run) with ``device.total_memory_bytes``; the trace's ``[memory]`` events (``profile_memory``:
``Total Allocated`` / ``Total Reserved`` for CUDA devices) with the capacity from
``deviceProperties``. Old traces (PyTorch < 1.10) record only each allocation's size: their
running sum gives a lower bound of the peak, which can show memory is nearly full but never
that it is mostly free.

**Why it costs time.** Under ``memory_headroom.low_pct`` (50%) of the GPU in use, a larger batch
(or a larger model, fewer gradient-accumulation steps) usually raises throughput for free:
per-step overheads are amortized and kernels get bigger. Above ``memory_headroom.high_pct``
(90%) the caching allocator is close to out-of-memory: it frees and re-allocates
(``cudaFree``/``cudaMalloc`` stalls) and a longer sequence or a new shape crashes the run.

**How the saving is estimated.** It is not: memory use has no direct per-step time cost, so
this is information (``info``). The summary gives the peak and the free memory.

**How to fix.** Plenty of room: raise the batch size (scale the learning rate). Close to full: mixed
precision (bf16/fp16 autocast halves activations), activation checkpointing
(``torch.utils.checkpoint``), and ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` when
reserved memory is well above allocated memory (fragmentation). On a trace with no backward
(inference), the advice speaks of samples per call, autocast and ``torch.inference_mode()``:
no learning rate, gradient accumulation or activation checkpointing.

**Known false positives.** The profiled window may miss the run's peak (evaluation, a longer
batch); other processes on the GPU and the CUDA context (a few hundred MB) are not counted.
"""

from __future__ import annotations

from typing import NamedTuple

from advisor.detect.draft import Draft
from advisor.detect.registry import Context, Skip, detector
from advisor.detect.thresholds import register
from advisor.findings import Evidence
from advisor.trace.model import Trace

from ._memory import Peak, gb, peak_from_run, peaks_from_trace
from ._ops import has_backward

ID = "memory-headroom"
TITLE = "GPU memory headroom"

register(
    "memory_headroom.low_pct",
    50.0,
    "peak GPU memory below this % of capacity suggests a larger batch",
)
register(
    "memory_headroom.high_pct",
    90.0,
    "peak GPU memory above this % of capacity suggests checkpointing or AMP",
)

SNIPPET_LOW = """# memory is mostly free: grow the batch (and scale the learning rate with it)
loader = DataLoader(dataset, batch_size=2 * batch_size, ...)
optimizer = torch.optim.AdamW(model.parameters(), lr=lr * 2)
"""
SNIPPET_HIGH = """# memory is nearly full: autocast halves activations, checkpointing recomputes them
with torch.autocast("cuda", dtype=torch.bfloat16):
    out = model(x)
# in the model's forward, for the big blocks:
from torch.utils.checkpoint import checkpoint
h = checkpoint(block, h, use_reentrant=False)
# fragmentation (reserved >> allocated): PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
"""

SNIPPET_LOW_INFER = """# memory is mostly free: more samples per call
loader = DataLoader(dataset, batch_size=2 * batch_size, ...)
"""
SNIPPET_HIGH_INFER = """# memory is nearly full: autocast halves activations; no graph kept for a backward
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    out = model(x)
# fragmentation (reserved >> allocated): PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
"""


class _Advice(NamedTuple):
    """What the peak calls for: the words, the fix and any assumption it adds."""

    summary: str
    rec: str
    snippet: str
    assumptions: tuple[str, ...] = ()


@detector(ID, TITLE)
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    peak = _peak(trace, ctx)
    advice = _advice(trace, ctx, peak)
    if advice is None:
        return []
    example = trace.to_trace_us(peak.ts_ns) if peak.ts_ns is not None else None
    return [
        Draft(
            id=ID,
            title=TITLE,
            est_savings_ms=0.0,
            latent=True,
            confidence="medium" if peak.lower_bound else "high",
            summary=advice.summary,
            recommendation=advice.rec,
            snippet=advice.snippet,
            evidence=(Evidence(f"peak memory from {peak.source}", 1, 0.0, example),),
            assumptions=(
                "Memory has no direct per-step time cost: reported as information (no saving).",
                "Other processes on the GPU and the CUDA context are not counted; the profiled "
                "window may miss the run's peak.",
                *advice.assumptions,
            ),
        )
    ]


def _peak(trace: Trace, ctx: Context) -> Peak:
    """The fullest GPU's peak: run.json's, else the trace's ``[memory]`` events'."""
    peaks = [p for p in [peak_from_run(ctx)] if p is not None] or peaks_from_trace(trace)
    if not peaks:
        raise Skip(
            "no GPU memory data (profile with profile_memory=True, or use advisor "
            "profile, which records peak memory)"
        )
    return max(peaks, key=lambda p: max(p.allocated or 0, p.reserved or 0) / p.capacity)


def _what(peak: Peak) -> str:
    """The peak in words: "12.0 GB allocated, 14.0 GB reserved of 80.0 GB on GPU 0 (18%)"."""
    dev = "" if peak.device is None else f" on GPU {peak.device}"
    parts = []
    if peak.allocated is not None:
        parts.append(f"{gb(peak.allocated)} allocated")
    if peak.reserved is not None:
        parts.append(f"{gb(peak.reserved)} reserved")
    return (
        ("at least " if peak.lower_bound else "")
        + ", ".join(parts)
        + f" of {gb(peak.capacity)}{dev} ({peak.pct:.0f}%)"
    )


def _advice(trace: Trace, ctx: Context, peak: Peak) -> _Advice | None:
    """Close to full, mostly free, or neither (None); a lower bound that cannot show free
    memory is skipped."""
    pct = peak.pct
    if pct >= ctx.t("memory_headroom.high_pct"):
        return _nearly_full(trace, peak)
    if pct < ctx.t("memory_headroom.low_pct") and not peak.lower_bound:
        return _mostly_free(trace, peak)
    if peak.lower_bound:
        raise Skip(
            f"memory events record allocation sizes only (PyTorch < 1.10): peak is "
            f"{_what(peak)}, which cannot show how much memory is free"
        )
    return None


def _nearly_full(trace: Trace, peak: Peak) -> _Advice:
    frag = (
        peak.reserved is not None
        and peak.allocated is not None
        and peak.reserved > 1.2 * peak.allocated
    )
    train = has_backward(trace)
    rec = (
        "Free memory with mixed precision (bf16/fp16 autocast halves activations) or "
        + (
            "activation checkpointing of the largest blocks"
            if train
            else "a smaller batch per call (no backward here: no activations are kept "
            "for one, so checkpointing would not help; run under torch.inference_mode())"
        )
        + (
            "; reserved is well above allocated, so try "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True."
            if frag
            else "."
        )
    )
    return _Advice(
        f"Peak GPU memory is {_what(peak)}, within {100 - peak.pct:.0f}% of the device's "
        f"capacity: out-of-memory and allocator stalls are close.",
        rec,
        SNIPPET_HIGH if train else SNIPPET_HIGH_INFER,
    )


def _mostly_free(trace: Trace, peak: Peak) -> _Advice:
    train = has_backward(trace)
    rec = (
        "Raise the batch size (scaling the learning rate), use fewer gradient-"
        "accumulation steps, or fit a larger model: per-step overheads are amortized "
        "over more samples and kernels get bigger."
        if train
        else "Raise the batch size (more requests or samples per call), or serve a larger "
        "model: per-call overheads are amortized over more samples and kernels get bigger."
    )
    return _Advice(
        f"Peak GPU memory is {_what(peak)}: {gb(peak.capacity - peak.used)} stay unused, room "
        f"for a larger batch (activations grow about linearly with it).",
        rec,
        SNIPPET_LOW if train else SNIPPET_LOW_INFER,
        (
            "Parameters, gradients and optimizer state do not grow with the "
            "batch, so the batch can grow by more than the free share suggests.",
        ),
    )
