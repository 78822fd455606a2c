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
reserved memory is well above allocated memory (fragmentation).

**Known false positives.** The profiled window may miss the run's peak (evaluation, a longer
batch); other processes on the GPU and the CUDA context (a few hundred MB) are not counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from advisor.detect import Draft, Evidence
from advisor.detect.registry import Context, Skip, detector
from advisor.detect.thresholds import register
from advisor.trace.model import Trace

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

CUDA_DEVICE_TYPE = 1  # c10::DeviceType::CUDA (ROCm reports as CUDA too)
GB = 1024**3

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


@dataclass(frozen=True)
class Peak:
    source: str
    device: int | None
    allocated: int | None
    reserved: int | None
    capacity: int
    lower_bound: bool = False
    ts_ns: int | None = None


def _from_run(ctx: Context) -> Peak | None:
    if ctx.run_get("device", "type", default="cuda") not in ("cuda", "rocm", "hip"):
        return None  # a CPU run: total_memory_bytes is host RAM
    alloc = ctx.run_get("memory", "peak_allocated_bytes")
    res = ctx.run_get("memory", "peak_reserved_bytes")
    cap = ctx.run_get("device", "total_memory_bytes")
    ok = [v for v in (alloc, res) if isinstance(v, int | float) and v > 0]
    if not ok or not isinstance(cap, int | float) or cap <= 0:
        return None
    return Peak(
        "run.json (whole run)",
        None,
        int(alloc) if isinstance(alloc, int | float) else None,
        int(res) if isinstance(res, int | float) else None,
        int(cap),
    )


def _capacity(trace: Trace, device_id: int) -> int | None:
    devs = trace.meta.devices
    match = [d for d in devs if d.id == device_id]
    if not match and len(devs) == 1:
        match = list(devs)
    cap = match[0].total_memory_bytes if match else None
    return int(cap) if cap else None


def _from_trace(trace: Trace) -> list[Peak]:
    mem = trace.memory
    if not len(mem):
        return []
    mem = mem[mem["device_type"].to_numpy() == CUDA_DEVICE_TYPE]
    out = []
    for dev, g in mem.groupby("device_id", sort=True):
        cap = _capacity(trace, int(dev))
        if cap is None:
            continue
        alloc, res = g["total_allocated"], g["total_reserved"]
        if alloc.notna().any() and float(alloc.max()) > 0:
            r = int(res.max()) if res.notna().any() and float(res.max()) > 0 else None
            at = int(g["ts_ns"].to_numpy()[int(np.nanargmax(alloc.to_numpy(dtype=float)))])
            out.append(Peak("trace [memory] events", int(dev), int(alloc.max()), r, cap, ts_ns=at))
        else:  # old traces: allocation sizes only; baseline before the trace is unknown
            run = np.cumsum(g.sort_values("ts_ns", kind="stable")["bytes"].to_numpy())
            if len(run):
                lb = int(run.max() - min(0, int(run.min())))
                out.append(
                    Peak(
                        "trace [memory] events (sizes only: lower bound)",
                        int(dev),
                        lb,
                        None,
                        cap,
                        lower_bound=True,
                    )
                )
    return out


def _gb(v: float) -> str:
    return f"{v / GB:.1f} GB"


@detector(ID, TITLE)
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    peaks = [p for p in [_from_run(ctx)] if p is not None] or _from_trace(trace)
    if not peaks:
        raise Skip(
            "no GPU memory data (profile with profile_memory=True, or use advisor "
            "profile, which records peak memory)"
        )
    peak = max(peaks, key=lambda p: max(p.allocated or 0, p.reserved or 0) / p.capacity)
    used = max(peak.allocated or 0, peak.reserved or 0)
    pct = 100.0 * used / peak.capacity
    low, high = ctx.t("memory_headroom.low_pct"), ctx.t("memory_headroom.high_pct")
    dev = "" if peak.device is None else f" on GPU {peak.device}"
    parts = []
    if peak.allocated is not None:
        parts.append(f"{_gb(peak.allocated)} allocated")
    if peak.reserved is not None:
        parts.append(f"{_gb(peak.reserved)} reserved")
    what = (
        ("at least " if peak.lower_bound else "")
        + ", ".join(parts)
        + f" of {_gb(peak.capacity)}{dev} ({pct:.0f}%)"
    )
    example = trace.to_trace_us(peak.ts_ns) if peak.ts_ns is not None else None
    evidence = [Evidence(f"peak memory from {peak.source}", 1, 0.0, example)]
    assumptions = [
        "Memory has no direct per-step time cost: reported as information (no saving).",
        "Other processes on the GPU and the CUDA context are not counted; the profiled window "
        "may miss the run's peak.",
    ]
    if pct >= high:
        frag = (
            peak.reserved is not None
            and peak.allocated is not None
            and peak.reserved > 1.2 * peak.allocated
        )
        summary = (
            f"Peak GPU memory is {what}, within {100 - pct:.0f}% of the device's "
            f"capacity: out-of-memory and allocator stalls are close."
        )
        rec = (
            "Free memory with mixed precision (bf16/fp16 autocast halves activations) or "
            "activation checkpointing of the largest blocks"
            + (
                "; reserved is well above allocated, so try "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True."
                if frag
                else "."
            )
        )
        snippet = SNIPPET_HIGH
    elif pct < low and not peak.lower_bound:
        free = peak.capacity - used
        summary = (
            f"Peak GPU memory is {what}: {_gb(free)} stay unused, room for a larger "
            f"batch (activations grow about linearly with it)."
        )
        rec = (
            "Raise the batch size (scaling the learning rate), use fewer gradient-"
            "accumulation steps, or fit a larger model: per-step overheads are amortized "
            "over more samples and kernels get bigger."
        )
        snippet = SNIPPET_LOW
        assumptions.append(
            "Parameters, gradients and optimizer state do not grow with the "
            "batch, so the batch can grow by more than the free share suggests."
        )
    elif peak.lower_bound:
        raise Skip(
            f"memory events record allocation sizes only (PyTorch < 1.10): peak is {what}, "
            "which cannot show how much memory is free"
        )
    else:
        return []
    return [
        Draft(
            id=ID,
            title=TITLE,
            est_savings_ms=0.0,
            latent=True,
            confidence="medium" if peak.lower_bound else "high",
            summary=summary,
            recommendation=rec,
            snippet=snippet,
            evidence=tuple(evidence),
            assumptions=tuple(assumptions),
        )
    ]
