"""Convolution with a bias directly followed by BatchNorm.

**What it detects.** A convolution called with a bias (`aten::conv2d`/`aten::convolution`
whose third Input Dims entry is not empty, or, without shapes, whose cuDNN path runs a separate
`aten::add_` for the bias) whose very next operator at the same level is `aten::batch_norm`
over the same number of channels (past the 0-d `aten::add_`, or `aten::add` on PyTorch <= 1.10,
with which train-mode BatchNorm bumps `num_batches_tracked`). With run.json, the conv->BatchNorm module pairs seen during
the forward pass (`modules.conv_bias_before_bn`) name the layers and where they were defined.

**Why it costs time.** BatchNorm subtracts the per-channel mean, so a per-channel bias added
just before it cancels out exactly: it changes nothing in the output, yet every step adds it
(on cuDNN a separate elementwise kernel over the whole activation), computes its gradient in
backward (a reduction over the activation) and updates it in the optimizer.

**How the saving is estimated.** The fix is replayed (see docs/savings.md): the steady steps'
dependency graph is replayed without the bias-add kernels launched under these convolutions
and without the host time of those `aten::add_` calls (their dispatch and launch); the saving
is the measured step minus the replayed step, so it is small when something else limits the
step. The bias gradient and optimizer update are not removed, so the estimate is low. Where the
add is fused into the convolution (CPU oneDNN) or not visible, the finding is informational (no
saving claimed); when the trace has no step the replay can place, the adds' GPU time plus the
GPU idle time while the host ran them is used instead.

**How to fix.** Build the layer with `bias=False`: `nn.Conv2d(cin, cout, k, bias=False)`
followed by `nn.BatchNorm2d(cout)`. Pretrained weights: fold the bias into BatchNorm's
running mean (`bn.running_mean -= conv.bias`) before dropping it. On a trace with no backward
(inference), fold the bias or fuse each convolution with its BatchNorm
(`torch.ao.quantization.fuse_modules`); no gradient or optimizer update is spoken of.

**Known false positives.** A BatchNorm in eval mode (frozen statistics) does not cancel the
bias; folding is then still possible but the saving only applies at inference.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from advisor.derive.locate import aggregate, merge_locations, run_locations
from advisor.derive.timeline import main_busy
from advisor.detect.draft import Draft
from advisor.detect.registry import Context, Skip, detector
from advisor.findings import Evidence, Location
from advisor.replay.fixes import Combined, ScaleGpu, ShrinkHost
from advisor.trace.model import Trace
from advisor.trace.names import name_in

from ._matmul import CONV_FWD_WITH_BIAS
from ._ops import arg_dims, gpu_rows_from, has_backward, inherit, op_names, parent_has, runtime_op
from ._per_step import ms, n_steps, per_step_words

ID = "conv-bias-before-bn"
TITLE = "Convolution bias right before BatchNorm"
BN_OPS = frozenset(
    f"aten::{n}"
    for n in (
        "batch_norm",
        "_batch_norm_impl_index",
        "native_batch_norm",
        "cudnn_batch_norm",
        "miopen_batch_norm",
        "_native_batch_norm_legit",
    )
)
SNIPPET = (
    "# before\n"
    "nn.Conv2d(cin, cout, kernel_size=3, padding=1),\n"
    "nn.BatchNorm2d(cout),\n"
    "# after: BatchNorm's mean subtraction cancels the bias anyway\n"
    "nn.Conv2d(cin, cout, kernel_size=3, padding=1, bias=False),\n"
    "nn.BatchNorm2d(cout),"
)


def _pairs(trace: Trace) -> pd.DataFrame:
    """Conv roots with a bias whose next sibling is BatchNorm: conv row, bn row, bias adds."""
    cols = ["conv", "bn", "adds"]
    ops = trace.cpu_ops
    if not len(ops):
        return pd.DataFrame(columns=cols)
    names = op_names(trace)
    parent = ops["parent_idx"].to_numpy()
    is_conv = name_in(ops["name"], CONV_FWD_WITH_BIAS)
    roots = np.flatnonzero(is_conv & ~parent_has(is_conv, parent))
    if not len(roots):
        return pd.DataFrame(columns=cols)
    # bias adds: aten::add_ ops whose outermost conv ancestor is a root
    adds: dict[int, list[int]] = {}
    for a in np.flatnonzero(names == "aten::add_"):
        p, top = int(parent[a]), -1
        for _ in range(16):
            if p < 0:
                break
            if is_conv[p]:
                top = p
            p = int(parent[p])
        if top >= 0:
            adds.setdefault(top, []).append(int(a))
    # next sibling of each op: same thread, same parent, next start
    dims = ops["input_dims"].to_numpy()
    order = np.lexsort((ops["ts_ns"].to_numpy(), parent, ops["tid"].to_numpy()))
    nxt = np.full(len(ops), -1, dtype=np.int64)
    same = (parent[order[1:]] == parent[order[:-1]]) & (
        ops["tid"].to_numpy()[order[1:]] == ops["tid"].to_numpy()[order[:-1]]
    )
    nxt[order[:-1][same]] = order[1:][same]
    rows = []
    for r in roots:
        b = int(nxt[r])
        # BatchNorm in training mode first bumps num_batches_tracked: a 0-d aten::add_, or on
        # PyTorch <= 1.10 an out-of-place aten::add (``self.num_batches_tracked + 1``)
        for _ in range(2):
            if b >= 0 and names[b] in ("aten::add_", "aten::add") and not arg_dims(dims[b], 0):
                b = int(nxt[b])
        if b < 0 or names[b] not in BN_OPS:
            continue
        bias = arg_dims(dims[r], 2)
        has_shapes = isinstance(dims[r], list)
        if has_shapes:
            if not bias:
                continue
            w, x = arg_dims(dims[r], 1), arg_dims(dims[b], 0)
            transposed = "transpose" in names[r]
            if w and x and len(x) > 1 and not transposed and w[0] != x[1]:
                continue
        elif r not in adds:
            continue
        rows.append((int(r), b, adds.get(int(r), [])))
    return pd.DataFrame(rows, columns=cols)


def _run_sites(ctx: Context) -> list[Location]:
    rows = ctx.live.modules.conv_bias_before_bn
    return run_locations(rows, lambda r: f"{r.conv or 'conv'} -> {r.bn or 'bn'}")


class _Facts(NamedTuple):
    """The conv -> BatchNorm pairs with a bias, and what their bias adds cost."""

    pairs: pd.DataFrame  # conv row, bn row, bias adds (from the trace)
    sites: list[Location]  # run.json's module pairs
    n_run: int
    add_rows: np.ndarray  # the bias adds (cpu_ops rows)
    kmask: np.ndarray  # their kernels (a mask over kernels; empty without any)
    gpu_ns: int  # the kernels' time
    n_k: int
    idle_ns: int  # GPU idle while the host ran the adds
    per_add: dict[int, int]  # GPU ns per bias add
    steps: int


class _Value(NamedTuple):
    fields: dict[str, Any]
    saving_ms: float  # measured: the adds' kernels and the GPU idle under them
    replay_saves: bool  # the replay (if any) finds the steps shorter
    how: str


@detector(ID, TITLE)
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    f = _measure(trace, ctx)
    if f is None:
        return []
    v = _value(trace, ctx, f)
    latent = v.saving_ms <= 0 or not v.replay_saves
    training = has_backward(trace)
    return [
        Draft(
            id=ID,
            title=TITLE,
            **(v.fields if not latent else {"est_savings_ms": 0.0}),
            latent=latent,
            confidence="high" if len(f.pairs) and trace.has_shapes else "medium",
            summary=_summary(trace, f, v),
            recommendation=_recommendation(training),
            snippet=SNIPPET,
            evidence=_evidence(trace, f.pairs, f.per_add if trace.has_gpu else None),
            locations=merge_locations(f.sites, aggregate(ctx.locator.for_ops(f.pairs["conv"]))),
            assumptions=(
                v.how
                if v.saving_ms > 0
                else "no separate bias-add kernel measured (fused into the convolution or not in "
                "the trace): informational, no saving claimed",
                "bias gradient (backward reduction) and optimizer update not counted"
                if training
                else "no backward in this trace: only the forward bias add is counted",
                f"divided over {f.steps} step(s)",
            ),
        )
    ]


def _measure(trace: Trace, ctx: Context) -> _Facts | None:
    """The pairs (trace and run.json) and their bias adds' GPU cost; None without any pair."""
    if not len(trace.cpu_ops) and ctx.run is None:
        raise Skip("no CPU operator events and no run.json")
    pairs = _pairs(trace)
    sites = _run_sites(ctx)
    n_run = len(ctx.live.modules.conv_bias_before_bn)
    if not len(pairs) and not n_run:
        return None
    add_rows = np.array(sorted({a for lst in pairs["adds"] for a in lst}), dtype=np.int64)
    kmask, gpu_ns, n_k, idle_ns, per_add = _add_cost(trace, add_rows)
    return _Facts(
        pairs, sites, n_run, add_rows, kmask, gpu_ns, n_k, idle_ns, per_add, n_steps(trace)
    )


