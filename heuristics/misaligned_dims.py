"""Misaligned matmul/conv dimensions: sizes that keep Tensor Cores from running at full speed.

**What it detects.** Matrix multiplies (``mm``, ``addmm``, ``bmm``, ``baddbmm``, ``linear``) and
convolutions whose GEMM dimensions (M, N, K; channels for convolutions) are not multiples of 8
for 16-bit dtypes (float16/bfloat16), or of 4 for FP32 running as TF32 on compute capability
8.0+. Vocabulary sizes (``nn.Linear(hidden, 30001)``), odd feature counts and batch sizes are
the usual causes. Needs ``record_shapes=True``.

**Why it costs time.** Tensor Core GEMM kernels load operands in 16-byte vectors: 8 elements
of 16 bits or 4 of 32 bits. When a dimension is not a multiple of that, cuBLAS/cuDNN fall back
to kernels with narrower loads (names ending in ``align1``/``align2``), pad internally, or skip
the Tensor Cores; NVIDIA and peers report 1.3-4x for padding, e.g. a vocabulary of 33708
padded to 33712.

**How the saving is estimated.** The time of the GEMM/conv kernels launched by each misaligned
op (matched through the launch correlation, child ops included) is sped up and replayed on the
steady steps (see docs/savings.md): the saving is what the step loses, little when the host
limits it. Kernels that fell back off the Tensor Cores get 1.25x (0.2 of their time, below the
1.3-4x reported; range 10%-50%). Kernels that already run on Tensor Cores or AMD matrix cores
(names with tensorop, xmma, hmma, wgmma, s1688/s16816, mfma...) keep the fast math units:
padding only widens their loads, so they get at most ``misaligned_dims.tc_fraction`` (5%) of
their time (range 2%-10%); ``kernel-efficiency`` says how far they are from the roofline.
FP32 shapes count only where the kernels already run on Tensor Cores (TF32). On CPU-only
traces the shapes are listed as information (0 ms): they will matter on a Tensor Core GPU with
autocast.

**How to fix.** Pad the dimension to the next multiple (64 is even better on A100/H100):
vocabulary and output layers with extra unused rows (slice the logits), input features with
zero columns once in the data pipeline, hidden sizes in the model config, and pick batch
sizes that are multiples of 8.

The GEMMs of attention written as matmul, softmax, matmul are left to
``attention-materialized`` (its fix removes them), and shapes whose kernels are the library's
variant for unaligned sizes to ``kernel-efficiency`` (which values padding them from the
device's limits): each kernel is claimed in one row.

**Known false positives.** Dimensions below ``misaligned_dims.min_dim`` (default 16) are
ignored (tiny GEMMs gain little); grouped and depthwise convolutions are skipped. Padding a
dimension the kernels already handle well (cuDNN pads the first convolution's channels itself)
gains less than estimated.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from advisor.derive.locate import aggregate
from advisor.detect.draft import Draft
from advisor.detect.registry import Context, detector
from advisor.detect.thresholds import register
from advisor.findings import Evidence
from advisor.replay.fixes import Combined, Fix, ScaleGpu
from advisor.trace.model import Trace
from advisor.trace.names import name_flags

from ._attention import claimed_kernels
from ._efficiency import analysis
from ._matmul import (
    CONV_BWD,
    CONV_FWD,
    GEMM_OPS,
    arch_cc,
    gemm_dims,
    matmul_kernels,
    on_matrix_cores,
    op_dtype,
    pad_to,
)
from ._ops import op_names, parent_has
from ._per_step import fmt_ms, in_steps, kernel_ns_in_steps, n_steps

ID = "misaligned-dims"
TITLE = "Matmul/conv dimensions not multiples of 8"

register("misaligned_dims.min_dim", 16.0, "dimensions smaller than this are not checked")
register(
    "misaligned_dims.fraction",
    0.2,
    "share of a misaligned op's kernel time claimed as saving (1.25x speedup)",
)
register(
    "misaligned_dims.tc_fraction",
    0.05,
    "share of the time of kernels already on Tensor/matrix cores claimed as saving",
)
register(
    "misaligned_dims.min_share_pct",
    1.0,
    "report when misaligned ops take at least this % of GPU kernel time",
)


def _multiple(dtype: str | None, cc: tuple[int, int] | None, rocm: bool, latent: bool) -> int:
    if latent:
        return 8 if dtype in ("float16", "bfloat16", "float32") else 0
    if dtype in ("float16", "bfloat16"):
        return 8 if rocm or (cc is not None and cc >= (7, 0)) else 0
    if dtype == "float8":
        return 16
    if dtype == "float32" and not rocm and cc is not None and cc >= (8, 0):
        return 4
    return 0


def _candidates(trace: Trace) -> np.ndarray:
    """cpu_ops rows to judge: GEMM ops, and the outermost op of each convolution call."""
    names = trace.cpu_ops["name"]
    conv = name_flags(names, lambda n: n in CONV_FWD or n in CONV_BWD)
    gemm = name_flags(names, GEMM_OPS.__contains__)
    parent = trace.cpu_ops["parent_idx"].to_numpy()
    outer_conv = conv & ~parent_has(conv, parent)
    keep = (gemm | outer_conv) & in_steps(trace, trace.cpu_ops["ts_ns"].to_numpy())
    return np.flatnonzero(keep)


def _dims_str(dims: Any) -> str:
    return "x".join(str(d) for d in dims) if isinstance(dims, list | tuple) else str(dims)


class _Facts(NamedTuple):
    """The misaligned matmul/conv calls of the steps and their time."""

    latent: bool  # a CPU trace: no GPU time to claim
    min_dim: float
    calls: pd.DataFrame  # op, name, shape, dtype, mult, bad (dim -> size), ns (their time)
    groups: pd.DataFrame  # the calls by (name, shape, dtype), costliest first
    kernels: pd.DataFrame | None  # the calls' kernels no other finding claims (GPU traces)
    steps: int


@detector(ID, TITLE, needs=("cpu_ops", "shapes"))
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    f = _measure(trace, ctx)
    if f is None:
        return []
    fields: dict[str, Any] = {"est_savings_ms": 0.0, "est_savings_range_ms": None}
    how = "CPU-only trace: no time claimed; checked with the 16-bit rule (multiples of 8)."
    if f.kernels is not None:
        fields, how = _value(ctx, f.kernels, f.steps)
    return [
        Draft(
            id=ID,
            title=TITLE,
            **fields,
            confidence="medium" if not f.latent else "low",
            latent=f.latent,
            summary=_summary(f),
            recommendation=(
                "Pad the listed dimensions to the next multiple (64 is even better on A100/H100): "
                "vocabulary and output layers with extra unused rows (slice the logits), input "
                "features with zero columns once in the data pipeline, hidden sizes in the model "
                "config, and use batch sizes that are multiples of 8."
            ),
            snippet=_snippet(*_snippet_dim(f.groups)),
            evidence=_evidence(trace, f.groups),
            locations=aggregate(ctx.locator.for_ops(f.calls["op"])),
            assumptions=(
                how,
                f"Rule: multiples of 8 for float16/bfloat16, of 4 for FP32 as TF32 (compute "
                f"capability 8.0+); dimensions under {f.min_dim:g} are not checked.",
                "FP32 shapes count only where their kernels already run on Tensor Cores (TF32).",
            ),
        )
    ]


def _measure(trace: Trace, ctx: Context) -> _Facts | None:
    """The misaligned calls with their kernel time (CPU time on a CPU trace); None when there
    are none, or on a GPU trace when their kernels take too small a share."""
    latent = not trace.has_gpu
    df = _misaligned(trace, ctx, latent)
    if df is None:
        return None
    use = None
    if latent:
        df["ns"] = trace.cpu_ops["dur_ns"].to_numpy()[df["op"].to_numpy()]
    else:
        use = _unclaimed(trace, ctx, matmul_kernels(trace))
        per_op = use.groupby("op")["dur_ns"].sum()
        df["ns"] = per_op.reindex(df["op"].to_numpy()).fillna(0).to_numpy(dtype=np.int64)
        df = df[df["ns"] > 0]
        total = kernel_ns_in_steps(trace)
        share = 100.0 * float(df["ns"].sum()) / total if total else 0.0
        if not len(df) or share < ctx.t("misaligned_dims.min_share_pct"):
            return None
        use = use[use["op"].isin(df["op"]).to_numpy()]
    groups = (
        df.groupby(["name", "shape", "dtype"], sort=False)
        .agg(
            n=("op", "size"),
            ns=("ns", "sum"),
            op=("op", "first"),
            bad=("bad", "first"),
            mult=("mult", "first"),
        )
        .reset_index()
        .sort_values("ns", ascending=False, kind="stable")
    )
    min_dim = ctx.t("misaligned_dims.min_dim")
    return _Facts(latent, min_dim, df, groups, use, n_steps(trace))


def _misaligned(trace: Trace, ctx: Context, latent: bool) -> pd.DataFrame | None:
    """The candidate calls with a checked dimension that is not a multiple of their dtype's
    rule: op, name, shape, dtype, mult, bad; None when there are none."""
    cc, _ = arch_cc(trace)
    rocm = trace.meta.platform == "rocm"
    min_dim = ctx.t("misaligned_dims.min_dim")
    ops = trace.cpu_ops
    opn = op_names(trace)
    types = ops["input_types"].to_numpy()
    input_dims = ops["input_dims"].to_numpy()
    rows = []
    for i in _candidates(trace).tolist():
        dtype = op_dtype(types[i])
        mult = _multiple(dtype, cc, rocm, latent)
        if not mult:
            continue
        dims = gemm_dims(opn[i], input_dims[i])
        if not dims:
            continue
        bad = {k: v for k, v in dims.items() if v >= min_dim and v % mult}
        if bad:
            shape = " ".join(_dims_str(d) for d in input_dims[i] if d)
            rows.append((int(i), opn[i], shape, dtype, mult, bad))
    if not rows:
        return None
    return pd.DataFrame(rows, columns=["op", "name", "shape", "dtype", "mult", "bad"])


def _unclaimed(trace: Trace, ctx: Context, mk: pd.DataFrame) -> pd.DataFrame:
    """The matmul kernels padding speeds up (on Tensor Cores, or not FP32), one row per kernel:
    a materialized attention's GEMMs are attention-materialized's, and kernels
    kernel-efficiency finds on an unaligned variant are its "align" row's."""
    use = mk[mk["tc"].to_numpy(dtype=bool) | (mk["dtype"] != "float32").to_numpy()]
    taken = [claimed_kernels(trace, int(ctx.t("attention_materialized.min_seq")))]
    an = analysis(trace, ctx.thresholds)
    min_ns = ctx.t("kernel_efficiency.min_kernel_us") * 1e3
    taken += [
        kc.rows
        for kc in (an.classes if an else ())
        if kc.causes and kc.causes[0].key == "align" and kc.ns / kc.n >= min_ns
    ]
    return use[~np.isin(use["row"].to_numpy(), np.concatenate(taken))]


