"""FP32 matmuls and convolutions on a GPU with Tensor Cores.

**What it detects.** Matrix multiplies (``mm``, ``addmm``, ``bmm``, ``linear``, ``matmul``...)
and convolutions whose kernels ran in plain FP32 on the CUDA cores of a GPU that has Tensor
Cores (compute capability 7.0 or newer). Judged from the ops' ``Input type`` (``float``) and
the kernel names: ``sgemm``, ``scudnn``, ``implicit_convolve_sgemm``, ``*_engine<float...>``,
``xmma_gemm_f32f32_f32f32_f32..._ffma``, FFT and Winograd FP32 kernels are CUDA-core FP32;
names with ``tensorop``, ``s1688gemm``,
``s16816gemm``, ``xmma``, ``hmma``, ``h884``, ``tf32``, ``bf16``, ``f16`` already ran on
Tensor Cores and are left alone.

**Why it costs time.** Tensor Cores multiply matrices several times faster than the CUDA
cores: on an A100, TF32 peaks at 156 TFLOPS against 19.5 TFLOPS for FP32 (8x); on a V100 FP16
Tensor Cores peak at 125 TFLOPS against 15.7 TFLOPS FP32 (8x); on an H100 SXM TF32 peaks at
about 495 against 67 TFLOPS FP32. PyTorch keeps FP32 matmuls off the Tensor Cores by default
(``torch.backends.cuda.matmul.allow_tf32 = False`` since 1.12).

**How the saving is estimated.** The steady steps are replayed (see docs/savings.md) with
these kernels made faster by a conservative realized speedup well under the peak ratio: 2x on
A100/H100/B200-class GPUs (TF32) and on V100/T4 (FP16 autocast), 1.5x on GeForce/workstation
Ampere-Ada-Blackwell parts (cc 8.6/8.9/12.x, whose TF32 rate is close to their FP32 rate, so
bf16 autocast is the fix); the range replays 1.3x and 3x. The saving is the step time the
replay loses: on a step the host limits, faster kernels save little or nothing. Elementwise
speedups from autocast are not counted.

**How to fix.** Compute capability 8.0+: ``torch.set_float32_matmul_precision("high")`` turns
on TF32 for matmuls (``torch.backends.cudnn.allow_tf32`` already defaults to True for
convolutions), or autocast to bfloat16 for a larger gain. Compute capability 7.x: TF32 does not
exist; use ``torch.autocast("cuda", dtype=torch.float16)``, with a gradient scaler when the
trace trains (backward ops or an optimizer step; never for inference).

**Known false positives.** Numerically sensitive code that must stay in full FP32 (TF32 keeps
10 mantissa bits; most training is unaffected). Tiny matmuls that cuBLAS runs on CUDA cores
even with TF32 on. Not reported on AMD GPUs where FP32 matmuls ran (kernel names do not show the
precision; without FP32 matmuls there is nothing to report on any GPU) nor on GPUs
without Tensor Cores.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from advisor.derive.locate import aggregate
from advisor.derive.timeline import main_device
from advisor.detect.draft import Draft
from advisor.detect.registry import Context, Skip, detector
from advisor.detect.thresholds import register
from advisor.findings import Confidence, Evidence, Location
from advisor.replay.fixes import ScaleGpu
from advisor.trace.kernelnames import is_convolution
from advisor.trace.model import Trace
from advisor.units import shorter_text

from ._matmul import CONV_BWD, CONV_FWD, arch_cc, matmul_kernels
from ._ops import has_backward
from ._per_step import fmt_ms, kernel_ns_in_steps, n_steps

ID = "fp32-matmul"
TITLE = "FP32 matmul/conv on Tensor Core GPU"

register(
    "fp32_matmul.min_share_pct",
    2.0,
    "report when FP32 matmul/conv kernels take at least this % of GPU kernel time",
)
register(
    "fp32_matmul.min_ms",
    0.05,
    "report only when FP32 matmul/conv kernels take at least this many ms per step",
)

# conservative realized speedups of the recommended precision over FP32 CUDA cores
_SPEEDUP = {(7, 0): 2.0, (7, 2): 2.0, (7, 5): 2.0, (8, 0): 2.0, (9, 0): 2.0, (10, 0): 2.0}
_LOW, _HIGH = 1.3, 3.0


def _speedup(cc: tuple[int, int]) -> float:
    return _SPEEDUP.get(cc, 1.5)


def _short(name: str, limit: int = 100) -> str:
    return name if len(name) <= limit else name[: limit - 3].rstrip(", ") + "..."


def _is_conv(op_name: str, kernel: str) -> bool:
    if op_name:
        return op_name in CONV_FWD or op_name in CONV_BWD
    return is_convolution(kernel)


@dataclass(frozen=True)
class _Facts:
    """The FP32 CUDA-core matmul/conv kernels of the steady steps and the GPU they ran on."""

    cc: tuple[int, int]
    inferred: bool  # compute capability read from kernel names
    mk: pd.DataFrame  # matmul/conv kernels in the steps
    fp: pd.DataFrame  # those in FP32 on CUDA cores
    share: float  # % of the steps' kernel time
    fp32_ms: float  # per step
    mm_ms: float  # of which matmuls
    conv_ms: float  # and convolutions
    tf32_seen: bool  # other FP32 matmuls ran on Tensor Cores (TF32)
    steps: int


@dataclass(frozen=True)
class _Value:
    speedup: float
    fields: dict[str, Any]
    latent: bool
    limit: str  # the sentence on what the replay found ("" without a replay)
    how: str  # the replay's assumption


@detector(ID, TITLE, needs=("kernels",), gpu_only=True)
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    f = _measure(trace, ctx)
    if f is None:
        return []
    v = _value(ctx, f)
    rec, snippet = _advice(f.cc, ctx, f.mm_ms, f.conv_ms, f.tf32_seen, has_backward(trace))
    has_types = bool(f.fp["op"].ge(0).any())
    conf: Confidence = (
        "high" if has_types and not f.inferred else ("medium" if not f.inferred else "low")
    )
    return [
        Draft(
            id=ID,
            title=TITLE,
            **v.fields,
            latent=v.latent,
            confidence=conf,
            summary=_summary(trace, f, v),
            recommendation=rec,
            snippet=snippet,
            evidence=_evidence(trace, f.fp),
            locations=_locations(ctx, f.fp),
            assumptions=_assumptions(f, v),
        )
    ]


def _measure(trace: Trace, ctx: Context) -> _Facts | None:
    """The facts, or None when there is nothing to report (Skip where nothing can be told)."""
    if trace.meta.platform == "rocm":
        mk = matmul_kernels(trace)
        if not len(mk) or not (mk["dtype"].to_numpy() == "float32").any():
            return None  # no FP32 matmuls: nothing to tell, on any GPU
        raise Skip("AMD GPU: kernel names do not tell whether matrix cores were used")
    cc, inferred = arch_cc(trace)
    if cc is None:
        raise Skip("unknown GPU architecture (no deviceProperties and no arch in kernel names)")
    if cc < (7, 0):
        return None  # no Tensor Cores
    mk = matmul_kernels(trace)
    mk = mk[mk["step"].to_numpy() >= 0] if len(mk) else mk
    if not len(mk) or not mk["fp32"].any():
        return None
    total_kernel_ns = kernel_ns_in_steps(trace)
    fp = mk[mk["fp32"].to_numpy(dtype=bool)]
    fp32_ns = int(fp["dur_ns"].sum())
    share = 100.0 * fp32_ns / total_kernel_ns if total_kernel_ns else 0.0
    steps = n_steps(trace)
    fp32_ms = fp32_ns / 1e6 / steps
    if share < ctx.t("fp32_matmul.min_share_pct") or fp32_ms < ctx.t("fp32_matmul.min_ms"):
        return None
    conv = np.array(
        [_is_conv(o, n) for o, n in zip(fp["op_name"].tolist(), fp["name"].tolist(), strict=True)],
        dtype=bool,
    )
    conv_ms = float(fp["dur_ns"].to_numpy()[conv].sum()) / 1e6 / steps
    tc_f32 = mk[mk["tc"].to_numpy(dtype=bool) & (mk["dtype"] == "float32").to_numpy()]
    return _Facts(
        cc, inferred, mk, fp, share, fp32_ms, fp32_ms - conv_ms, conv_ms, len(tc_f32) > 0, steps
    )


def _value(ctx: Context, f: _Facts) -> _Value:
    """The FP32 kernels made ``_speedup`` faster, replayed; without a replayable step, the
    kernel time saved."""
    s = _speedup(f.cc)
    naive = f.fp32_ms * (1 - 1 / s)
    rep = ctx.whatif(
        ScaleGpu(
            kernels=f.fp["row"].to_numpy(),
            speedup=s,
            low=_LOW,
            high=_HIGH,
            label="FP32 matmul/conv on Tensor Cores",
        )
    )
    # the host limits the steps: no step time to gain now (the GPU time freed is still shown)
    latent = rep.replayed and max(rep.ms, rep.high_ms) < ctx.t("fp32_matmul.min_ms")
    if not rep.replayed:
        fields: dict[str, Any] = {
            "est_savings_ms": naive,
            "est_savings_range_ms": (f.fp32_ms * (1 - 1 / _LOW), f.fp32_ms * (1 - 1 / _HIGH)),
        }
        return _Value(s, fields, latent, "", rep.assumption)
    limit = (
        f" The steps replayed with these kernels {s:g}x faster are "
        f"{shorter_text(rep.ms)} (of the {fmt_ms(naive)} of kernel time saved): "
        + (
            "the GPU limits the step."
            if rep.ms >= 0.7 * naive
            else "the host, not these kernels, limits most of the step."
        )
    )
    return _Value(s, rep.draft_fields(), latent, limit, rep.assumption)


def _summary(trace: Trace, f: _Facts, v: _Value) -> str:
    dev = trace.device(main_device(trace))
    gpu = dev.name if dev is not None and dev.name else "GPU"
    split = ", ".join(
        f"{k} {fmt_ms(x)}" for k, x in (("matmul", f.mm_ms), ("convolution", f.conv_ms)) if x > 0
    )
    cc_s = f"{f.cc[0]}.{f.cc[1]}" + (" or newer, from kernel names" if f.inferred else "")
    return (
        f"{f.share:.0f}% of GPU kernel time ({fmt_ms(f.fp32_ms)} per step; {split}) runs "
        f"in FP32 on the CUDA cores of the {gpu} (compute capability {cc_s}), whose "
        f"Tensor Cores would run it about {v.speedup:g}x faster.{v.limit}"
    )


def _evidence(trace: Trace, fp: pd.DataFrame) -> tuple[Evidence, ...]:
    """The five costliest (kernel, op) pairs."""
    evidence = []
    g = fp.groupby(["name", "op_name"], sort=False)["dur_ns"].agg(["size", "sum"]).reset_index()
    for r in g.sort_values("sum", ascending=False).head(5).itertuples(index=False):
        sel = fp[(fp["name"] == r.name) & (fp["op_name"] == r.op_name)]
        via = f" via {r.op_name}" if r.op_name else ""
        evidence.append(
            Evidence(
                what=f"{_short(r.name)}{via}: FP32 on CUDA cores",
                count=int(r.size),
                total_ms=round(float(r.sum) / 1e6, 3),
                example_ts_us=trace.to_trace_us(int(sel["ts_ns"].iat[0])),
            )
        )
    return tuple(evidence)


def _locations(ctx: Context, fp: pd.DataFrame) -> tuple[Location, ...]:
    """The ops' source lines, each weighted by its number of FP32 kernels."""
    locs: list[Location | None] = []
    counts = [(int(o), int(n)) for o, n in fp["op"].value_counts().items() if int(o) >= 0]
    for (_, n), loc in zip(counts, ctx.locator.for_ops(o for o, _ in counts), strict=True):
        locs.extend([loc] * n)
    return aggregate(locs)