def _add_cost(
    trace: Trace, add_rows: np.ndarray
) -> tuple[np.ndarray, int, int, int, dict[int, int]]:
    """The bias adds' kernels (a mask), their time and number, the GPU idle time while the
    host ran the adds, and the kernel time per add."""
    ops = trace.cpu_ops
    gpu_ns, n_k, idle_ns = 0, 0, 0
    per_add: dict[int, int] = {}
    kmask = np.zeros(0, dtype=bool)
    if len(add_rows) and trace.has_gpu:
        mask = np.zeros(len(ops), dtype=bool)
        mask[add_rows] = True
        k = trace.kernels
        kmask = gpu_rows_from(trace, k, inherit(trace, mask)) if len(k) else kmask
        ks = k[kmask] if len(k) else k
        gpu_ns, n_k = int(ks["dur_ns"].sum()), len(ks)
        per_add = _kernel_ns_by_add(trace, ks, mask)
        if n_k:
            busy = main_busy(trace)
            _, idle_ns = busy.idle_in_spans(
                ops["ts_ns"].to_numpy()[add_rows], ops["end_ns"].to_numpy()[add_rows]
            )
    return kmask, gpu_ns, n_k, idle_ns, per_add


def _value(trace: Trace, ctx: Context, f: _Facts) -> _Value:
    """The bias adds' kernels and host calls removed, replayed; without a replay (or without
    kernels), their kernel time plus the GPU idle under them."""
    saving_ms = (f.gpu_ns + f.idle_ns) / 1e6 / f.steps
    how = (
        "saving = GPU time of the bias-add kernels under these convolutions + GPU "
        "idle time while the host ran the adds"
    )
    if not f.n_k:
        return _Value({"est_savings_ms": saving_ms}, saving_ms, True, how)
    ops = trace.cpu_ops
    rep = ctx.whatif(
        Combined(
            [
                ScaleGpu(
                    kernels=np.flatnonzero(f.kmask), speedup=float("inf"), label="bias adds gone"
                ),
                ShrinkHost(
                    ops["ts_ns"].to_numpy()[f.add_rows],
                    ops["end_ns"].to_numpy()[f.add_rows],
                    tids=ops["tid"].to_numpy()[f.add_rows],
                    keep=0.0,
                    label="bias add calls gone",
                ),
            ]
        )
    )
    if not rep.replayed:
        return _Value({"est_savings_ms": saving_ms}, saving_ms, True, how)
    how = (
        "The bias-add kernels and the host time of their aten::add_ calls are "
        "removed. " + rep.assumption
    )
    return _Value(rep.draft_fields(), saving_ms, rep.ms > 0, how)


