"""Activation checkpointing: forward work run a second time inside backward.

**What it detects.** Forward operators executed inside the backward pass. With
``torch.utils.checkpoint`` (reentrant or not), a framework's activation checkpointing
(Megatron's or DeepSpeed's ``CheckpointFunction``, FSDP's ``checkpoint_wrapper``) or a
hand-written recompute, the activations of a block are dropped after its forward and the
block's forward runs again when backward needs them. In the trace these are operators inside
backward work (``autograd::engine::evaluate_function``, ``*Backward`` nodes; the reentrant
kind under a ``CheckpointFunctionBackward`` node, the non-reentrant kind under the node that
first unpacks a saved activation), or between the nodes on an autograd thread (a thread that
runs backward nodes and no training-loop work), that record an autograd sequence number: they
ran with grad mode on and built autograd nodes, which only a forward does (backward formulas
run with grad mode off). When backward itself runs with grad mode on (``create_graph=True``: double
backward, gradient penalties) every backward op records one, and only the operators inside
checkpoint frames (a ``Checkpoint*Backward`` node, ``torch/utils/checkpoint.py``'s
``recompute_fn`` / ``unpack_hook`` frames) are counted. The finding gives the GPU time of the
kernels they launch, their host time, the user's lines they come from (the blocks'
``forward``) and the memory context (run.json's peak or the trace's ``[memory]`` events).

**Why it costs time.** Checkpointing trades compute for memory: every checkpointed block runs
its forward twice per step (about a third more compute for a fully checkpointed model). When
the GPU has memory to spare, that compute buys nothing.

**How the saving is estimated.** The steady steps are replayed (see docs/savings.md) without
the recomputation: its kernels and copies removed and its host time (on the thread that ran
it) removed; the range keeps half of it (checkpointing half the blocks instead of none). The
saving is what the step loses in the replay. Without GPU work (a CPU run) the recomputation's
host time per step is the saving. When peak memory is above
``activation_recompute.near_full_pct`` of the device, the finding is information only: the
recomputation is what lets the step fit.

**How to fix.** Checkpoint fewer blocks, or none, while memory allows (a flag per block, or
``checkpoint`` only every other layer); keep the matmul outputs and recompute only cheap
pointwise ops with selective activation checkpointing
(``torch.utils.checkpoint.create_selective_checkpoint_contexts``); with ``torch.compile``, let
its min-cut partitioner choose (``torch._functorch.config.activation_memory_budget``).

**Known false positives.** A model that runs a forward inside backward on purpose (a custom
``autograd.Function`` whose backward re-evaluates a function) looks the same; the fix then is
the same trade-off.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from advisor.arrays import unique_ints
from advisor.derive.locate import aggregate, merge_locations
from advisor.derive.timeline import union
from advisor.detect.draft import Draft
from advisor.detect.registry import Context, detector
from advisor.detect.thresholds import register
from advisor.findings import Evidence, Location
from advisor.replay.fixes import Combined, ScaleGpu, ShrinkHost
from advisor.trace.model import Trace
from advisor.trace.names import name_mask

from ._memory import Peak, gb, gpu_peak
from ._ops import BACKWARD_RE, gpu_rows_from, in_backward, inherit, op_names
from ._per_step import fmt_ms, n_steps

ID = "activation-recompute"
TITLE = "Activation checkpointing recomputes the forward in backward"

register(
    "activation_recompute.min_pct",
    1.0,
    "report when the recomputed forward takes this % of the step (GPU or host time)",
)
register(
    "activation_recompute.near_full_pct",
    80.0,
    "peak memory above this % of the device: the recomputation is what makes the step fit (info)",
)

# autograd nodes (besides BACKWARD_RE): C++ custom Functions show as CppNode<...>
_NODE_RE = re.compile(BACKWARD_RE.pattern + r"|^torch::autograd::CppNode<")
# the autograd node of reentrant checkpointing (torch, Megatron, DeepSpeed): CheckpointFunction
_CKPT_NODE_RE = re.compile(r"Checkpoint\w*Backward\d*$")
# backward formulas (aten::convolution_backward, ...): graded only when grad mode is on in backward
_FORMULA_RE = re.compile(r"_backward(_\w+)?$")
# the frames of non-reentrant checkpointing that re-run the forward
_CKPT_FILE = "torch/utils/checkpoint.py"
_CKPT_FUNCS = frozenset({"recompute_fn", "unpack_hook", "backward"})
# the library functions a model calls to checkpoint a block
_CKPT_CALLS = frozenset({"checkpoint", "checkpoint_sequential"})

SNIPPET = """\
# checkpoint fewer blocks (or none) while the GPU has memory to spare
for i, block in enumerate(self.blocks):
    if self.training and i % 2 == 0 and checkpoint_some:      # was: every block
        x = checkpoint(block, x, use_reentrant=False)
    else:
        x = block(x)
