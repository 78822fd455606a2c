"""Kernel efficiency: matmul, convolution, attention and large elementwise kernels far below what
the GPU can do for their shapes, with the cause named.

**What it detects.** For every GEMM (``mm``, ``addmm``, ``bmm``, ``baddbmm``), convolution (forward
and backward), fused attention (flash / memory-efficient / cuDNN SDPA, forward and backward) and
large elementwise or reduction op with recorded shapes and dtype, the work is computed from the
shapes (FLOPs and the bytes that must move at least once) and set against the device's limit:
the time the work takes at peak math or at peak memory bandwidth, whichever is longer (peaks
from the device table: dense math in the dtype's math mode, FP32 on CUDA cores, TF32 where the
kernel ran on Tensor Cores, FP16/BF16, FP8). Whether a shape is compute- or memory-bound is its
arithmetic intensity against the device's ridge point; its *fraction* is the share of peak
FLOP/s or of peak bytes/s its kernels reach. Each op shape (a *kernel class*) below
``kernel_efficiency.target`` of its limit is reported under the cause with the largest saving
among those that apply (on a tie, the earlier in this list), the others named beside it; each
cause is its own row:

- **Head dim padded** (attention): the kernel computes with a larger head dim than the
  model's, read from the kernel name (``Flash_fwd_kernel_traits<96,...``, ``fmha_fwd_hd128``)
  or, for Triton-generated kernels (AOTriton ``attn_fwd``), the next power of two: 192 is
  padded to 256 and a quarter of the math is zeros. Head dims above
  ``kernel_efficiency.max_fast_head_dim`` (e.g. 256) are named as outside the fast set.
  Saving: the padded share of the kernel time.
- **Unaligned dims** (GEMM/conv): a dimension that is not a multiple of
  ``kernel_efficiency.vector_bytes`` over the element size (8 for 16-bit, 16 for 8-bit, 4 for
  TF32), where the kernel name shows the library's variant for unaligned sizes (CUTLASS
  ``align1``/``align2``, rocBLAS Tensile ``AF0EM1``/``ASEM1``). Without that evidence it is
  named only (``misaligned-dims`` reports it).
- **Too few tiles** (wave quantization): the output tiles at the kernel's tile size (from its
  name: ``MT256x128x64``, ``tilesize128x128x64``; 128x128 when unknown), times its split-K
  factor, or attention query blocks, fill less than ``kernel_efficiency.min_wave_fill`` of the
  SMs/CUs over their waves. Saving: the time with every SM busy (the kernel time times the
  fill), never below the target.
- **Launch- and setup-bound** (short sequences, small K): fewer than
  ``kernel_efficiency.min_tile_iters`` main-loop steps per tile (K over the tile's K for GEMMs,
  keys over 64 for attention), so loading, setup and writing each tile dominate.
- **Memory-bound below bandwidth**: memory-bound shapes (elementwise, reductions, tall-skinny
  or small GEMMs) whose bytes/s are far below the device's bandwidth.
- **Slow attention backend**: an attention shape with enough query blocks, keys and a head dim
  the kernel runs natively, still far below its limit (peak FLOP/s, or bandwidth for short
  head dims), on a backend named from its kernel (FlashAttention-2/3, memory-efficient,
  cuDNN, AOTriton, aiter, Composable Kernel).
- **Small shape** when none of these applies and the GEMM/convolution/attention's tiles make at
  most one wave on the SMs/CUs (e.g. M=512 in 256 tiles on 304 CUs): too little work per call
  to reach the target; more work per call (batching, one bmm or grouped GEMM, fusion, graphs)
  is the fix.
- **Slow kernel** otherwise: a larger aligned shape whose kernel is slow.

FP32 matmuls on the CUDA cores of a GPU with Tensor Cores are left to ``fp32-matmul`` (a
faster dtype is that finding's fix), and the kernels of attention written as matmul, softmax,
matmul to ``attention-materialized``. Needs ``record_shapes=True``; without shapes, or on a GPU
missing from the device table, nothing is claimed.

**Why it costs time.** A kernel at 10% of its limit takes ten times what the hardware allows.
Few tiles leave most SMs idle; padded head dims compute zeros; unaligned kernels load with
narrow vectors; short loops spend their time in setup; memory-bound shapes wait on DRAM.

**How the saving is estimated.** Per class: at most the kernel time minus the time at
``kernel_efficiency.target`` (default 50%) of its limit (the limit time is at least
``kernel_efficiency.floor_us``), less where the cause's own estimate is smaller (head dim:
the padded share; tiles: the time at full fill). Only calls whose kernels take at least
``kernel_efficiency.min_kernel_us`` count (shorter ones: ``tiny-kernels``). The steps are then
replayed (``advisor/replay``) with those kernels sped up accordingly, so only kernel time on
the critical path counts; the range replays half that speedup. Without a replayable step, the
kernel time saved is shown. Unaligned shapes give up ``misaligned_dims.fraction`` of their time
to ``misaligned-dims`` unless this finding names the cause. Work counts are lower bounds, so
efficiencies err high and savings low.

**How to fix.** Per cause: pad head dims or pick a backend with native kernels for them; pad
dims to multiples of 8 (64 is better); give few-tile GEMMs more tiles (split K, batch small
matmuls into one bmm, ``torch.compile(mode="max-autotune")``, ``PYTORCH_TUNABLEOP_ENABLED=1``
on ROCm); give short calls more work (pack sequences, batch, CUDA/HIP graphs); fuse
memory-bound ops (``torch.compile``) or move fewer bytes (bf16); switch attention backends
(``torch.backends.cuda.preferred_rocm_fa_library("ck")`` or aiter on ROCm, cuDNN SDPA or
FlashAttention-3 on Hopper).

**Known false positives.** Kernels overlapping other kernels on other streams share the GPU and
look slower than they are. Causal attention is counted as full attention (its efficiency errs
high). Convolutions whose output shape cannot be found, and grouped or depthwise convolutions,
are left out.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from advisor.derive.locate import aggregate
from advisor.derive.timeline import main_device
from advisor.detect.draft import Draft
from advisor.detect.registry import Context, Skip, detector
from advisor.detect.thresholds import register
from advisor.findings import Evidence
from advisor.replay.fixes import Combined, Fix, ScaleGpu
from advisor.trace.gpus import GPUS
from advisor.trace.model import Trace
from advisor.units import shorter_text

from ._causes import Cause
from ._efficiency import Analysis, KernelClass, analysis
from ._kernelname import short
from ._per_step import fmt_ms, n_steps
from ._remedies import ADVICE, SNIPPETS, TITLES

ID = "kernel-efficiency"
TITLE = "Kernels far below the GPU's roofline for their shapes"

register("kernel_efficiency.min_kernel_us", 10.0, "ignore op calls whose kernels take less (us)")
register("kernel_efficiency.min_pct", 1.0, "report when the saving is this % of the step")
register(
    "kernel_efficiency.min_ms",
    0.1,
    "a replayed saving under this (ms per step) is shown as information",
)


def _only(ms: float) -> str:
    text = shorter_text(ms)
    return text if text.startswith("no ") else f"only {text}"


@detector(ID, TITLE, needs=("kernels", "cpu_ops", "shapes"), gpu_only=True)
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    an = analysis(trace, ctx.thresholds)
    if an is None:
        dev = trace.device(main_device(trace))
        raise Skip(
            f"no peak figures for {dev.name if dev else 'this device'} (the device table's "
            f"{len(GPUS)} GPUs: docs/report.md, Which GPU; name the GPU with --device)"
        )
    min_ns = ctx.t("kernel_efficiency.min_kernel_us") * 1e3
    by_cause: dict[str, list[tuple[KernelClass, float]]] = {}
    mis_frac = ctx.t("misaligned_dims.fraction")
    for kc in an.classes:
        if not kc.causes or kc.claimed_by or kc.ns / kc.n < min_ns:
            continue
        lead = kc.causes[0]
        save = lead.saving_ns
        if lead.key != "align" and any(c.key == "align" for c in kc.causes[1:]):
            save = max(0.0, save - mis_frac * kc.ns)  # misaligned-dims' claim
        if save > 0:
            by_cause.setdefault(lead.key, []).append((kc, save))
    steps = n_steps(trace)
    out = []
    for key, members in by_cause.items():
        members.sort(key=lambda m: -m[1])
        d = _draft(trace, ctx, an, key, members, steps)
        if d is not None:
            out.append(d)
    return _one_latent(out)


def _lower(title: str) -> str:
    """A title inside a sentence: "Too few tiles" -> "too few tiles", "GEMMs..." kept."""
    return title if title[:2].isupper() else title[:1].lower() + title[1:]


def _one_latent(drafts: list[Draft]) -> list[Draft]:
    """Rows whose fix saves nothing now (the host limits the steps) are information: one is
    kept, the largest, naming the others' causes."""
    latent = [d for d in drafts if d.latent]
    if len(latent) < 2:
        return drafts
    kept = max(latent, key=lambda d: d.est_savings_range_ms[1] if d.est_savings_range_ms else 0)
    others = ", ".join(_lower(d.title) for d in latent if d is not kept)
    kept = replace(
        kept, summary=f"{kept.summary} Other shapes fall short for other causes: {others}."
    )
    return [d for d in drafts if not d.latent] + [kept]