def _summary(trace: Trace, f: _Facts, v: _Value) -> str:
    if len(f.pairs):
        summary = (
            f"{len(f.pairs) / f.steps:.0f} convolution(s) with a bias feed BatchNorm directly "
            f"{per_step_words(trace)}"
        )
        summary += (
            f"; the bias adds cost {f.n_k / f.steps:.0f} kernels, "
            f"{f.gpu_ns / 1e6 / f.steps:.2f} ms on the GPU, and cancel out in BatchNorm."
            if f.n_k
            else "; BatchNorm cancels the bias, so computing it and its gradient is wasted "
            "(no separate bias kernel to measure here; on cuDNN it is one add kernel "
            "per convolution)."
        )
    else:
        summary = (
            f"{f.n_run} Conv->BatchNorm pair(s) with a conv bias (run.json); the bias is "
            "cancelled by BatchNorm but its cost is not visible in this trace."
        )
    if f.n_run and len(f.pairs):
        summary += f" run.json lists {f.n_run} such module pair(s)."
    if v.saving_ms > 0 and not v.replay_saves:
        summary += " Replayed without them, the step is no shorter: other work limits it."
    return summary


def _recommendation(training: bool) -> str:
    if training:
        return (
            "Create these convolutions with bias=False: the BatchNorm that follows removes "
            "any per-channel offset, so the bias, its gradient and its optimizer update are "
            "pure overhead. For pretrained weights fold the bias into BatchNorm's running "
            "mean first."
        )
    return (
        "Fold each bias into the BatchNorm after it (bn.running_mean -= conv.bias, "
        "then bias=False), or fuse each convolution with its BatchNorm for inference "
        "(torch.ao.quantization.fuse_modules): the bias add disappears, and with fusion "
        "the BatchNorm too."
    )