def _summary(f: _Facts) -> str:
    top = f.groups.iloc[0]
    k0, v0 = next(iter(top["bad"].items()))
    example = f"{k0}={v0} -> {pad_to(v0, int(top['mult']))}"
    kernel_ms = float(f.calls["ns"].sum()) / 1e6 / f.steps
    mults = sorted(set(f.groups["mult"]))
    rule = " / ".join(f"{m}" for m in mults)
    what = "the ops take {} of CPU time" if f.latent else "their GEMM/conv kernels take {}"
    summary = (
        f"{len(f.groups)} matmul/conv shape(s) have dimensions that are not multiples of "
        f"{rule} (e.g. {top['name']} {example}); "
        f"{what.format(fmt_ms(kernel_ms))} per step."
    )
    if f.latent:
        summary += (
            " Free on this CPU run; on a Tensor Core GPU with fp16/bf16 autocast they "
            "fall back to slower kernels."
        )
    return summary


def _evidence(trace: Trace, groups: pd.DataFrame) -> tuple[Evidence, ...]:
    """The five costliest shapes, each with its padded dimensions."""
    ops = trace.cpu_ops
    evidence = []
    for g in groups.head(5).itertuples(index=False):
        fixes = "; ".join(f"{k}={v} -> {pad_to(v, g.mult)}" for k, v in g.bad.items())
        evidence.append(
            Evidence(
                what=f"{g.name} [{g.shape}] {g.dtype}: {fixes}",
                count=int(g.n),
                total_ms=round(float(g.ns) / 1e6, 3),
                example_ts_us=trace.to_trace_us(int(ops["ts_ns"].iat[int(g.op)])),
            )
        )
    return tuple(evidence)


