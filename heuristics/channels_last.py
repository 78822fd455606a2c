"""Conv nets in NCHW on Tensor Core GPUs: layout conversions around every convolution.

**What it detects.** cuDNN's layout-conversion kernels (`nchwToNhwcKernel`, `nhwcToNchwKernel`,
`convertTensor`: `advisor.trace.kernelnames.LAYOUT`) launched by convolution ops (forward and
backward) on an NVIDIA GPU with Tensor Cores (compute capability 7.0+). Their presence means
cuDNN picked channels-last (NHWC) kernels for convolutions whose tensors are NCHW, so it
transposes the inputs, weights and gradients on every call. Without such kernels, run.json's
`modules.channels_last == False` on a 16-bit (AMP) conv net is reported with a low-confidence
estimate.

**Why it costs time.** Each conversion reads and writes the whole tensor once more. Tensor Core
convolution kernels are written for NHWC; keeping the model and its inputs channels-last lets
cuDNN run them directly (NVIDIA and PyTorch report 8-35% faster conv nets with AMP).

**How the saving is estimated.** The steady steps are replayed (see docs/savings.md) without the
conversion kernels under conv ops (they disappear when model and input are channels-last); the
saving is what the step loses (little when the host limits it); the further speed-up of the
convolutions themselves is not counted. Reported only when the conversions take 0.5% of the
median step (`channels_last.min_pct`). From run.json alone (no conversions seen, 16-bit
convolutions): the convolutions' kernels 8% faster, the low end of the published range, with
low confidence.

**How to fix.** `model = model.to(memory_format=torch.channels_last)` once, and
`x = x.to(device, memory_format=torch.channels_last)` for each input batch (4-D tensors;
`torch.channels_last_3d` for 5-D).

**Known false positives.** FP32 models on GPUs without TF32 (V100) gain little from
channels-last; use AMP first. Custom ops that require contiguous NCHW add their own conversions.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from advisor.derive.locate import aggregate
from advisor.detect.draft import Draft
from advisor.detect.registry import Context, detector
from advisor.detect.thresholds import register
from advisor.findings import Evidence
from advisor.replay.fixes import ScaleGpu
from advisor.trace.kernelnames import is_convolution
from advisor.trace.model import Trace
from advisor.trace.names import name_flags, name_in

from ._matmul import CONV_FWD, CONV_RE, LAYOUT_KERNEL_RE, tensor_cores
from ._ops import ancestor_match, gpu_rows_from, has_backward, launching_op
from ._per_step import ms, n_steps, per_step_words, rows_in_steps

ID = "channels-last"
TITLE = "Conv net in NCHW: layout conversions around convolutions"
register("channels_last.min_pct", 0.5, "report layout conversions from this % of the median step")
register(
    "channels_last.run_only_gain_pct",
    8.0,
    "% of conv GPU time assumed saved when only run.json shows NCHW (AMP conv nets)",
)
HALF_TYPES = ("c10::Half", "c10::BFloat16", "Half", "BFloat16")
SNIPPET_INFER = (
    "model = model.to(device, memory_format=torch.channels_last).eval()\n"
    "x = x.to(device, memory_format=torch.channels_last, non_blocking=True)\n"
    "with torch.inference_mode(), torch.autocast('cuda', dtype=torch.bfloat16):\n"
    "    out = model(x)"
)
SNIPPET = (
    "model = model.to(device, memory_format=torch.channels_last)\n"
    "for x, y in loader:\n"
    "    x = x.to(device, memory_format=torch.channels_last, non_blocking=True)\n"
    "    with torch.autocast('cuda', dtype=torch.bfloat16):\n"
    "        loss = loss_fn(model(x), y)"
)


def _short(name: str) -> str:
    n = name.removeprefix("void ")
    return n.split("<")[0].split("(")[0]


def _half_convs(trace: Trace, ctx: Context, conv_rows: np.ndarray) -> bool:
    types = trace.cpu_ops["input_types"].to_numpy()[conv_rows] if len(conv_rows) else []
    for t in types:
        if isinstance(t, list) and any(str(x) in HALF_TYPES for x in t[:2]):
            return True
    dts = ctx.live.forward.autocast_dtypes
    return any(str(d) in ("float16", "bfloat16") for d in dts)


class _Convs(NamedTuple):
    """The steps' convolution kernels and the layout conversions around them."""

    lk: pd.DataFrame  # the layout-conversion kernels (rows of trace.kernels)
    conv_k: pd.DataFrame  # the kernels convolution ops launch, conversions apart
    attributed: bool  # launch links tie kernels to the convolution ops
    steps: int
    conv_ms: float  # the convolutions' GPU time per step