def _kernel_ns_by_add(trace: Trace, ks: pd.DataFrame, add_mask: np.ndarray) -> dict[int, int]:
    """GPU ns per bias-add op (kernels attributed to the nearest add_ at or above the issuer)."""
    op_of = runtime_op(trace)
    parent = trace.cpu_ops["parent_idx"].to_numpy()
    out: dict[int, int] = {}
    for li, dur in zip(ks["launch_idx"].to_numpy(), ks["dur_ns"].to_numpy(), strict=True):
        o = int(op_of[li])
        while o >= 0 and not add_mask[o]:
            o = int(parent[o])
        if o >= 0:
            out[o] = out.get(o, 0) + int(dur)
    return out


def _evidence(
    trace: Trace, pairs: pd.DataFrame, per_add: dict[int, int] | None
) -> tuple[Evidence, ...]:
    """Per conv weight shape: count and the GPU time of its bias adds (on a GPU trace)."""
    if not len(pairs):
        return ()
    ops = trace.cpu_ops
    labels = []
    for c in pairs["conv"]:
        w = arg_dims(ops["input_dims"].iat[c], 1)
        what = "GPU time of the bias add" if per_add is not None else "bias fused, not timed"
        labels.append(
            f"{ops['name'].iat[c]}{' weight ' + str(w) if w else ''} with bias "
            f"-> batch_norm ({what})"
        )
    rows = []
    for label, g in pairs.assign(label=labels).groupby("label", sort=False):
        add_ms = ms(sum((per_add or {}).get(a, 0) for lst in g["adds"] for a in lst))
        first = int(ops["ts_ns"].iat[int(g["conv"].iloc[0])])
        rows.append((len(g), Evidence(str(label), len(g), add_ms, trace.to_trace_us(first))))
    rows.sort(key=lambda r: -r[0])
    return tuple(e for _, e in rows[:5])