def _assumptions(f: _Facts, v: _Value) -> tuple[str, ...]:
    s = v.speedup
    return (
        f"These kernels run {s:g}x faster, a conservative realized speedup (peak ratios: "
        "A100 TF32 156 vs FP32 19.5 TFLOPS; V100 FP16 Tensor Core 125 vs FP32 15.7 "
        "TFLOPS); the range uses 1.3x to 3x.",
        v.how,
        "FP32 = ops with Input type float (or sgemm/scudnn/<float> kernel names) whose "
        "kernel names show no Tensor Core use; layout, reduction and epilogue kernels are "
        "not counted.",
        "Elementwise and memory-bound kernels also speed up under autocast; not claimed.",
        *(
            ("Compute capability inferred from kernel names (no deviceProperties).",)
            if f.inferred
            else ()
        ),
    )


_INFER_FP16 = (
    'with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16):\n'
    "    out = model(x)                # no backward: no gradient scaler needed"
)


def _advice(
    cc: tuple[int, int],
    ctx: Context,
    mm_ms: float,
    conv_ms: float,
    tf32_seen: bool,
    training: bool = True,
) -> tuple[str, str]:
    if cc < (8, 0):
        return _fp16_advice(cc, training)
    prec = ctx.live.backends.float32_matmul_precision
    mm_tf32 = ctx.live.backends.matmul_allow_tf32
    cudnn_tf32 = ctx.live.backends.cudnn_allow_tf32
    consumer = cc not in _SPEEDUP
    parts = []
    if mm_ms > 0:
        if prec in ("high", "medium") or mm_tf32 is True or tf32_seen:
            parts.append(
                "TF32 is already allowed for matmuls, yet these ran on CUDA cores: "
                "autocast them to bfloat16."
            )
        else:
            parts.append(
                'Allow TF32 for matmuls with `torch.set_float32_matmul_precision("high")`'
                " (off by default), or autocast to bfloat16."
            )
    if conv_ms > 0:
        if cudnn_tf32 is False:
            parts.append(
                "`torch.backends.cudnn.allow_tf32` is off in this run: turn it on for "
                "the convolutions."
            )
        else:
            parts.append(
                "cuDNN already allows TF32 for convolutions by default, yet these "
                "ran in FP32: autocast to bfloat16 (with channels_last) to get them "
                "onto the Tensor Cores."
            )
    if consumer:
        parts.append(
            "On this GPU class TF32 is barely faster than FP32; bfloat16 autocast is "
            "the fix that pays."
        )
    snippet = (
        'torch.set_float32_matmul_precision("high")   # TF32 matmuls (compute capability 8.0+)\n'
        "torch.backends.cudnn.allow_tf32 = True        # TF32 convolutions (default)\n"
        "# larger gain: bfloat16 autocast, no gradient scaler needed\n"
        'with torch.autocast("cuda", dtype=torch.bfloat16):\n'
        + ("    loss = loss_fn(model(x), y)\nloss.backward()" if training else "    out = model(x)")
    )
    return " ".join(parts), snippet