# or recompute only cheap ops: torch.utils.checkpoint.create_selective_checkpoint_contexts"""


def _frame_spans(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tid, start, end) of torch's checkpoint frames that re-run a forward."""
    py = trace.python
    if not len(py):
        z = np.zeros(0, np.int64)
        return z, z, z
    file = py["file"].astype(str)
    m = file.str.endswith(_CKPT_FILE).to_numpy() & py["function"].astype(str).isin(_CKPT_FUNCS)
    return (
        py["tid"].to_numpy()[m].astype(np.int64),
        py["ts_ns"].to_numpy()[m],
        py["end_ns"].to_numpy()[m],
    )


def _in_frames(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Per cpu_ops row in ``rows``: it runs inside a checkpoint frame on its thread."""
    tids, s, e = _frame_spans(trace)
    out = np.zeros(len(rows), dtype=bool)
    if not len(s) or not len(rows):
        return out
    ops = trace.cpu_ops
    rt, rs = ops["tid"].to_numpy()[rows], ops["ts_ns"].to_numpy()[rows]
    for t in unique_ints(tids):
        m = tids == t
        order = np.argsort(s[m], kind="stable")
        fs, fe = s[m][order], np.maximum.accumulate(e[m][order])
        i = np.searchsorted(fs, rs, side="right") - 1
        hit = (rt == t) & (i >= 0)
        out |= hit & (rs < fe[np.clip(i, 0, None)])
    return out


def recomputed_ops(trace: Trace) -> np.ndarray:
    """Rows of cpu_ops that are forward work recomputed inside backward, outermost only, in
    steady steps (see the module doc)."""
    ops = trace.cpu_ops
    if not len(ops):
        return np.zeros(0, dtype=np.int64)
    node = name_mask(ops["name"], _NODE_RE)
    bw = in_backward(trace)
    graded = (ops["seq"].to_numpy() >= 0) & (ops["step"].to_numpy() >= 0)
    inside = (bw & ~node & graded) | (_between_nodes(trace, bw) & graded)
    rows = np.flatnonzero(inside)
    if not len(rows):
        return rows
    if name_mask(ops["name"].iloc[rows], _FORMULA_RE).any():
        # grad mode on in backward (create_graph): only checkpoint frames tell recomputation
        ck = inherit(trace, name_mask(ops["name"], _CKPT_NODE_RE))[rows] | _in_frames(trace, rows)
        rows = rows[ck & ~name_mask(ops["name"].iloc[rows], _FORMULA_RE)]
    flag = np.zeros(len(ops), dtype=bool)
    flag[rows] = True
    parent = ops["parent_idx"].to_numpy()
    return rows[~flag[np.clip(parent[rows], 0, None)] | (parent[rows] < 0)]


def _between_nodes(trace: Trace, bw: np.ndarray) -> np.ndarray:
    """Per cpu_ops row: a top-level op outside backward work on an autograd thread (a thread
    that runs backward nodes and whose top-level ops outside them all record a sequence
    number; a thread that also runs the training loop has top-level ops that do not)."""
    ops = trace.cpu_ops
    tid = ops["tid"].to_numpy()
    top = (ops["parent_idx"].to_numpy() < 0) & ~bw
    out = np.zeros(len(ops), dtype=bool)
    graded = ops["seq"].to_numpy() >= 0
    for t in unique_ints(tid[bw]):
        mine = top & (tid == t)
        if mine.any() and graded[mine].all():
            out |= mine
    return out


def _union_ns(tid: np.ndarray, s: np.ndarray, e: np.ndarray) -> int:
    """Host time the ranges cover, each thread's overlaps counted once."""
    total = 0
    for t in unique_ints(tid):
        us, ue = union(s[tid == t], e[tid == t])
        total += int((ue - us).sum())
    return total


def _kinds(names: np.ndarray, steps: int) -> str:
    """What was recomputed per step, in words: the top operator names."""
    vc = pd.Series(names).value_counts()
    return ", ".join(f"{n} x{c / steps:.0f}" for n, c in vc.head(4).items())


def _checkpoint_calls(trace: Trace, ctx: Context) -> list[Location | None]:
    """The user's lines that call a checkpoint function (``torch.utils.checkpoint.checkpoint``,
    ``checkpoint_sequential``, a framework's ``checkpoint``) in the steady steps."""
    py = trace.python
    if not len(py):
        return []
    fn = py["function"].astype(str)
    m = fn.isin(_CKPT_CALLS).to_numpy() & ~py["is_user"].to_numpy(dtype=bool)
    m &= py["step"].to_numpy() >= 0
    rows = np.flatnonzero(m)[:400]
    tid, ts = py["tid"].to_numpy(), py["ts_ns"].to_numpy()
    return [ctx.locator.at(int(tid[r]), int(ts[r])) for r in rows]


class _Facts(NamedTuple):
    """The recomputed operators (outermost rows of cpu_ops) and what they cost."""

    rows: np.ndarray
    names: np.ndarray  # op_names, all of cpu_ops
    tid: np.ndarray  # per row: thread, start, end
    s: np.ndarray
    e: np.ndarray
    kern: np.ndarray  # kernel and memcpy rows they launched (masks)
    copies: np.ndarray
    steps: int
    host_ms: float  # per step
    gpu_ms: float


class _Memory(NamedTuple):
    """The peak device memory and what it says about removing the recomputation."""

    peak: Peak | None
    near: bool  # above activation_recompute.near_full_pct: no saving claimed
    mem: str  # the peak in words
    rec_mem: str  # what the memory allows, in words


@detector(ID, TITLE, needs=("cpu_ops", "steps"))
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    f = _measure(trace, ctx)
    if f is None:
        return []
    fields, how = _value(trace, ctx, f)
    m = _memory(trace, ctx)
    if m.near:
        fields = {"est_savings_ms": 0.0}
    return [
        Draft(
            id=ID,
            title=TITLE,
            **fields,
            confidence="high" if m.peak is not None else "medium",
            summary=_summary(trace, f, m),
            recommendation=_advice(m),
            snippet=SNIPPET,
            evidence=_evidence(trace, f.rows, f.names, f.kern, f.copies, f.steps),
            locations=merge_locations(
                aggregate(_checkpoint_calls(trace, ctx)),
                aggregate(ctx.locator.for_op(int(r)) for r in f.rows[:400]),
            ),
            assumptions=_assumptions(how, m.near),
            latent=m.near,
            extra={
                "recomputed_ops_per_step": round(len(f.rows) / f.steps, 2),
                "gpu_ms_per_step": round(f.gpu_ms, 3),
                "host_ms_per_step": round(f.host_ms, 3),
                "peak_memory_pct": None if m.peak is None else round(m.peak.pct, 1),
            },
        )
    ]


def _measure(trace: Trace, ctx: Context) -> _Facts | None:
    """The recomputation's host and GPU time; None under activation_recompute.min_pct."""
    rows = recomputed_ops(trace)
    if not len(rows):
        return None
    ops = trace.cpu_ops
    steps = n_steps(trace)
    tid = ops["tid"].to_numpy()[rows]
    s, e = ops["ts_ns"].to_numpy()[rows], ops["end_ns"].to_numpy()[rows]
    host_ns = _union_ns(tid, s, e)
    mask = np.zeros(len(ops), dtype=bool)
    mask[rows] = True
    under = inherit(trace, mask)
    kern = gpu_rows_from(trace, trace.kernels, under)
    copies = gpu_rows_from(trace, trace.memcpy, under)
    gpu_ns = int(trace.kernels["dur_ns"].to_numpy()[kern].sum()) + int(
        trace.memcpy["dur_ns"].to_numpy()[copies].sum()
    )
    host_ms, gpu_ms = host_ns / 1e6 / steps, gpu_ns / 1e6 / steps
    step_ms = ctx.step_ms_median
    big_ms = gpu_ms if trace.has_gpu else host_ms
    if step_ms <= 0 or 100.0 * max(big_ms, host_ms) / step_ms < ctx.t(
        "activation_recompute.min_pct"
    ):
        return None
    names = op_names(trace)
    return _Facts(rows, names, tid, s, e, kern, copies, steps, host_ms, gpu_ms)


def _value(trace: Trace, ctx: Context, f: _Facts) -> tuple[dict[str, Any], str]:
    """The steps replayed without the recomputation; on a CPU run its host time."""
    fix = Combined(
        (
            ScaleGpu(kernels=f.kern, memcpy=f.copies, speedup=float("inf"), low=2.0),
            ShrinkHost(f.s, f.e, f.tid, keep=0.0, low=0.5),
        ),
        label="no activation recomputation",
    )
    rep = ctx.whatif(fix)
    if rep.replayed and trace.has_gpu:
        return rep.draft_fields(), rep.assumption
    host_ms = f.host_ms
    return (
        {
            "est_savings_ms": round(host_ms, 3),
            "est_savings_range_ms": (round(host_ms / 2, 3), round(host_ms, 3)),
        },
        "Not replayed (no GPU work the replay can place): the recomputation's host time per "
        f"step is the saving ({fmt_ms(host_ms)}; range: half of it).",
    )


def _memory(trace: Trace, ctx: Context) -> _Memory:
    peak = gpu_peak(trace, ctx)
    near = peak is not None and peak.pct >= ctx.t("activation_recompute.near_full_pct")
    if peak is None:
        mem = (
            "peak device memory is not in this trace (profile_memory, or advisor profile)"
            if trace.has_gpu
            else "a CPU run: no device memory to weigh"
        )
        return _Memory(peak, near, mem, "if the GPU has memory to spare")
    mem = f"peak {gb(peak.used)} of {gb(peak.capacity)} ({peak.pct:.0f}%, {peak.source})"
    rec_mem = "the GPU has memory to spare" if not near else "memory is nearly full"
    return _Memory(peak, near, mem, rec_mem)


def _summary(trace: Trace, f: _Facts, m: _Memory) -> str:
    kinds = _kinds(f.names[f.rows], f.steps)
    what = (
        f"{fmt_ms(f.gpu_ms)} of GPU time and {fmt_ms(f.host_ms)} of host time per step"
        if trace.has_gpu
        else f"{fmt_ms(f.host_ms)} of host time per step"
    )
    return (
        f"Backward re-runs {len(f.rows) / f.steps:.0f} forward operator(s) per step ({kinds}): "
        f"activation checkpointing recomputes {what}; {m.mem}."
    )


def _advice(m: _Memory) -> str:
    if m.near:
        return (
            f"Checkpointing keeps this step within memory ({m.mem}): removing it would not fit. "
            "The trade-off: recompute only cheap ops (selective activation checkpointing: "
            "torch.utils.checkpoint.create_selective_checkpoint_contexts), or free memory "
            "elsewhere (bf16 autocast, a smaller micro-batch with gradient accumulation, "
            "sharded optimizer state) and then checkpoint fewer blocks."
        )
    return (
        f"Checkpoint fewer blocks or none ({m.rec_mem}: {m.mem}); or keep the matmul outputs "
        "and recompute only cheap pointwise ops (selective activation checkpointing: "
        "torch.utils.checkpoint.create_selective_checkpoint_contexts); with torch.compile, "
        "torch._functorch.config.activation_memory_budget lets the partitioner choose."
    )


def _assumptions(how: str, near: bool) -> tuple[str, ...]:
    return (
        "Recomputed = operators inside backward work that record an autograd sequence "
        "number (grad mode on: they built autograd nodes, as a forward does); with "
        "create_graph only those inside checkpoint frames.",
        "Removed in the replay: the kernels and copies they launched and their host "
        "time; range: half of it (fewer blocks checkpointed instead of none). " + how,
        *(
            (
                "Peak memory is above activation_recompute.near_full_pct of the device: "
                "the recomputation is needed to fit, so no saving is claimed.",
            )
            if near
            else ()
        ),
        "Memory: dropping checkpointing keeps the blocks' activations alive until "
        "backward; check the peak with a trial step before removing it.",
    )


def _evidence(
    trace: Trace,
    rows: np.ndarray,
    names: np.ndarray,
    kern: np.ndarray,
    copies: np.ndarray,
    steps: int,
) -> tuple[Evidence, ...]:
    """The recomputed operators by name and the GPU work they launched (what this finding
    claims: the same rows a fix removes)."""
    ops = trace.cpu_ops
    out = []
    df = pd.DataFrame(
        {
            "name": names[rows],
            "dur": ops["dur_ns"].to_numpy()[rows],
            "ts": ops["ts_ns"].to_numpy()[rows],
        }
    )
    for name, g in sorted(df.groupby("name"), key=lambda kv: -int(kv[1]["dur"].sum()))[:4]:
        out.append(
            Evidence(
                f"{name} recomputed inside backward (host time)",
                len(g),
                round(float(g["dur"].sum()) / 1e6, 3),
                trace.to_trace_us(int(g["ts"].min())),
            )
        )
    k = trace.kernels
    if kern.any():
        kn = k["name"].astype(str).to_numpy()[kern]
        top = pd.Series(kn).value_counts().index[0]
        out.append(
            Evidence(
                f"GPU kernels launched by the recomputation (most: {top[:80]})",
                int(kern.sum()),
                round(float(k["dur_ns"].to_numpy()[kern].sum()) / 1e6, 3),
                trace.to_trace_us(int(k["ts_ns"].to_numpy()[kern].min())),
            )
        )
    if copies.any():
        m = trace.memcpy
        out.append(
            Evidence(
                "copies and memsets launched by the recomputation",
                int(copies.sum()),
                round(float(m["dur_ns"].to_numpy()[copies].sum()) / 1e6, 3),
            )
        )
    return tuple(out)