def _value(ctx: Context, kern: pd.DataFrame, steps: int) -> tuple[dict[str, Any], str]:
    """The misaligned ops' kernels sped up by what padding buys, replayed: kernels already on
    Tensor/matrix cores by at most ``tc_fraction`` of their time, the others by ``fraction``."""
    frac, tc_frac = ctx.t("misaligned_dims.fraction"), ctx.t("misaligned_dims.tc_fraction")
    on_tc = np.array([on_matrix_cores(str(n)) for n in kern["name"]], dtype=bool)
    parts = [(on_tc, tc_frac, tc_frac * 0.4, tc_frac * 2), (~on_tc, frac, frac / 2, 0.5)]
    fixes: list[Fix] = []
    naive = 0.0
    for sel, f, lo, hi in parts:
        if sel.any():
            fixes.append(
                ScaleGpu(
                    kernels=kern["row"].to_numpy()[sel],
                    speedup=1 / (1 - f),
                    low=1 / (1 - lo),
                    high=1 / (1 - hi),
                    label="padded dimensions",
                )
            )
            naive += f * float(kern["dur_ns"].to_numpy()[sel].sum()) / 1e6 / steps
    ms_of = {
        k: float(kern["dur_ns"].to_numpy()[sel].sum()) / 1e6 / steps
        for k, sel in (("tc", on_tc), ("off", ~on_tc))
    }
    words = []
    if on_tc.any():
        words.append(
            f"Kernels already on Tensor/matrix cores ({fmt_ms(ms_of['tc'])} per step) keep their "
            f"math units: padding widens their loads, {tc_frac:.0%} of their time saved (range "
            f"{tc_frac * 0.4:.0%}-{tc_frac * 2:.0%})."
        )
    if (~on_tc).any():
        words.append(
            f"Kernels off them ({fmt_ms(ms_of['off'])} per step) run {1 / (1 - frac):.2f}x "
            f"faster padded ({frac:g} of their time; peers report 1.3-4x; range 1.11x-2x)."
        )
    rep = ctx.whatif(Combined(fixes, label="padded dimensions") if len(fixes) > 1 else fixes[0])
    if rep.replayed:
        return rep.draft_fields(), " ".join([*words, rep.assumption])
    return (
        {"est_savings_ms": round(naive, 3), "est_savings_range_ms": None},
        " ".join([*words, "Not replayed: that share of the kernel time."]),
    )