@detector(ID, TITLE, gpu_only=True)
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    c = _measure(trace)
    if c is None:
        return []
    step_ms = ctx.step_ms_median
    if len(c.lk):
        layout_ms = float(c.lk["dur_ns"].sum()) / 1e6 / c.steps
        if step_ms > 0 and 100.0 * layout_ms / step_ms >= ctx.t("channels_last.min_pct"):
            return [_measured(trace, ctx, c.lk, layout_ms, c.conv_ms, c.attributed)]
    if ctx.live.modules.channels_last is not False or c.conv_ms <= 0:
        return []
    conv_ops = np.flatnonzero(name_in(trace.cpu_ops["name"], CONV_FWD))
    if not _half_convs(trace, ctx, conv_ops):
        return []
    return [_run_only(trace, ctx, c, conv_ops)]


def _measure(trace: Trace) -> _Convs | None:
    """None on a GPU without Tensor Cores or without kernels in the steps."""
    if tensor_cores(trace) is False:
        return None
    k = rows_in_steps(trace.kernels, trace)
    if not len(k):
        return None
    conv_mask = ancestor_match(trace, lambda n: bool(CONV_RE.search(n)))
    under_conv = gpu_rows_from(trace, k, conv_mask)
    layout = k["name"].str.contains(LAYOUT_KERNEL_RE).to_numpy()
    attributed = bool((k["launch_idx"].to_numpy() >= 0).any() and len(conv_mask))
    if attributed:
        lk = k[layout & under_conv]
    else:  # no launch links: take the conversions when the trace has convolution kernels
        conv_named = name_flags(k["name"], is_convolution)
        lk = k[layout] if conv_named.any() else k.iloc[0:0]
    conv_k = k[under_conv & ~layout]
    steps = n_steps(trace)
    conv_ms = float(conv_k["dur_ns"].sum()) / 1e6 / steps
    return _Convs(lk, conv_k, attributed, steps, conv_ms)


def _run_only(trace: Trace, ctx: Context, c: _Convs, conv_ops: np.ndarray) -> Draft:
    """run.json says NCHW on 16-bit convolutions, and no conversions are seen: the
    convolutions' kernels ``channels_last.run_only_gain_pct`` faster, low confidence."""
    gain = ctx.t("channels_last.run_only_gain_pct") / 100.0
    fields: dict = {"est_savings_ms": gain * c.conv_ms}
    how = (
        f"{gain * 100:g}% of the convolutions' GPU time: the low end of the 8-35% "
        "published for channels-last with AMP on conv nets; not measured here"
    )
    rep = ctx.whatif(
        ScaleGpu(kernels=c.conv_k.index.to_numpy(), speedup=1 / (1 - gain), label="channels-last")
    )
    if rep.replayed:
        fields = rep.draft_fields()
        how = (
            f"The convolutions' kernels {gain * 100:g}% faster (the low end of the 8-35% "
            "published for channels-last with AMP on conv nets; not measured here). "
            + rep.assumption
        )
    return Draft(
        id=ID,
        title=TITLE,
        **fields,
        confidence="low",
        summary=(
            f"The model runs its 16-bit convolutions in NCHW (run.json: channels_last is "
            f"off); they take {c.conv_ms:.2f} ms of GPU time {per_step_words(trace)}."
        ),
        recommendation=_REC,
        snippet=SNIPPET if has_backward(trace) else SNIPPET_INFER,
        evidence=(
            Evidence(
                "GPU kernels launched by convolution ops",
                len(c.conv_k),
                ms(c.conv_k["dur_ns"].sum()),
                trace.to_trace_us(int(c.conv_k["ts_ns"].min())),
            ),
        ),
        locations=aggregate(ctx.locator.for_ops(conv_ops[:2000])),
        assumptions=(
            how,
            f"divided over {c.steps} step(s)",
        ),
    )


