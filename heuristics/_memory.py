"""Peak device memory against the device's capacity: from run.json (``advisor profile``) or the
trace's ``[memory]`` events. Shared by the detectors that weigh memory (``memory-headroom``,
``activation-recompute``, ``inference-without-no-grad``); not a detector.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from advisor.detect.registry import Context
from advisor.trace.model import GPU_DEVICE_TYPES, Trace

GB = 1024**3


@dataclass(frozen=True)
class Peak:
    source: str
    device: int | None
    allocated: int | None
    reserved: int | None
    capacity: int
    lower_bound: bool = False
    ts_ns: int | None = None

    @property
    def used(self) -> int:
        return max(self.allocated or 0, self.reserved or 0)

    @property
    def pct(self) -> float:
        return 100.0 * self.used / self.capacity


def peak_from_run(ctx: Context) -> Peak | None:
    """The run's peak (``torch.cuda.max_memory_*``) recorded by ``advisor profile``."""
    if (ctx.live.device.type or "cuda") not in ("cuda", "rocm", "hip"):
        return None  # a CPU run: total_memory_bytes is host RAM
    alloc = ctx.live.memory.peak_allocated_bytes
    res = ctx.live.memory.peak_reserved_bytes
    cap = ctx.live.device.total_memory_bytes
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


def peaks_from_trace(trace: Trace) -> list[Peak]:
    """Per GPU with ``[memory]`` events and a known capacity: the peak the events show."""
    mem = trace.memory
    if not len(mem):
        return []
    mem = mem[np.isin(mem["device_type"].to_numpy(), GPU_DEVICE_TYPES)]  # CUDA, or HIP
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


def gpu_peak(trace: Trace, ctx: Context) -> Peak | None:
    """The fullest GPU's peak, run.json first; None when neither source has one."""
    peaks = [p for p in [peak_from_run(ctx)] if p is not None] or peaks_from_trace(trace)
    return max(peaks, key=lambda p: p.pct) if peaks else None


def gb(v: float) -> str:
    return f"{v / GB:.1f} GB"
