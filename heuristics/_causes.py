"""Why a kernel class runs below the target share of the device's limit: the named causes of
``kernel-efficiency``, in the order they are tried, each with the saving removing it would
bring. Not a detector; the user-facing explanation of each cause is in
``kernel_efficiency``'s docstring.

Every cause gives a clause naming it with its figures and a saving in kernel time over all the
class's calls, never more than the *gap* (the kernel time minus the time at
``kernel_efficiency.target`` of the limit). The cause with the largest saving is the one the
class is reported under (the earlier in :data:`ORDER` on a tie: the more specific); the others
are named beside it. When no named cause has a saving, the shape is read by its size: a GEMM,
convolution or attention whose work fits in one wave of tiles on the GPU is *small* (more work
per call is the fix), a larger one is *slow* (its kernel is the cause).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from advisor.detect.thresholds import Thresholds, register
from advisor.trace.gpus import GpuSpec

from ._kernelname import KernelName, padded_head_dim, short
from ._roofline import ELT_BYTES, Work


class KernelClass(Protocol):
    """What a cause reads of a kernel class (an op shape and its kernels; the class itself is
    ``heuristics/_efficiency.KernelClass``, which holds the causes found here)."""

    @property
    def work(self) -> Work: ...
    @property
    def kernel(self) -> KernelName: ...
    @property
    def kernel_name(self) -> str: ...
    @property
    def ns(self) -> float: ...
    @property
    def n(self) -> int: ...
    @property
    def dtype(self) -> str | None: ...
    @property
    def tc(self) -> bool: ...
    @property
    def ridge(self) -> float: ...
    @property
    def bound(self) -> str: ...
    @property
    def fraction(self) -> float: ...


register(
    "kernel_efficiency.min_wave_fill",
    0.75,
    "a GEMM/attention whose work tiles fill less than this share of the SMs/CUs over its "
    "waves is wave-quantized",
)
register(
    "kernel_efficiency.min_tile_iters",
    4.0,
    "fewer main-loop steps per tile (K / tile K for GEMMs, keys / 64 for attention): "
    "launch and setup dominate",
)
register(
    "kernel_efficiency.vector_bytes",
    16.0,
    "bytes per vector load: GEMM dims should be multiples of this over the element size",
)
register(
    "kernel_efficiency.max_fast_head_dim",
    128.0,
    "attention head dims above this run with smaller blocks",
)

# the order causes are tried in: the most specific first
ORDER = ("head-dim", "align", "tiles", "short", "memory", "backend", "small", "slow")
DEFAULT_TILE = (128, 128, 64)
KV_BLOCK = 64  # keys per block of a fused attention kernel (FlashAttention, AOTriton, CK)


@dataclass(frozen=True)
class Cause:
    key: str  # one of ORDER
    text: str  # a clause naming it, with figures
    saving_ns: float  # kernel time saved by removing it (all calls); 0: named, not claimed


def causes(
    kc: KernelClass, ideal_ns: float, peak: GpuSpec, units: int, th: Thresholds
) -> tuple[Cause, ...]:
    """The causes that apply to ``kc`` (``ideal_ns``: its time at the target share), the one it
    is reported under first."""
    gap = max(0.0, kc.ns - ideal_ns)
    found = [
        c
        for c in (
            _head_dim(kc, gap, th),
            _align(kc, gap, th),
            _tiles(kc, gap, ideal_ns, peak, units, th),
            _short(kc, gap, peak, th),
            _memory(kc, gap, peak),
            _backend(kc, gap, peak),
        )
        if c is not None
    ]
    if not any(c.saving_ns > 0 for c in found):
        found.append(_unexplained(kc, gap, peak, units))
    # the largest saving the trace supports leads; on a tie, the more specific cause (ORDER)
    lead = max(range(len(found)), key=lambda i: (found[i].saving_ns, -i))
    return (found[lead], *found[:lead], *found[lead + 1 :])


def _who(kc: KernelClass) -> str:
    return f"{kc.kernel.family} ({short(kc.kernel_name, 48)})"


def _head_dim(kc: KernelClass, gap: float, th: Thresholds) -> Cause | None:
    if kc.work.kind != "attention":
        return None
    e = int(kc.work.dims["E"])
    pad = padded_head_dim(kc.kernel, e)
    if pad > e:
        waste = 1 - e / pad
        return Cause(
            "head-dim",
            f"head dim {e} padded to {pad} by {_who(kc)}: {waste:.0%} of the math is padding",
            min(gap, kc.ns * waste),
        )
    if e > th["kernel_efficiency.max_fast_head_dim"]:
        return Cause(
            "head-dim",
            f"head dim {e} is outside the fast set (64, 128): {kc.kernel.family} runs it with "
            "smaller blocks",
            0.0,
        )
    return None


def _align(kc: KernelClass, gap: float, th: Thresholds) -> Cause | None:
    if kc.work.kind not in ("gemm", "conv") or (kc.dtype == "float32" and not kc.tc):
        return None
    elt = ELT_BYTES.get(kc.dtype or "")
    if not elt:
        return None
    mult = max(1, int(th["kernel_efficiency.vector_bytes"]) // elt)
    bad = {k: v for k, v in kc.work.dims.items() if k in "MNK" and v >= 16 and v % mult}
    if not bad or mult == 1:
        return None
    dims = ", ".join(f"{k}={v}" for k, v in bad.items())
    if kc.kernel.unaligned:
        return Cause(
            "align",
            f"dims not multiples of {mult} ({dims}): {kc.kernel.family} runs its kernel for "
            f"unaligned sizes ({short(kc.kernel_name, 48)}), with narrower loads",
            gap,
        )
    return Cause("align", f"dims not multiples of {mult} ({dims}; see misaligned-dims)", 0.0)


def work_tiles(kc: KernelClass) -> tuple[int, str]:
    """(work tiles the kernel spreads over the SMs/CUs, how they were counted)."""
    d = kc.work.dims
    if kc.work.kind == "attention":
        bm = kc.kernel.block_m or 128
        return int(d["B"] * d["H"] * math.ceil(d["L"] / bm)), f"query blocks of {bm} rows"
    tm, tn, _ = kc.kernel.tile or DEFAULT_TILE
    tiles = int(d.get("B", 1) * math.ceil(d["M"] / tm) * math.ceil(d["N"] / tn))
    sk = kc.kernel.split_k
    how = f"output tiles of {tm}x{tn}" + (f", split-K {sk}" if sk > 1 else "")
    return tiles * sk, how


def _tiles(
    kc: KernelClass, gap: float, ideal_ns: float, peak: GpuSpec, units: int, th: Thresholds
) -> Cause | None:
    if kc.work.kind not in ("gemm", "conv", "attention") or units <= 0:
        return None
    n, how = work_tiles(kc)
    if n <= 0:
        return None
    waves = math.ceil(n / units)
    fill = n / (waves * units)
    if fill >= th["kernel_efficiency.min_wave_fill"]:
        return None
    wave_s = "one wave" if waves == 1 else f"{waves} waves"
    return Cause(
        "tiles",
        f"too few tiles for the GPU: {n} {how} for {units} {peak.unit}, {wave_s} "
        f"filling {fill:.0%} of them",
        min(gap, max(0.0, kc.ns - max(kc.ns * fill, ideal_ns))),
    )


def _short(kc: KernelClass, gap: float, peak: GpuSpec, th: Thresholds) -> Cause | None:
    d = kc.work.dims
    least = th["kernel_efficiency.min_tile_iters"]
    if kc.work.kind == "memory":
        # data that fits in L2 is never streamed from memory at full bandwidth: the launch
        # and the latency of the first loads dominate
        l2 = (peak.l2_mib or 0) * 2**20
        if kc.work.nbytes < l2:
            return Cause(
                "short",
                f"small op: {_size(kc.work.nbytes)} per call, less than the {peak.name}'s "
                f"{peak.l2_mib:g} MB L2, so launch and latency dominate",
                gap,
            )
    elif kc.work.kind == "attention":
        iters = math.ceil(d["S"] / KV_BLOCK)
        if iters < least:
            return Cause(
                "short",
                f"short sequence: {d['S']} keys, {iters} block(s) of {KV_BLOCK} per query "
                "tile, so launch and per-tile setup dominate",
                gap,
            )
    elif kc.work.kind in ("gemm", "conv"):
        tk = (kc.kernel.tile or DEFAULT_TILE)[2] or DEFAULT_TILE[2]
        iters = math.ceil(d["K"] / tk)
        if iters < least:
            return Cause(
                "short",
                f"small K={d['K']}: {iters} step(s) of {tk} per tile, so loading and storing "
                "each tile dominate",
                gap,
            )
    return None


def _memory(kc: KernelClass, gap: float, peak: GpuSpec) -> Cause | None:
    # a fused attention kernel moves only Q, K, V and O: when it falls short of the limit,
    # whichever it is, its backend is the cause (fusing or fewer bytes are not the fix)
    if kc.bound != "memory" or kc.work.kind == "attention":
        return None
    gbs = kc.work.nbytes * kc.n / kc.ns  # bytes per ns = GB/s
    frac = gbs / peak.mem_gbs
    rate = f"{_rate(gbs)} = {frac:.0%} of the {peak.name}'s {_rate(peak.mem_gbs)}"
    if kc.work.kind == "memory":
        scores = kc.work.dims.get("softmax_scores")
        what = (
            f"attention scores materialized (a {scores} softmax; see attention-materialized)"
            if scores
            else "memory-bound"
        )
        return Cause("memory", f"{what}: {rate}", gap)
    return Cause(
        "memory",
        f"memory-bound (tall-skinny or small): {kc.work.intensity:.0f} FLOP/byte, under the "
        f"{kc.ridge:.0f} the {peak.name} needs to be compute-bound; {rate}",
        gap,
    )


def _backend(kc: KernelClass, gap: float, peak: GpuSpec) -> Cause | None:
    if kc.work.kind != "attention":
        return None
    limit = f"{kc.dtype} peak" if kc.bound == "compute" and kc.dtype else f"{kc.bound} limit"
    return Cause(
        "backend",
        f"slow attention backend: {_who(kc)} reaches {kc.fraction:.0%} of the {peak.name}'s "
        f"{limit} on this shape",
        gap,
    )


def _unexplained(kc: KernelClass, gap: float, peak: GpuSpec, units: int) -> Cause:
    """No named cause: a shape whose tiles make at most one wave on the GPU is small for it
    (per-tile setup and the tail are not amortized over more waves); a larger one has a slow
    kernel."""
    if kc.work.kind in ("gemm", "conv", "attention") and units > 0:
        n, how = work_tiles(kc)
        if 0 < n <= units:
            return Cause(
                "small",
                f"a small shape for the GPU: {n} {how} make one wave on the {units} "
                f"{peak.unit} ({n / units:.0%} filled), too little work per call to reach the "
                f"target ({_who(kc)})",
                gap,
            )
    return Cause("slow", f"a large, aligned shape whose kernel is slow: {_who(kc)}", gap)


def _size(nbytes: float) -> str:
    return f"{nbytes / 1e6:.1f} MB" if nbytes >= 1e6 else f"{nbytes / 1e3:.0f} KB"


def _rate(gbs: float) -> str:
    return f"{gbs / 1000:.1f} TB/s" if gbs >= 1000 else f"{gbs:.0f} GB/s"