def _snippet_dim(groups: pd.DataFrame) -> tuple[str, int, int]:
    """The dimension the snippet shows: the costliest shape's output columns (N: a vocabulary
    or output size) when some shape has them unaligned, else its inner dimension (K: input
    features), else its rows (M: batch x sequence length, not a layer's size)."""
    for role in ("N", "K", "M"):
        for g in groups.itertuples(index=False):
            if role in g.bad:
                return role, int(g.bad[role]), int(g.mult)
    k, v = next(iter(groups.iloc[0]["bad"].items()))
    return str(k), int(v), int(groups.iloc[0]["mult"])


def _snippet(role: str, v: int, mult: int) -> str:
    p = pad_to(v, mult)
    head = f"def pad(n, m={mult}):\n    return (n + m - 1) // m * m\n\n"
    if role == "M":  # rows: the tokens or samples of a batch, not a layer's size
        return head + (
            f"# {v} rows per matmul (batch size x sequence length): choose sizes whose product\n"
            f"# is a multiple of {mult}, e.g. {p}, or pad the batch once in the data pipeline\n"
            "x = torch.nn.functional.pad(x, (0, 0, 0, pad(x.shape[0]) - x.shape[0]))"
        )
    if role == "K":
        return head + (
            f"# an input feature size of {v}: pad once in the data pipeline ({v} -> {p})\n"
            "x = torch.nn.functional.pad(x, (0, pad(x.shape[-1]) - x.shape[-1]))"
        )
    return head + (
        f"# e.g. an output/vocabulary size of {v}: compute {p} columns, use the first {v}\n"
        f"head = nn.Linear(hidden, pad({v}))          # {v} -> {p}\n"
        f"logits = head(x)[..., :{v}]\n"
        "# input features: pad once in the data pipeline\n"
        "x = torch.nn.functional.pad(x, (0, pad(x.shape[-1]) - x.shape[-1]))"
    )