_REC = (
    "Convert the model and every input batch to channels-last memory format once, so cuDNN "
    "runs its Tensor Core (NHWC) kernels directly instead of transposing around each "
    "convolution; combine with AMP (bf16/fp16) for the largest gain."
)


def _measured(
    trace: Trace,
    ctx: Context,
    lk: pd.DataFrame,
    layout_ms: float,
    conv_ms: float,
    attributed: bool,
) -> Draft:
    """The conversions seen: the steps replayed without them."""
    steps = n_steps(trace)
    ops = [int(o) for o in launching_op(trace, lk) if o >= 0]
    share = (
        f", {100 * layout_ms / (layout_ms + conv_ms):.0f}% of the convolutions' GPU time"
        if (conv_ms > 0)
        else ""
    )
    cl = ctx.live.modules.channels_last
    summary = (
        f"{len(lk) / steps:.0f} NCHW<->NHWC layout conversion kernels {per_step_words(trace)} "
        f"around the convolutions take {layout_ms:.2f} ms on the GPU{share}: cuDNN runs these "
        "convolutions channels-last and transposes the NCHW tensors on every call."
    )
    if cl is True:
        summary += " run.json says the model is channels-last: convert the inputs too."
    fields, how = _layout_value(ctx, lk, layout_ms, attributed)
    return Draft(
        id=ID,
        title=TITLE,
        **fields,
        confidence="medium" if attributed else "low",
        summary=summary,
        recommendation=_REC,
        snippet=SNIPPET if has_backward(trace) else SNIPPET_INFER,
        evidence=_layout_evidence(trace, lk),
        locations=aggregate(ctx.locator.for_ops(ops)),
        assumptions=(
            how,
            "the further speed-up of the convolutions in NHWC (8-35% with AMP, published) is "
            "not counted",
            f"divided over {steps} step(s)",
        ),
    )


def _layout_value(
    ctx: Context, lk: pd.DataFrame, layout_ms: float, attributed: bool
) -> tuple[dict, str]:
    """The steps replayed without the conversion kernels (their GPU time where the replay
    cannot place the steps), and how."""
    fields: dict = {"est_savings_ms": layout_ms}
    how = "saving = GPU time of the layout-conversion kernels" + (
        " launched by convolution ops" if attributed else " (no launch links: all of them)"
    )
    rep = ctx.whatif(
        ScaleGpu(kernels=lk.index.to_numpy(), speedup=float("inf"), label="no layout conversions")
    )
    if rep.replayed:
        fields = rep.draft_fields()
        how = (
            "Replayed without the layout-conversion kernels"
            + (" launched by convolution ops" if attributed else " (no launch links: all of them)")
            + ". "
            + rep.assumption
        )
    return fields, how


def _layout_evidence(trace: Trace, lk: pd.DataFrame) -> tuple[Evidence, ...]:
    """One row per conversion kernel (most GPU time first, five at most)."""
    rows = []
    for name, g in lk.groupby(lk["name"].astype(str).map(_short), sort=False):
        rows.append(
            (
                int(g["dur_ns"].sum()),
                Evidence(
                    f"{name} (layout conversion)",
                    len(g),
                    ms(g["dur_ns"].sum()),
                    trace.to_trace_us(int(g["ts_ns"].min())),
                ),
            )
        )
    rows.sort(key=lambda r: -r[0])
    return tuple(e for _, e in rows[:5])
