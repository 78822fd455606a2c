"""A model left in train mode during inference: dropout active and BatchNorm on batch statistics.

**What it detects.** Steps with no backward (no autograd backward ops, no ``Optimizer.step``)
that run train-mode layers: **dropout** that drops (an ``aten::dropout``/``feature_dropout``/
``alpha_dropout`` that calls ``native_dropout``, ``_fused_dropout`` or ``bernoulli_``, or
launches GPU work: in eval mode dropout returns its input and does nothing), and **BatchNorm on
the batch's statistics** (a ``batch_norm`` right after the 0-d ``add_``/``add`` that bumps
``num_batches_tracked``, or launching cuDNN's ``bn_fw_tr``, ATen's
``batch_norm_collect_statistics`` or MIOpen's ``BatchNormFwdTrain`` kernels: only train mode
does either). Both mean ``model.eval()`` was not called before the forward passes.

**Why it costs time.** Dropout draws a random mask and multiplies by it on every call;
train-mode BatchNorm reduces over the batch for its mean and variance and updates its running
averages. Beyond the time, the results are wrong for inference: dropout zeroes activations at
random, BatchNorm normalizes each batch by itself and overwrites the statistics the model
learned.

**How the saving is estimated.** The steps are replayed (docs/savings.md) without the
dropouts' kernels and calls (``native_dropout``, ``bernoulli_``...), BatchNorm's statistics
kernels (ATen's ``collect_statistics``; cuDNN's and MIOpen's train kernels do statistics and
normalization in one kernel and are not claimed) and the ``num_batches_tracked`` bumps: what
``model.eval()`` removes. On a CPU-only trace: those ops' host time.

**How to fix.** Call ``model.eval()`` before inference (and ``model.train()`` before training
again); evaluate under ``torch.inference_mode()`` (see ``inference-without-no-grad``).

**Known false positives.** Monte Carlo dropout (dropout kept on at inference on purpose) and
test-time adaptation of BatchNorm; forward passes whose backward falls outside the profiled
window (confidence is low when the trace also holds training steps).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from advisor.derive.locate import aggregate
from advisor.detect.draft import Draft
from advisor.detect.registry import Context, detector
from advisor.findings import Confidence, Evidence
from advisor.replay.fixes import Combined, Fix, ScaleGpu, ShrinkHost
from advisor.trace.model import Trace
from advisor.trace.names import name_flags, name_in

from ._ops import arg_dims, gpu_rows_from, in_backward, inherit, kernel_op, op_names, parent_has
from ._per_step import fmt_ms, n_steps

ID = "inference-in-train-mode"
TITLE = "Inference with the model in train mode: dropout and BatchNorm statistics active"
DROPOUT = frozenset(
    f"aten::{n}"
    for n in ("dropout", "feature_dropout", "alpha_dropout", "feature_alpha_dropout", "dropout_")
)
DROPPING = frozenset(
    f"aten::{n}" for n in ("native_dropout", "_fused_dropout", "bernoulli_", "bernoulli")
)
BATCH_NORM = frozenset({"aten::batch_norm", "aten::_batch_norm_impl_index"})
BUMPS = ("aten::add_", "aten::add")
TRAIN_BN_KERNEL = ("bn_fw_tr", "batch_norm_collect_statistics", "BatchNormFwdTrain")
STATS_KERNEL = ("batch_norm_collect_statistics",)
SNIPPET = """model.eval()                       # dropout off, BatchNorm on its running statistics
with torch.inference_mode():
    out = model(batch)
