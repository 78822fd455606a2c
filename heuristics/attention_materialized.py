"""Attention computed as matmul -> softmax -> matmul, writing the full score matrix to memory.

**What it detects.** Attention written out as separate ops: ``Q @ K^T`` (``matmul``/``bmm``),
a scale or mask (``mul``, ``div``, ``add``, ``masked_fill``, and a mask built inline:
``new_ones``, ``tril``, ``bitwise_not``, ``slice``...), ``softmax`` and ``P @ V``, on the
same shapes (the first matmul makes the ``[..., L, S]`` scores the softmax reads, the second
takes them with ``[..., S, Ev]``), with ``L`` and ``S`` at least
``attention_materialized.min_seq``. The same chain inside SDPA's math backend
(``aten::_scaled_dot_product_attention_math``: SDPA was called but could not use a fused
kernel) counts too. Needs ``record_shapes=True``. When the trace has no chain the check is
listed as skipped, with the reason: no softmax, no softmax over a large enough score matrix, or
softmaxes whose neighbours are not the matmuls of one attention.

**Why it costs time.** The scores and probabilities, ``B x H x L x S`` elements, are written
and read several times (the first GEMM writes them, the scale, mask and softmax each read and
write them, the second GEMM reads them): for L = S = 3137 and 96 heads that is 1.9 GB per pass
in bf16. A fused attention kernel (FlashAttention and its kin) keeps each block of scores in
on-chip memory and never writes them: it moves only Q, K, V and the output, and its time
follows the attention's FLOPs.

**How the saving is estimated.** The chain's kernels (both GEMMs, the softmax and everything
launched between them) are replaced by one fused kernel whose time is the attention's work,
``2 x B x H x L x S x (E + Ev)`` FLOPs and Q, K, V, O moved once, at
``attention_materialized.flash_fraction`` of the device's peak (the dense FLOP/s of the dtype
and the memory bandwidth, from the device table): the slower of the two. The steady steps are
replayed with each chain's kernels shortened to that (docs/savings.md); the range replays the
fused kernel at half and at one and a half times that share of the peak. These kernels are
claimed here only: ``kernel-efficiency`` leaves them out. Backward chains (training) are not
claimed.

**How to fix.** Call ``torch.nn.functional.scaled_dot_product_attention(q, k, v,
attn_mask=mask, dropout_p=p, scale=s)`` instead of the matmuls and softmax; in Hugging Face
models load with ``attn_implementation="sdpa"`` (or ``"flash_attention_2"``). Where SDPA
already runs but falls back to its math backend, make the inputs fit a fused kernel: fp16 or
bf16, a boolean or additive float mask (or ``is_causal=True``), contiguous last dims, and check
the reason with ``torch.nn.attention.sdpa_kernel([SDPBackend.FLASH_ATTENTION])``, which
raises it.

**Known false positives.** Models that need the attention probabilities
(``output_attentions=True``) must materialize them. Custom score functions between the matmuls
(relative position biases computed per call, talking-heads) need ``flex_attention`` instead.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, NamedTuple

import numpy as np

from advisor.derive.locate import aggregate
from advisor.derive.timeline import main_device
from advisor.detect.draft import Draft
from advisor.detect.registry import Context, Skip, detector
from advisor.detect.thresholds import register
from advisor.findings import Evidence
from advisor.replay.fixes import Combined, Fix, ScaleGpu
from advisor.trace.gpus import GpuSpec, spec_for
from advisor.trace.model import Trace

from ._attention import Chain, chains, score_softmaxes
from ._kernelname import short
from ._per_step import fmt_ms, n_steps
from ._roofline import ELT_BYTES

ID = "attention-materialized"
TITLE = "Attention computed as matmul, softmax, matmul: the score matrix is materialized"

register(
    "attention_materialized.flash_fraction",
    0.4,
    "share of the device's peak a fused attention kernel reaches (the estimate's kernel)",
)
register(
    "attention_materialized.min_pct",
    0.5,
    "report when the chains' kernel time saved is this % of the step",
)

SNIPPET = """import torch.nn.functional as F
# before: scores = (q @ k.transpose(-2, -1)) * scale; attn = scores.softmax(-1); out = attn @ v
out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
# Hugging Face models: pick the fused path when loading
model = AutoModel.from_pretrained(name, attn_implementation="sdpa")
"""


class _Group(NamedTuple):
    """Chains of one shape: their kernels, those kernels' time and one fused kernel's time for
    each of them."""

    key: tuple[Any, ...]  # (bh, L, S, E, Ev, dtype, in_math_sdpa)
    chains: list[Chain]
    kernels: np.ndarray
    chain_ns: float
    flash_ns: float


class _Facts(NamedTuple):
    groups: list[_Group]  # largest saving first, only those a fused kernel beats
    peak: GpuSpec
    frac: float
    steps: int
    kernel_ms: float  # per step, the groups' kernels
    flash_ms: float  # per step, fused kernels instead
    dur: np.ndarray  # kernel durations


@detector(ID, TITLE, needs=("kernels", "cpu_ops", "shapes"), gpu_only=True)
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    f = _measure(trace, ctx)
    if f is None:
        return []
    fields, how = _value(ctx, f)
    return [
        Draft(
            id=ID,
            title=TITLE,
            confidence="medium",
            summary=_summary(f),
            recommendation=_recommendation(f),
            snippet=SNIPPET,
            evidence=tuple(_evidence(trace, f.groups, f.steps, f.dur)),
            locations=aggregate(ctx.locator.for_op(c.qk) for g in f.groups for c in g.chains[:20]),
            assumptions=(
                f"Fused kernel time: the attention's FLOPs (2 x B x H x L x S x (E + Ev)) and "
                f"bytes (Q, K, V, O once) at {f.frac:g} of the {f.peak.name}'s dense peak and "
                "memory bandwidth, the slower of the two; the range uses half and 1.5x that "
                "share.",
                "Claimed kernels: every kernel launched from the first matmul of each chain to "
                "the end of the second (listed in the evidence); kernel-efficiency does not "
                "claim them again.",
                how,
            ),
            **fields,
        )
    ]


def _measure(trace: Trace, ctx: Context) -> _Facts | None:
    """The chains in steps grouped by shape; None when a fused kernel would save less than
    ``attention_materialized.min_pct`` of the step."""
    min_seq = int(ctx.t("attention_materialized.min_seq"))
    found = [c for c in chains(trace, min_seq)]
    if not found:
        raise Skip(_no_chain(trace, min_seq))
    found = [c for c in found if (trace.kernels["step"].to_numpy()[c.kernels] >= 0).any()]
    if not found:
        return None
    dev = trace.device(main_device(trace))
    peak = spec_for(dev)
    if peak is None:
        raise Skip(f"no peak figures for {dev.name if dev else 'this device'}")
    frac = ctx.t("attention_materialized.flash_fraction")
    dur = trace.kernels["dur_ns"].to_numpy()
    groups = _groups(found, peak, frac, dur)
    steps = n_steps(trace)
    kernel_ms = sum(g.chain_ns for g in groups) / 1e6 / steps
    flash_ms = sum(g.flash_ns for g in groups) / 1e6 / steps
    naive = kernel_ms - flash_ms
    step_ms = ctx.step_ms_median
    if (
        not groups
        or step_ms <= 0
        or 100 * naive / step_ms < ctx.t("attention_materialized.min_pct")
    ):
        return None
    return _Facts(groups, peak, frac, steps, kernel_ms, flash_ms, dur)


def _groups(found: list[Chain], peak: GpuSpec, frac: float, dur: np.ndarray) -> list[_Group]:
    """The chains by shape, each with one fused kernel's time per call: the attention's FLOPs
    and bytes at ``frac`` of the peak, the slower; those it beats, largest saving first."""
    by_key: dict[tuple[Any, ...], list[Chain]] = defaultdict(list)
    for c in found:
        by_key[(c.bh, c.L, c.S, c.E, c.Ev, c.dtype, c.in_math_sdpa)].append(c)
    rows = []
    for key, cs in by_key.items():
        c0 = cs[0]
        elt = ELT_BYTES.get(c0.dtype or "", 2)
        flops_s = peak.tflops(c0.dtype, True) * 1e12
        one_ns = 1e9 * max(
            c0.flops() / (flops_s * frac), c0.nbytes(elt) / (peak.mem_gbs * 1e9 * frac)
        )
        krows = np.concatenate([c.kernels for c in cs])
        chain_ns = float(dur[krows].sum())
        rows.append(_Group(key, cs, krows, chain_ns, one_ns * len(cs)))
    rows.sort(key=lambda r: -(r.chain_ns - r.flash_ns))
    return [r for r in rows if r.chain_ns > r.flash_ns]


def _value(ctx: Context, f: _Facts) -> tuple[dict[str, Any], str]:
    """Each group's kernels shortened to the fused kernel's time, replayed; without a
    replayable step, the kernel time saved (its half as the low end)."""
    fixes: list[Fix] = []
    for g in f.groups:
        s = g.chain_ns / g.flash_ns
        fixes.append(
            ScaleGpu(
                kernels=g.kernels,
                speedup=s,
                low=max(1.0, s / 2),
                high=s * 1.5,
                label="one fused attention kernel",
            )
        )
    rep = ctx.whatif(Combined(fixes, label="attention as one fused kernel"))
    if rep.replayed:
        return rep.draft_fields(), rep.assumption
    naive = f.kernel_ms - f.flash_ms
    return (
        {
            "est_savings_ms": round(naive, 3),
            "est_savings_range_ms": (round(naive / 2, 3), round(naive, 3)),
        },
        "Not replayed (no steady step the replay can place): the kernel time saved.",
    )


def _summary(f: _Facts) -> str:
    t = f.groups[0].chains[0]
    return (
        f"{sum(len(g.chains) for g in f.groups) / f.steps:.0f} attention call(s) per step write "
        f"their score matrix to memory (largest: {t.bh} heads x {t.L} x {t.S} scores, head dim "
        f"{t.E}{', inside SDPA math backend' if t.in_math_sdpa else ''}): their matmul, "
        f"softmax and elementwise kernels take {fmt_ms(f.kernel_ms)} per step, where one fused "
        f"attention kernel at {f.frac:.0%} of the {f.peak.name}'s peak would take "
        f"{fmt_ms(f.flash_ms)}."
    )


def _recommendation(f: _Facts) -> str:
    rec = (
        "Replace the matmul -> softmax -> matmul with torch.nn.functional."
        'scaled_dot_product_attention (Hugging Face: attn_implementation="sdpa"), which runs '
        "a fused flash or memory-efficient kernel that never writes the scores."
    )
    if any(g.key[-1] for g in f.groups):
        rec += (
            " Some chains run inside SDPA's math backend: SDPA could not use a fused kernel "
            "for these inputs (dtype, mask type or layout); "
            "torch.nn.attention.sdpa_kernel([SDPBackend.FLASH_ATTENTION]) raises the reason."
        )
    return rec


def _no_chain(trace: Trace, min_seq: int) -> str:
    """Why no materialized attention was found (the skip reason)."""
    n, big = score_softmaxes(trace, min_seq)
    if not n:
        return "no softmax op in this trace (no attention, or it runs in fused kernels)"
    if not big:
        return (
            f"no softmax over a score matrix of at least {min_seq} x {min_seq} "
            f"({n} softmax op(s), over smaller or unrecorded shapes)"
        )
    return (
        f"{big} softmax op(s) over score matrices, but no matmul making those scores before them "
        "and another taking them after, among the nearest scale, mask, cast and layout ops"
    )


def _evidence(trace: Trace, rows: list[_Group], steps: int, dur: np.ndarray) -> list[Evidence]:
    names = trace.kernels["name"].astype(str).to_numpy()
    kts = trace.kernels["ts_ns"].to_numpy()
    out = []
    for _key, cs, _krows, chain_ns, flash_ns in rows[:4]:
        c = cs[0]
        out.append(
            Evidence(
                f"attention {c.bh}x{c.L}x{c.S} (head dim {c.E}, {c.dtype or '?'}): "
                f"{fmt_ms(chain_ns / 1e6 / len(cs))} per call in {len(c.kernels)} kernels; "
                f"a fused kernel: {fmt_ms(flash_ns / 1e6 / len(cs))}",
                len(cs),
                round(chain_ns / 1e6, 3),
                trace.to_trace_us(int(kts[c.kernels[0]])),
            )
        )
    # exactly which kernels are claimed, by name
    allk = np.concatenate([r[2] for r in rows])
    per: dict[str, list[int]] = defaultdict(list)
    for r in allk.tolist():
        per[names[r]].append(r)
    for name, rs in sorted(per.items(), key=lambda kv: -float(dur[kv[1]].sum()))[:6]:
        out.append(
            Evidence(
                f"claimed kernel {short(name)}",
                len(rs),
                round(float(dur[rs].sum()) / 1e6, 3),
                trace.to_trace_us(int(kts[rs[0]])),
            )
        )
    return out