def _fp16_advice(cc: tuple[int, int], training: bool) -> tuple[str, str]:
    """Compute capability 7.x: FP16 autocast (with a gradient scaler when training), no TF32."""
    if not training:
        return (
            f"This GPU (compute capability {cc[0]}.{cc[1]}) has FP16 Tensor Cores but no "
            'TF32: run the model under `torch.autocast("cuda", dtype=torch.float16)`; with no '
            "backward in this trace there are no gradients to scale. Do not rely on TF32 "
            "settings here; they have no effect before compute capability 8.0."
        ), _INFER_FP16
    rec = (
        f"This GPU (compute capability {cc[0]}.{cc[1]}) has FP16 Tensor Cores but no "
        "TF32: run the forward pass and loss under "
        '`torch.autocast("cuda", dtype=torch.float16)` and scale the loss with '
        "`torch.amp.GradScaler` to keep small gradients from underflowing. Do not rely "
        "on TF32 settings here; they have no effect before compute capability 8.0."
    )
    snippet = (
        'scaler = torch.amp.GradScaler("cuda")\n'
        "for x, y in loader:\n"
        "    optimizer.zero_grad(set_to_none=True)\n"
        '    with torch.autocast("cuda", dtype=torch.float16):\n'
        "        loss = loss_fn(model(x), y)\n"
        "    scaler.scale(loss).backward()\n"
        "    scaler.step(optimizer)\n"
        "    scaler.update()"
    )
    return rec, snippet
