"""Kernel efficiency: matmul, convolution, attention and large elementwise kernels far below what
the GPU can do for their shapes.

**What it detects.** For every GEMM (``mm``, ``addmm``, ``bmm``, ``baddbmm``), convolution (forward
and backward), fused attention (flash / memory-efficient / cuDNN SDPA, forward and backward) and
large elementwise or reduction op with recorded shapes and dtype, the work is computed from the
shapes (FLOPs and the bytes that must move at least once) and set against the device's roofline:
the time the work takes at peak math or peak memory bandwidth, whichever is longer. Peaks come
from a table of vendor datasheet figures (V100, A100, H100, H200, MI250, MI300X; dense math, the
dtype's math mode: FP32 on CUDA cores, TF32 where the kernel ran on Tensor Cores, FP16/BF16, FP8).
The shapes that take the most time at the lowest share of their roofline are named, with the
likely cause: too few 128x128 output tiles for the SMs (small M*N), a tall-skinny or small-K
shape that is memory-bound (arithmetic intensity under the GPU's ridge point), dimensions that
are not multiples of 8 (16-bit) or 4 (TF32), attention head dims padded up by the kernel, or a
large aligned shape whose kernel is simply slow. Needs ``record_shapes=True``; without shapes,
or on a GPU missing from the table, nothing is claimed.

**Why it costs time.** A kernel at 10% of its roofline takes ten times what the hardware allows.
Small GEMMs leave most SMs idle, memory-bound shapes wait on DRAM whatever the Tensor Cores can
do, misaligned dims force narrower loads, and padded head dims compute zeros.

**How the saving is estimated.** Per shape: the kernel time minus the time a kernel at
``kernel_efficiency.target`` (default 50%) of the roofline would take, only for shapes below that
target and with kernels of at least ``kernel_efficiency.min_kernel_us`` (shorter ones are
launch-bound: ``tiny-kernels``); the roofline time is at least ``kernel_efficiency.floor_us``.
The steps are then replayed (``advisor/replay``) with those kernels sped up accordingly, so only
the kernel time on the step's critical path counts (nothing on a host-bound step); the range
replays half that speedup. Without a replayable step, the kernel time saved is shown. Shapes that ``misaligned-dims`` already claims give up that
claim (``misaligned_dims.fraction`` of their time) here. FP32 kernels on CUDA cores are judged
against the FP32 peak (switching to TF32 is ``fp32-matmul``'s claim). The work counts are lower
bounds on what the kernels must do, so the efficiency errs high and the saving low. Findings
are ranked by this saving, not by efficiency alone.

**How to fix.** Too few tiles: batch the small matmuls (one ``bmm`` over stacked weights, a
larger batch, ``torch.compile`` fusing them), or accept them if they are off the critical path.
Memory-bound: fuse the op with its neighbours (``torch.compile``) or grow the small dimension
(larger batch / sequence per call). Misaligned: pad to multiples of 8 (see ``misaligned-dims``).
Attention head dims: use 64 or 128 (multiples of 32 for flash kernels) and check that SDPA picks
the flash or cuDNN backend. A slow kernel for a large aligned shape: ``torch.compile(mode=
"max-autotune")``, ``torch.backends.cudnn.benchmark = True`` for convolutions, a newer
cuBLAS/cuDNN.

**Known false positives.** Kernels overlapping other kernels on other streams share the GPU and
look slower than they are. Causal attention is counted as full attention (its efficiency errs
high). Convolutions whose output shape cannot be found (no next op taking [N, C_out, ...]) and
grouped or depthwise convolutions are left out.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from advisor.derive.locate import aggregate
from advisor.derive.timeline import main_device
from advisor.detect import Draft, Evidence, SavingFields
from advisor.detect.registry import Context, Skip, detector
from advisor.detect.thresholds import register
from advisor.replay.fixes import Combined, Fix, ScaleGpu
from advisor.trace.model import Trace
from advisor.trace.names import name_flags

from ._matmul import CONV_FWD, matmul_kernels, op_dtype
from ._ops import chain_match, op_names
from ._peaks import Peak, peak_for
from ._per_step import fmt_ms, n_steps
from ._roofline import ATTN_OPS, ELEMENTWISE, REDUCTIONS, Work, op_work

ID = "kernel-efficiency"
TITLE = "Kernels far below the GPU's roofline for their shapes"

register("kernel_efficiency.target", 0.5, "share of the roofline a good kernel reaches")
register("kernel_efficiency.min_kernel_us", 10.0, "ignore op calls whose kernels take less (us)")
register("kernel_efficiency.min_pct", 1.0, "report when the saving is this % of the step")
register(
    "kernel_efficiency.min_ms",
    0.1,
    "a replayed saving under this (ms per step) is shown as information",
)
register(
    "kernel_efficiency.floor_us",
    5.0,
    "the least time any kernel call is expected to take, added to the roofline (us)",
)


def _op_kernels(trace: Trace) -> pd.DataFrame:
    """The kernels of the ops this check models: columns op (cpu_ops row), row (in
    ``trace.kernels``), ns, tc (ran on Tensor Cores)."""
    k = trace.kernels
    ksel = (k["step"] >= 0).to_numpy() & ~k["is_comm"].to_numpy(dtype=bool)
    mk = matmul_kernels(trace)
    mk = mk[(mk["op"] >= 0).to_numpy() & (mk["step"] >= 0).to_numpy()]
    parts = [
        pd.DataFrame(
            {
                "op": mk["op"].to_numpy(),
                "row": mk["row"].to_numpy(),
                "ns": mk["dur_ns"].to_numpy(),
                "tc": mk["tc"].to_numpy(dtype=bool),
            }
        )
    ]
    ksel[mk["row"].to_numpy(np.int64)] = False
    if ksel.any() and len(trace.runtime):
        rows = np.flatnonzero(ksel)
        li = k["launch_idx"].to_numpy()[rows]
        rt_op = trace.runtime["op_idx"].to_numpy()
        launcher = np.where(li >= 0, rt_op[np.clip(li, 0, None)], -1)
        names = trace.cpu_ops["name"]
        attn = chain_match(
            trace, launcher, name_flags(names, ATTN_OPS.__contains__), outermost=True
        )
        mem_ops = ELEMENTWISE | REDUCTIONS
        mem = chain_match(trace, launcher, name_flags(names, mem_ops.__contains__))
        mem = np.where(np.isin(launcher, mk["op"].to_numpy()), -1, mem)
        dur = k["dur_ns"].to_numpy()[rows]
        for col, tc in ((attn, True), (np.where(attn >= 0, -1, mem), False)):
            sel = col >= 0
            parts.append(pd.DataFrame({"op": col[sel], "row": rows[sel], "ns": dur[sel], "tc": tc}))
    return pd.concat([p for p in parts if len(p)] or parts[:1], ignore_index=True)


def _conv_out(trace: Trace, i: int, x: list[int], co: int) -> list[int] | None:
    """The output shape of forward convolution call ``i``: the first tensor [N, C_out, ...] that
    one of the next ops on its thread takes as its first input."""
    ops = trace.cpu_ops
    tid, end = ops["tid"].iat[i], ops["end_ns"].iat[i]
    after = ops.index[(ops["tid"].to_numpy() == tid) & (ops["ts_ns"].to_numpy() >= end)][:6]
    for j in after:
        d = ops["input_dims"].iat[int(j)]
        if isinstance(d, list | tuple) and d and isinstance(d[0], list | tuple):
            y = list(d[0])
            if len(y) == len(x) and y[0] == x[0] and y[1] == co:
                return y
    return None


def _causes(w: Work, dtype: str | None, tc: bool, peak: Peak, units: int) -> list[str]:
    if w.kind == "memory":
        s = w.dims.get("softmax_scores")
        if s:
            return [
                f"attention scores materialized (a {s} softmax): "
                "F.scaled_dot_product_attention never writes them to memory"
            ]
        return [
            "below the memory bandwidth for a memory-bound op: strided or broadcast "
            "inputs, or too small a grid"
        ]
    out = []
    pf = peak.tflops(dtype, tc) * 1e12
    ridge = pf / (peak.mem_gbs * 1e9)
    if w.kind == "attention":
        e = w.dims["E"]
        pad = math.ceil(e / 32) * 32
        if pad > e:
            out.append(
                f"head dim {e} padded to {pad} by the kernel: {1 - e / pad:.0%} of the "
                "math is wasted"
            )
        if w.tiles < units:
            out.append(
                f"too few query blocks: {w.tiles} (batch x heads x L/128) for {units} {peak.unit}"
            )
        return out or ["a large attention shape whose kernel is slow"]
    if w.tiles < units:
        out.append(
            f"too few tiles: {w.tiles} 128x128 output tiles for {units} {peak.unit} (small M*N)"
        )
    ai = w.flops / w.nbytes if w.nbytes else 0.0
    if ai < ridge:
        out.append(
            f"memory-bound (tall-skinny / small K): {ai:.0f} FLOP/byte, under the "
            f"{ridge:.0f} the {peak.name} needs to be compute-bound"
        )
    mult = 8 if dtype in ("float16", "bfloat16") else (4 if dtype == "float32" and tc else 0)
    bad = {
        k: v for k, v in w.dims.items() if k in ("M", "N", "K") and mult and v >= 16 and v % mult
    }
    if bad:
        out.append(
            "dims not multiples of "
            + f"{mult}: "
            + ", ".join(f"{k}={v}" for k, v in bad.items())
            + " (see misaligned-dims)"
        )
    return out or ["a large, aligned shape whose kernel is slow"]


def _shape(dims: Any) -> str:
    if not isinstance(dims, list | tuple):
        return "?"
    return " ".join("x".join(map(str, d)) for d in dims if isinstance(d, list | tuple) and d)


@detector(ID, TITLE, needs=("kernels", "cpu_ops", "shapes"), gpu_only=True)
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    dev = trace.device(main_device(trace))
    peak = peak_for(dev)
    if peak is None:
        raise Skip(
            f"no peak figures for {dev.name if dev else 'this device'} (table: V100, "
            "A100, H100, H200, MI250, MI300X)"
        )
    units = (dev.num_sms if dev is not None and dev.num_sms else 0) or peak.units
    kern = _op_kernels(trace)
    if not len(kern):
        return []
    calls = kern.groupby("op", sort=False).agg(ns=("ns", "sum"), tc=("tc", "any")).reset_index()
    ops = trace.cpu_ops
    opn = op_names(trace)
    dims_col, types_col = ops["input_dims"].to_numpy(), ops["input_types"].to_numpy()
    target = ctx.t("kernel_efficiency.target")
    min_ns = ctx.t("kernel_efficiency.min_kernel_us") * 1e3
    mis_frac = ctx.t("misaligned_dims.fraction")
    floor_ns = ctx.t("kernel_efficiency.floor_us") * 1e3
    rows = []
    for op, ns, tc in calls.itertuples(index=False):
        if ns < min_ns:
            continue
        name, dims, dtype = opn[op], dims_col[op], op_dtype(types_col[op])
        out = None
        if name in CONV_FWD and isinstance(dims, list | tuple) and len(dims) >= 2:
            x, w = dims[0], dims[1]
            if isinstance(x, list | tuple) and isinstance(w, list | tuple) and x and w:
                out = _conv_out(trace, int(op), list(x), int(w[0]))
        work = op_work(name, dims, dtype, out)
        if work is None:
            continue
        pf = peak.tflops(dtype, bool(tc)) * 1e12
        ideal = max(work.flops / pf if work.flops else 0.0, work.nbytes / (peak.mem_gbs * 1e9))
        ideal_ns = max(ideal * 1e9, floor_ns)
        rows.append((int(op), name, _shape(dims), dtype, bool(tc), int(ns), ideal_ns, work))
    if not rows:
        return []
    df = pd.DataFrame(rows, columns=["op", "name", "shape", "dtype", "tc", "ns", "ideal", "work"])
    df["gid"] = df.groupby(["name", "shape", "dtype", "tc"], sort=False).ngroup()
    g = (
        df.groupby(["name", "shape", "dtype", "tc"], sort=False)
        .agg(
            n=("op", "size"),
            ns=("ns", "sum"),
            ideal=("ideal", "sum"),
            op=("op", "first"),
            work=("work", "first"),
            gid=("gid", "first"),
        )
        .reset_index()
    )
    g["eff"] = g["ideal"] / g["ns"]
    g["causes"] = [_causes(r.work, r.dtype, r.tc, peak, units) for r in g.itertuples()]
    mis = np.array(["misaligned-dims" in " ".join(c) for c in g["causes"]])
    g["save"] = np.maximum(
        0.0, g["ns"] - g["ideal"] / target - np.where(mis, mis_frac * g["ns"], 0)
    )
    g = g[(g["eff"] < target) & (g["save"] > 0)].sort_values("save", ascending=False)
    steps = n_steps(trace)
    saving = float(g["save"].sum()) / 1e6 / steps
    step_ms = ctx.step_ms_median
    if not len(g) or step_ms <= 0 or 100 * saving / step_ms < ctx.t("kernel_efficiency.min_pct"):
        return []
    evidence = []
    for r in g.head(6).itertuples():
        secs = r.ns / 1e9
        rate = (f"{r.work.flops * r.n / secs / 1e12:.1f} TFLOP/s, " if r.work.flops else "") + (
            f"{r.work.nbytes * r.n / secs / 1e9:.0f} GB/s"
        )
        tf32 = r.work.kind in ("gemm", "conv") and r.dtype == "float32" and r.tc and peak.tf32
        mode = "TF32" if tf32 else (r.dtype or "?")
        evidence.append(
            Evidence(
                f"{r.name} [{r.shape}] {mode}: {rate} = {r.eff:.0%} of its roofline; "
                f"{'; '.join(r.causes)}; saves {fmt_ms(r.save / 1e6 / steps)} per step",
                int(r.n),
                round(float(r.ns) / 1e6, 3),
                trace.to_trace_us(int(ops["ts_ns"].iat[int(r.op)])),
            )
        )
    top = g.iloc[0]
    kernel_ms = float(g["ns"].sum()) / 1e6 / steps
    fields, how = _value(ctx, g, df, kern, saving)
    rng = fields["est_savings_range_ms"]
    latent = max(fields["est_savings_ms"], rng[1] if rng else 0.0) < ctx.t(
        "kernel_efficiency.min_ms"
    )
    host_bound = (
        (
            f" Replayed with those kernels faster, the steps are only "
            f"{fmt_ms(fields['est_savings_ms'])} shorter: the host, not the GPU, limits "
            "them now (the gain comes once the host keeps up)."
        )
        if latent
        else ""
    )
    return [
        Draft(
            id=ID,
            title=TITLE,
            confidence="medium",
            latent=latent,
            summary=(
                f"{len(g)} op shape(s) run below {target:.0%} of the {peak.name} roofline "
                f"({units} {peak.unit}): their kernels take {fmt_ms(kernel_ms)} per step, and kernels at "
                f"{target:.0%} of the roofline would take {fmt_ms(saving)} less. Most: "
                f"{top['name']} [{top['shape']}] at {top['eff']:.0%}, "
                f"{top['causes'][0]}.{host_bound}"
            ),
            recommendation=_advice(g),
            snippet=_snippet(" ".join(top["causes"])),
            evidence=tuple(evidence),
            locations=aggregate(ctx.locator.for_op(int(o)) for o in g["op"].head(20)),
            assumptions=(
                f"Roofline per call: max(FLOPs / peak math, bytes / peak bandwidth) with the "
                f"{peak.name}'s datasheet peaks (dense); bytes count each tensor once.",
                f"Kernel time saved per shape = kernel time - roofline time / {target:g}, for shapes "
                "below that share, less the misaligned-dims claim on misaligned shapes; the range "
                "replays half that speedup.",
                how,
                "Kernels sharing the GPU with other streams look slower than they are.",
            ),
            **fields,
        )
    ]


def _value(
    ctx: Context, g: pd.DataFrame, df: pd.DataFrame, kern: pd.DataFrame, naive_ms: float
) -> tuple[SavingFields, str]:
    """The flagged shapes' kernels sped up to ``target`` of their roofline, replayed; without a
    replayable step, the kernel time saved (its half as the low end)."""
    fixes: list[Fix] = []
    for r in g.itertuples():
        ops = df.loc[df["gid"] == r.gid, "op"].to_numpy()
        rows = kern.loc[kern["op"].isin(ops), "row"].to_numpy(np.int64)
        speed = float(r.ns) / max(float(r.ns) - float(r.save), 1.0)
        fixes.append(ScaleGpu(kernels=rows, speedup=speed, low=1 + (speed - 1) / 2))
    rep = ctx.whatif(Combined(fixes, label="kernels at the target share of their roofline"))
    if rep.replayed:
        return rep.draft_fields(), rep.assumption
    return (
        {
            "est_savings_ms": round(naive_ms, 3),
            "est_savings_range_ms": (round(naive_ms / 2, 3), round(naive_ms, 3)),
        },
        "Not replayed (no steady step the replay can place): the kernel time saved.",
    )


def _advice(g: pd.DataFrame) -> str:
    text = " ".join(" ".join(c) for c in g["causes"].head(6))
    tips = []
    if "too few tiles" in text or "query blocks" in text:
        tips.append(
            "Too few tiles: batch the small matmuls into one (a bmm over stacked "
            "weights, a larger batch per call, torch.compile fusing them)."
        )
    if "memory-bound" in text:
        tips.append(
            "Memory-bound shapes: fuse them with their neighbours (torch.compile) or "
            "grow the small dimension (batch, sequence length per call)."
        )
    if "multiples of" in text:
        tips.append("Pad dims to multiples of 8 (misaligned-dims lists them).")
    if "attention scores materialized" in text:
        tips.append(
            "Compute attention with torch.nn.functional.scaled_dot_product_attention "
            "(flash / memory-efficient kernels) instead of matmul, softmax, matmul."
        )
    if "head dim" in text:
        tips.append("Use head dims of 64 or 128 (multiples of 32 for flash kernels).")
    if "slow" in text or "bandwidth" in text:
        tips.append(
            'For large shapes with slow kernels: torch.compile(mode="max-autotune"), '
            "torch.backends.cudnn.benchmark = True for convolutions, contiguous "
            "inputs, a newer cuBLAS/cuDNN."
        )
    return " ".join(tips)


def _snippet(causes: str) -> str:
    if "too few tiles" in causes or "query blocks" in causes:
        return (
            "# many small matmuls with the same shape: one batched call\n"
            "w = torch.stack([l.weight for l in heads])        # [H, out, in]\n"
            "y = torch.bmm(x.expand(len(heads), *x.shape), w.transpose(1, 2))\n"
            "# or let torch.compile fuse and autotune them\n"
            'model = torch.compile(model, mode="max-autotune")\n'
        )
    if "attention scores materialized" in causes:
        return (
            "# before: attn = (q @ k.transpose(-2, -1) * scale).softmax(-1); out = attn @ v\n"
            "out = torch.nn.functional.scaled_dot_product_attention(q, k, v)\n"
        )
    if "head dim" in causes:
        return (
            "# a head dim the flash kernels run without padding\n"
            "n_heads = hidden // 64          # head_dim 64 (or 128)\n"
        )
    if "multiples of" in causes:
        return (
            "# pad the dimension, slice the result\n"
            "head = nn.Linear(hidden, (vocab + 7) // 8 * 8)\nlogits = head(x)[..., :vocab]\n"
        )
    return (
        'model = torch.compile(model, mode="max-autotune")   # autotuned GEMMs, fusion\n'
        "torch.backends.cudnn.benchmark = True                # convolutions: best algorithm\n"
    )