def _draft(
    trace: Trace,
    ctx: Context,
    an: Analysis,
    key: str,
    members: list[tuple[KernelClass, float]],
    steps: int,
) -> Draft | None:
    target = ctx.t("kernel_efficiency.target")
    saving = sum(s for _, s in members) / 1e6 / steps
    step_ms = ctx.step_ms_median
    if step_ms <= 0 or 100 * saving / step_ms < ctx.t("kernel_efficiency.min_pct"):
        return None
    kernel_ms = sum(kc.ns for kc, _ in members) / 1e6 / steps
    fields, how = _value(ctx, members, saving)
    rng = fields["est_savings_range_ms"]
    latent = max(fields["est_savings_ms"], rng[1] if rng else 0.0) < ctx.t(
        "kernel_efficiency.min_ms"
    )
    top, _ = members[0]
    host_bound = (
        (
            f" Replayed with those kernels faster, the steps are "
            f"{_only(fields['est_savings_ms'])}: the host, not the GPU, limits "
            "them now (the gain comes once the host keeps up)."
        )
        if latent
        else ""
    )
    others = "; ".join(c.text for c in top.causes[1:])
    summary = (
        f"{top.name} [{top.shape}] {_mode(top, an)} reaches {top.fraction:.0%} of the "
        f"{an.peak.name}'s {top.bound} limit ({an.units} {an.peak.unit}): "
        f"{top.causes[0].text}.{' Also: ' + others + '.' if others else ''} "
        f"{len(members)} op shape(s) with this cause take {fmt_ms(kernel_ms)} per step; "
        f"without it they would take {fmt_ms(saving)} less.{host_bound}"
    )
    return Draft(
        id=ID,
        title=TITLES[key],
        confidence="medium",
        latent=latent,
        summary=summary,
        recommendation=ADVICE[key](an, top),
        snippet=SNIPPETS[key],
        evidence=tuple(_evidence(trace, an, members, steps)),
        locations=aggregate(ctx.locator.for_op(kc.op) for kc, _ in members[:20]),
        assumptions=(
            f"Limit per call: max(FLOPs / peak math, bytes / peak bandwidth) with the "
            f"{an.peak.name}'s dense peaks from the device table; bytes count each tensor once.",
            f"Saving per shape: at most its kernel time minus its time at {target:g} of the "
            "limit, less where the cause's own estimate is smaller; the range replays half "
            "that speedup.",
            "Claimed kernels: those of the op shapes in the evidence, each in one row only.",
            how,
            "Kernels sharing the GPU with other streams look slower than they are.",
        ),
        **fields,
    )