model.train()                      # before training again
"""


class _Facts(NamedTuple):
    """Train-mode work in the inference steps, and what model.eval() removes of it."""

    names: np.ndarray  # cpu_ops names
    train_steps: set[int]  # steps with backward or an optimizer step
    drop_ops: np.ndarray  # dropout calls that drop (cpu_ops rows)
    bn_ops: np.ndarray  # BatchNorm calls on batch statistics
    host: np.ndarray  # the calls model.eval() removes (dropping calls, bumps)
    claimed: np.ndarray  # the kernels it removes (a mask over kernels)
    hit: int  # inference steps with such calls
    steps: int


@detector(ID, TITLE, needs=("cpu_ops",))
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    f = _measure(trace)
    if f is None:
        return []
    fields, how, gpu_ms = _value(trace, ctx, f)
    conf: Confidence = "low" if f.train_steps else "medium"
    return [
        Draft(
            id=ID,
            title=TITLE,
            confidence=conf,
            summary=_summary(f, gpu_ms),
            recommendation=(
                "Call model.eval() before inference (model.train() before training again), and "
                "evaluate under torch.inference_mode()."
            ),
            snippet=SNIPPET,
            evidence=tuple(_evidence(trace, f.names, f.drop_ops, f.bn_ops)),
            locations=aggregate(ctx.locator.for_ops(np.concatenate([f.drop_ops, f.bn_ops])[:400])),
            assumptions=(
                "Steps without backward ops or Optimizer.step are inference; dropout drops when "
                "it calls native_dropout/bernoulli_ or launches kernels; BatchNorm is in train "
                "mode after a num_batches_tracked bump or with training kernels.",
                "Saving: dropout's kernels and calls, ATen's BatchNorm statistics kernels and the "
                "bumps removed (cuDNN's/MIOpen's train BatchNorm kernels not claimed). " + how,
                *(
                    ("The trace also holds training steps: these passes may be part of them.",)
                    if f.train_steps
                    else ()
                ),
            ),
            **fields,
        )
    ]


def _measure(trace: Trace) -> _Facts | None:
    """Dropout that drops and BatchNorm on batch statistics in the steps without backward or an
    optimizer step, with the calls and kernels model.eval() removes; None without any."""
    ops = trace.cpu_ops
    bw = in_backward(trace)
    step = ops["step"].to_numpy()
    names = op_names(trace)
    opt = name_flags(ops["name"], lambda n: n.startswith("Optimizer.step"))
    train_steps = set(step[(bw | opt) & (step >= 0)].tolist())
    fwd = (step >= 0) & ~np.isin(step, list(train_steps)) & ~bw
    drop_ops, dropping = _dropouts(trace, fwd)
    bn_ops, bumps, stats = _train_batch_norms(trace, names, fwd)
    if not len(drop_ops) and not len(bn_ops):
        return None
    k = trace.kernels
    claimed = np.zeros(len(k), dtype=bool)
    if len(k):
        gone = np.zeros(len(ops), dtype=bool)
        gone[np.concatenate([dropping, bumps]).astype(np.int64)] = True
        claimed = gpu_rows_from(trace, k, inherit(trace, gone))
        claimed[stats] = True
    host = np.concatenate([dropping, bumps]).astype(np.int64)
    hit = len({int(s) for s in step[np.concatenate([drop_ops, bn_ops]).astype(np.int64)]})
    return _Facts(names, train_steps, drop_ops, bn_ops, host, claimed, hit, n_steps(trace))


def _value(trace: Trace, ctx: Context, f: _Facts) -> tuple[dict[str, Any], str, float]:
    """The removed calls and kernels, replayed: the fields, how, and the kernels' time per
    step; without a replay, that kernel time (the calls' host time on a CPU trace)."""
    ops = trace.cpu_ops
    host = f.host
    fixes: list[Fix] = [
        ShrinkHost(
            ops["ts_ns"].to_numpy()[host],
            ops["end_ns"].to_numpy()[host],
            tids=ops["tid"].to_numpy()[host],
            keep=0.0,
            label="train-mode work gone",
        )
    ]
    if f.claimed.any():
        fixes.append(ScaleGpu(np.flatnonzero(f.claimed), speedup=float("inf"), low=2.0))
    rep = ctx.whatif(Combined(fixes, label="model.eval()"))
    k = trace.kernels
    gpu_ms = float(k["dur_ns"].to_numpy()[f.claimed].sum()) / 1e6 / f.steps if len(k) else 0.0
    host_ms = float(ops["dur_ns"].to_numpy()[host].sum()) / 1e6 / f.steps
    cpu_run = not trace.has_gpu and not len(trace.runtime)
    if rep.replayed:
        return rep.draft_fields(), rep.assumption, gpu_ms
    if trace.has_gpu or cpu_run:
        return (
            {"est_savings_ms": round(gpu_ms if trace.has_gpu else host_ms, 3)},
            "Not replayed: the GPU time of the removed kernels (host time on a CPU trace).",
            gpu_ms,
        )
    # runtime calls but no GPU activity recorded: host times include the GPU's
    return (
        {"est_savings_ms": 0.0},
        "The trace records no GPU activity of this GPU run: no saving is claimed.",
        gpu_ms,
    )


def _summary(f: _Facts, gpu_ms: float) -> str:
    what = []
    if len(f.drop_ops):
        what.append(f"{len(f.drop_ops) / f.hit:.0f} dropout call(s) that drop")
    if len(f.bn_ops):
        what.append(f"{len(f.bn_ops) / f.hit:.0f} BatchNorm call(s) on batch statistics")
    return (
        f"{f.hit} step(s) run forward with no backward and the model in train mode: "
        f"{' and '.join(what)} per step."
        + (f" Their kernels take {fmt_ms(gpu_ms)} per step." if gpu_ms > 0 else "")
        + " The results are not the model's: "
        + "; ".join(
            x
            for x, found in (
                ("dropout zeroes activations at random", len(f.drop_ops)),
                (
                    "BatchNorm normalizes by each batch, overwriting its running statistics",
                    len(f.bn_ops),
                ),
            )
            if found
        )
        + "."
    )


def _owner(trace: Trace, mask: np.ndarray) -> np.ndarray:
    """Per cpu_ops row: the nearest op at or above it with ``mask`` (its row), else -1."""
    ops = trace.cpu_ops
    out = np.where(mask, np.arange(len(ops)), -1)
    parent = ops["parent_idx"].to_numpy()
    depth = ops["depth"].to_numpy()
    order = np.argsort(depth, kind="stable")
    levels = np.split(order, np.flatnonzero(np.diff(depth[order])) + 1) if len(order) else []
    for rows in levels:  # a parent is one level up: its owner is final before its children
        take = rows[(out[rows] < 0) & (parent[rows] >= 0)]
        out[take] = out[parent[take]]
    return out


def _launched_under(trace: Trace, owner: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(kernel rows, their owner op) for the kernels launched under an owned op."""
    kop = kernel_op(trace)
    ok = kop >= 0
    own = np.full(len(kop), -1, dtype=np.int64)
    own[ok] = owner[kop[ok]]
    rows = np.flatnonzero(own >= 0)
    return rows, own[rows]


def _dropouts(trace: Trace, fwd: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the dropout calls that drop, the ops model.eval() removes: native_dropout/bernoulli_
    calls, and a dropping dropout call with none inside) among the ``fwd`` ops."""
    ops = trace.cpu_ops
    parent = ops["parent_idx"].to_numpy()
    is_drop = name_in(ops["name"], DROPOUT)
    outer = is_drop & ~parent_has(is_drop, parent) & fwd
    dropping = name_in(ops["name"], DROPPING) & fwd
    owner = _owner(trace, outer)
    active = np.zeros(len(ops), dtype=bool)
    active[owner[dropping & (owner >= 0)]] = True
    if len(trace.kernels):
        _, by = _launched_under(trace, owner)
        active[by] = True
    alone = dropping & (owner < 0)  # F.dropout calling native_dropout at the top level
    with_child = np.zeros(len(ops), dtype=bool)
    with_child[owner[dropping & (owner >= 0)]] = True
    removed = dropping | (active & ~with_child)
    return np.flatnonzero(active | alone), np.flatnonzero(removed)


def _train_batch_norms(
    trace: Trace, names: np.ndarray, fwd: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(BatchNorm calls in train mode, the num_batches_tracked bumps before them, the kernels
    of their statistics) among the ``fwd`` ops."""
    ops = trace.cpu_ops
    parent = ops["parent_idx"].to_numpy()
    is_bn = name_in(ops["name"], BATCH_NORM)
    outer = is_bn & ~parent_has(is_bn, parent) & fwd
    dims = ops["input_dims"].to_numpy()
    tid = ops["tid"].to_numpy()
    order = np.lexsort((ops["ts_ns"].to_numpy(), parent, tid))
    prev = np.full(len(ops), -1, dtype=np.int64)
    same = (parent[order[1:]] == parent[order[:-1]]) & (tid[order[1:]] == tid[order[:-1]])
    prev[order[1:][same]] = order[:-1][same]
    bn = np.zeros(len(ops), dtype=bool)
    bumps = []
    for r in np.flatnonzero(outer):
        p = int(prev[r])
        if p >= 0 and names[p] in BUMPS and arg_dims(dims[p], 0) == []:
            bn[r] = True
            bumps.append(p)
    stats = np.zeros(0, dtype=np.int64)
    k = trace.kernels
    if len(k):
        rows, by = _launched_under(trace, _owner(trace, outer))
        kn = k["name"]
        train_k = name_flags(kn, lambda n: any(s in n for s in TRAIN_BN_KERNEL))[rows]
        bn[by[train_k]] = True
        stats = rows[name_flags(kn, lambda n: any(s in n for s in STATS_KERNEL))[rows]]
    return np.flatnonzero(bn), np.array(bumps, dtype=np.int64), stats


def _evidence(
    trace: Trace, names: np.ndarray, drop_ops: np.ndarray, bn_ops: np.ndarray
) -> list[Evidence]:
    ops = trace.cpu_ops
    out = []
    for label, rows in (
        ("dropout that drops", drop_ops),
        ("BatchNorm on batch statistics", bn_ops),
    ):
        if len(rows):
            out.append(
                Evidence(
                    f"{label} ({names[rows[0]]}) in steps without backward",
                    len(rows),
                    round(float(ops["dur_ns"].to_numpy()[rows].sum()) / 1e6, 3),
                    trace.to_trace_us(int(ops["ts_ns"].iat[int(rows[0])])),
                )
            )
    return out