def _mode(kc: KernelClass, an: Analysis) -> str:
    tf32 = kc.work.kind in ("gemm", "conv") and kc.dtype == "float32" and kc.tc and an.peak.tf32
    return "TF32" if tf32 else (kc.dtype or "?")


def _rate(kc: KernelClass) -> str:
    secs = kc.ns / 1e9
    flops = f"{kc.work.flops * kc.n / secs / 1e12:.1f} TFLOP/s, " if kc.work.flops else ""
    return flops + f"{kc.work.nbytes * kc.n / secs / 1e9:.0f} GB/s"


def _evidence(
    trace: Trace, an: Analysis, members: list[tuple[KernelClass, float]], steps: int
) -> list[Evidence]:
    ops = trace.cpu_ops
    out = []
    for kc, save in members[:6]:
        causes: tuple[Cause, ...] = kc.causes
        out.append(
            Evidence(
                f"{kc.name} [{kc.shape}] {_mode(kc, an)}: {_rate(kc)} = {kc.fraction:.0%} of "
                f"its {kc.bound} limit; {'; '.join(c.text for c in causes)}; saves "
                f"{fmt_ms(save / 1e6 / steps)} per step (claims {len(kc.rows)} kernels, mostly "
                f"{kc.kernel.family} {short(kc.kernel_name, 60)})",
                int(kc.n),
                round(float(kc.ns) / 1e6, 3),
                trace.to_trace_us(int(ops["ts_ns"].iat[kc.op])),
            )
        )
    return out


def _value(
    ctx: Context, members: list[tuple[KernelClass, float]], naive_ms: float
) -> tuple[dict[str, Any], str]:
    """The shapes' kernels sped up by their saving, replayed; without a replayable step, the
    kernel time saved (its half as the low end)."""
    fixes: list[Fix] = []
    for kc, save in members:
        speed = kc.ns / max(kc.ns - save, 1.0)
        fixes.append(ScaleGpu(kernels=kc.rows, speedup=speed, low=1 + (speed - 1) / 2))
    rep = ctx.whatif(Combined(fixes, label="kernels without the named cause"))
    if rep.replayed:
        return rep.draft_fields(), rep.assumption
    return (
        {
            "est_savings_ms": round(naive_ms, 3),
            "est_savings_range_ms": (round(naive_ms / 2, 3), round(naive_ms, 3)),
        },
        "Not replayed (no steady step the replay can place): the kernel time saved.",
    )
