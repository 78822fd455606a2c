"""Device copies: storms of device-to-device copies (``copy_``, ``clone``, ``contiguous``) per step.

**What it detects.** Steps that run many device-to-device copies (by default 100 or more per
step taking at least 1% of the step, ``device_copies.min_per_step``/``min_pct``): ``Memcpy DtoD``
transfers and copy kernels (``direct_copy_kernel``, ``copy_kernel``, fused ``clone`` kernels).
Each copy is traced back to the op that launched it and the ops around it, which name the cause:
a compiled region (``CompiledFunction``/``CompiledFunctionBackward``), the DDP reducer copying
gradients between buckets and ``.grad``, ``AccumulateGrad``, ``clone``, ``contiguous`` or a
dtype/device conversion. Concatenation is left to ``cat-in-loop``, and the copies inside
attention written as matmul, softmax, matmul (the ``clone`` of ``aten::matmul``'s operands) to
``attention-materialized``, whose fix removes them: each kernel is claimed in one row.

**Why it costs time.** A copy moves bytes and computes nothing: it reads and writes the whole
tensor through device memory, takes a kernel launch and host time for the op, and delays the
kernels queued behind it. Hundreds of small copies per step cost mostly their fixed overhead.

**How the saving is estimated.** Half of the copies are assumed avoidable (some are needed, a
layout change the next kernel requires, and the trace cannot tell which): the steps are replayed
(``advisor/replay``) with the copies' GPU time halved and the host time of their ops halved, so
the saving counts only what held the step back; the range replays a quarter and all of them
removed. Without a replayable step, half the copies' GPU time per step (median over the steps)
is shown instead.

**How to fix.** By cause: in a compiled region, look for ``copy_``/``clone`` nodes in the graph
(``TORCH_LOGS="aot_graphs"``): inputs or buffers mutated inside the compiled function are written
back with a copy, and outputs that alias inputs are cloned; mutate outside, return fresh tensors.
DDP: ``gradient_as_bucket_view=True`` makes gradients views into the buckets (no copy each way).
``AccumulateGrad``: gradients whose strides differ from their parameter's are copied; keep
parameters contiguous (or channels_last throughout) and ``zero_grad(set_to_none=True)``.
``clone``/``contiguous``: drop clones of tensors that are never mutated, keep one memory format
instead of ``permute(...).contiguous()`` round trips. Many ``copy_`` calls into preallocated
tensors: one ``torch._foreach_copy_`` over the lists.

**Known false positives.** Copies that an op needs and that no rewrite removes (the first
layout change into channels_last, a ``clone`` before an in-place op) are counted as well; the
claim is halved for that reason.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from advisor.arrays import unique_ints
from advisor.derive.locate import aggregate
from advisor.detect.draft import Draft
from advisor.detect.registry import Context, detector
from advisor.detect.thresholds import register
from advisor.findings import Evidence
from advisor.replay.fixes import Combined, ScaleGpu, ShrinkHost
from advisor.trace.model import Trace
from advisor.trace.names import name_flags

from ._attention import claimed_kernels
from ._ops import launching_op, op_chain, op_names
from ._per_step import fmt_ms, n_steps

ID = "device-copies"
TITLE = "Storms of device-to-device copies"

register("device_copies.min_per_step", 100.0, "report from this many DtoD copies per step")
register("device_copies.min_pct", 1.0, "and when they take this % of the median step")
register("device_copies.fraction", 0.5, "share of the copies assumed avoidable")
register("device_copies.min_ms", 0.1, "report from this saving per step (ms)")

_COPY_KERNEL = re.compile(r"copy_kernel|direct_copy|triton_\w*clone|[^a-z]clone[^a-z]", re.I)
_NOT_COPY = re.compile(r"CatArray|nccl|rccl|gemm", re.I)
_COPY_OPS = ("aten::copy_", "aten::clone", "aten::contiguous", "aten::_to_copy", "aten::to")

# (cause, marker found in the launching op chain), first match wins
_CAUSES = (
    ("compiled", ("CompiledFunction", "Torch-Compiled Region", "CompiledAutograd")),
    ("ddp-bucket", ("reducer::", "Reducer")),
    ("accumulate-grad", ("AccumulateGrad",)),
    ("contiguous", ("aten::contiguous",)),
    ("conversion", ("aten::_to_copy",)),
    ("clone", ("aten::clone",)),
)
_FIX = {
    "compiled": "inside a compiled region: inputs or buffers mutated in the compiled function "
    "are written back with copy_, and outputs aliasing inputs are cloned; list the copy_/clone "
    'nodes with TORCH_LOGS="aot_graphs", mutate outside the compiled function and return fresh '
    "tensors",
    "ddp-bucket": "the DDP reducer copies gradients into and out of its buckets: "
    "DistributedDataParallel(..., gradient_as_bucket_view=True) makes gradients views of the "
    "buckets",
    "accumulate-grad": "AccumulateGrad copies gradients whose strides differ from their "
    "parameter's: keep parameters contiguous (or channels_last throughout) and zero_grad("
    "set_to_none=True)",
    "contiguous": ".contiguous() after permute/transpose: keep one memory format, or use ops "
    "that take strided input",
    "conversion": "dtype/device conversions (.to, .float(), .half()) every step: convert once "
    "(model.to(dtype)) or let autocast handle it",
    "clone": "clone() of tensors that are never mutated afterwards: drop the clone",
    "copy": "copy_ into preallocated tensors one by one: one torch._foreach_copy_(dsts, srcs)",
}


def _cause(names: list[str]) -> str:
    for cause, marks in _CAUSES:
        if any(m in n for n in names for m in marks):
            return cause
    return "copy"


def copy_activity(trace: Trace) -> pd.DataFrame:
    """DtoD memcpys and copy kernels inside steps: columns kind, step, ts_ns, dur_ns, bytes
    (memcpys only, else 0), launch_idx, row (position in ``trace.memcpy`` or ``trace.kernels``)."""
    m = trace.memcpy
    msel = (m["kind"].astype(str) == "DtoD").to_numpy() & (m["step"] >= 0).to_numpy()
    k = trace.kernels
    ksel = np.zeros(len(k), dtype=bool)
    if len(k):
        hit = name_flags(
            k["name"], lambda n: bool(_COPY_KERNEL.search(n)) and not _NOT_COPY.search(n)
        )
        ksel = hit & ~k["is_comm"].to_numpy(dtype=bool) & (k["step"] >= 0).to_numpy()
    cols = ["step", "ts_ns", "dur_ns", "launch_idx"]
    parts = [
        m[msel][cols].assign(
            kind="memcpy", bytes=m["bytes"].to_numpy()[msel], row=np.flatnonzero(msel)
        ),
        k[ksel][cols].assign(kind="kernel", bytes=0, row=np.flatnonzero(ksel)),
    ]
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame(columns=[*cols, "kind", "bytes", "row"])
    return pd.concat(parts, ignore_index=True)


class _Facts(NamedTuple):
    """The copies in steps, each labelled with its cause, copy op and context op (``act``),
    grouped by those labels (``g``, most GPU time first), and the copy ops (``copy_rows``)."""

    act: pd.DataFrame
    g: pd.DataFrame
    copy_rows: list[int]
    steps: int
    per_step: float
    gpu_ms: float  # median per step
    step_ms: float


@detector(ID, TITLE, needs=("gpu",), gpu_only=True)
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    f = _measure(trace, ctx)
    if f is None:
        return []
    causes = f.act.groupby("cause")["dur_ns"].sum().sort_values(ascending=False)
    frac = ctx.t("device_copies.fraction")
    fields, how = _value(trace, ctx, f.act, f.copy_rows, frac, f.gpu_ms)
    rng = fields["est_savings_range_ms"]
    if max(fields["est_savings_ms"], rng[1] if rng else 0.0) < ctx.t("device_copies.min_ms"):
        return []
    return [
        Draft(
            id=ID,
            title=TITLE,
            confidence="low",
            summary=_summary(trace, f),
            recommendation="Remove the copies at their source: "
            + " ".join(f"{_FIX[c]}." for c in causes.index[:3]),
            snippet=_snippet(str(causes.index[0])),
            evidence=_evidence(trace, f),
            locations=aggregate(ctx.locator.for_ops(i for i in f.act["op"].tolist() if i >= 0)),
            assumptions=(
                f"{frac:.0%} of the copies assumed avoidable (their GPU time and the host time of "
                "their ops); some copies are needed and the trace cannot tell which; range: a "
                "quarter to all of them.",
                how,
            ),
            **fields,
        )
    ]


def _measure(trace: Trace, ctx: Context) -> _Facts | None:
    """The copies not claimed by attention-materialized, labelled by cause; None when there
    are too few per step or they take too little of the step."""
    act = copy_activity(trace)
    # copies inside attention written as matmul, softmax, matmul are that finding's kernels
    claimed = claimed_kernels(trace, int(ctx.t("attention_materialized.min_seq")))
    if len(claimed) and len(act):
        act = act[~((act["kind"] == "kernel") & act["row"].isin(claimed)).to_numpy()]
    steps = n_steps(trace)
    if not len(act):
        return None
    per_step = len(act) / steps
    by_step = act.groupby("step")["dur_ns"].sum()
    gpu_ms = float(by_step.reindex(trace.steps["step"], fill_value=0).median()) / 1e6
    step_ms = ctx.step_ms_median
    if per_step < ctx.t("device_copies.min_per_step") or step_ms <= 0:
        return None
    if 100.0 * gpu_ms / step_ms < ctx.t("device_copies.min_pct"):
        return None
    act, copy_rows = _labelled(trace, act)
    g = (
        act.groupby(["cause", "copy_op", "context"], sort=False)
        .agg(
            n=("dur_ns", "size"),
            ns=("dur_ns", "sum"),
            nbytes=("bytes", "sum"),
            ts=("ts_ns", "first"),
            op=("op", "first"),
        )
        .reset_index()
        .sort_values("ns", ascending=False, kind="stable")
    )
    return _Facts(act, g, sorted(copy_rows), steps, per_step, gpu_ms, step_ms)


def _labelled(trace: Trace, act: pd.DataFrame) -> tuple[pd.DataFrame, set[int]]:
    """``act`` with each copy's launching op and its (cause, copy op, context op) from the op
    chain; and the copy ops (clone over its copy_), for their host time."""
    op = launching_op(trace, act)
    opn = op_names(trace)
    label: dict[int, tuple[str, str, str]] = {}  # op row -> (cause, copy op, context op)
    copy_rows: set[int] = set()
    by_chain: dict[tuple[str, ...], tuple[int, tuple[str, str, str]]] = {}  # per name chain
    for i in unique_ints(op[op >= 0]).tolist():
        rows = op_chain(trace, i)
        chain = tuple(str(opn[j]) for j in rows)
        got = by_chain.get(chain)
        if got is None:
            at = next((j for j, n in enumerate(chain) if n in _COPY_OPS), 0)
            at = next((j for j, n in enumerate(chain) if n in _COPY_OPS[1:]), at)
            context = next((n for n in reversed(chain) if n not in _COPY_OPS), chain[-1])
            got = by_chain[chain] = (at, (_cause(list(chain)), chain[at], context))
        copy_rows.add(int(rows[got[0]]))
        label[i] = got[1]
    none = ("copy", "(no launching op)", "")
    lab = [label.get(int(i), none) for i in op]
    act = act.assign(
        op=op, cause=[x[0] for x in lab], copy_op=[x[1] for x in lab], context=[x[2] for x in lab]
    )
    return act, copy_rows


def _evidence(trace: Trace, f: _Facts) -> tuple[Evidence, ...]:
    evidence = []
    for r in f.g.head(5).itertuples(index=False):
        where = f" in {r.context}" if r.context and r.context != r.copy_op else ""
        size = f", {r.nbytes / f.steps / 1e6:.1f} MB per step" if r.nbytes else ""
        evidence.append(
            Evidence(
                f"{r.copy_op}{where} ({r.cause}): {r.n / f.steps:.0f} per step{size}",
                int(r.n),
                round(float(r.ns) / 1e6, 3),
                trace.to_trace_us(int(r.ts)),
            )
        )
    return tuple(evidence)


def _summary(trace: Trace, f: _Facts) -> str:
    act, steps, gpu_ms, step_ms = f.act, f.steps, f.gpu_ms, f.step_ms
    host_ms = float(trace.cpu_ops["dur_ns"].to_numpy()[f.copy_rows].sum()) / 1e6 / steps
    mc = act[act["kind"] == "memcpy"]
    top = f.g.iloc[0]
    where = f" in {top['context']}" if top["context"] and top["context"] != top["copy_op"] else ""
    return (
        f"{f.per_step:.0f} device-to-device copies per step ({len(mc) / steps:.0f} DtoD "
        f"memcpys, {(len(act) - len(mc)) / steps:.0f} copy kernels) take "
        f"{fmt_ms(gpu_ms)} of GPU time per step ({gpu_ms / step_ms:.1%} of the "
        f"{fmt_ms(step_ms)} step), and their ops {fmt_ms(host_ms)} of host time. "
        f"Most from {top['copy_op']}{where} "
        f"({top['n'] / steps:.0f} per step)."
    )


def _value(
    trace: Trace, ctx: Context, act: pd.DataFrame, copy_ops: list[int], frac: float, gpu_ms: float
) -> tuple[dict[str, Any], str]:
    """The saving of removing ``frac`` of the copies, replayed; without a replayable step, that
    share of their GPU time."""
    ops = trace.cpu_ops
    rows = np.asarray(copy_ops, dtype=np.int64)
    kern = act.loc[act["kind"] == "kernel", "row"].to_numpy(np.int64)
    mem = act.loc[act["kind"] == "memcpy", "row"].to_numpy(np.int64)
    speed = 1.0 / (1.0 - frac) if frac < 1 else float("inf")
    fix = Combined(
        [
            ScaleGpu(kernels=kern, memcpy=mem, speedup=speed, low=4 / 3, high=float("inf")),
            ShrinkHost(
                ops["ts_ns"].to_numpy()[rows],
                ops["end_ns"].to_numpy()[rows],
                ops["tid"].to_numpy()[rows],
                keep=1.0 - frac,
                low=0.75,
                high=0.0,
            ),
        ],
        label="fewer device copies",
    )
    rep = ctx.whatif(fix) if len(trace.runtime) else None  # no launches: nothing to replay
    if rep is not None and rep.replayed:
        return rep.draft_fields(), rep.assumption
    fields = {
        "est_savings_ms": round(gpu_ms * frac, 3),
        "est_savings_range_ms": (round(gpu_ms / 4, 3), round(gpu_ms, 3)),
    }
    return fields, (
        f"Not replayed (no steady step the replay can place): {frac:g} x the "
        "copies' GPU time per step (median over the steps)."
    )


_SNIPPETS = {
    "compiled": '# find the copies the compiled graph adds\n#   TORCH_LOGS="aot_graphs" python '
    "train.py   (look for copy_ / clone nodes)\n@torch.compile\ndef step(x, buf):\n"
    "    y = model(x)\n    return y, y.sum()        # return new tensors ...\nout, s = step(x, "
    "buf)\nbuf.add_(s)                  # ... and mutate inputs/buffers outside\n",
    "ddp-bucket": "model = torch.nn.parallel.DistributedDataParallel(\n    model, "
    "device_ids=[local_rank],\n    gradient_as_bucket_view=True,   # gradients are views of "
    "the buckets: no copies\n)\n",
    "accumulate-grad": "model = model.to(memory_format=torch.channels_last)  # params and "
    "grads in one layout\noptimizer.zero_grad(set_to_none=True)\n",
    "contiguous": "# keep one layout instead of permute(...).contiguous() round trips\n"
    "x = x.to(memory_format=torch.channels_last)   # once, at the input\n",
    "conversion": "model = model.to(device, dtype=torch.bfloat16)   # convert once\n"
    "with torch.autocast('cuda', dtype=torch.bfloat16):\n    loss = model(x)\n",
    "clone": "# before: y = x.clone(); f(y)   (y is never modified)\ny = x\nf(y)\n",
    "copy": "# one kernel for a list of copies instead of one per tensor\n"
    "torch._foreach_copy_(dst_tensors, src_tensors)\n",
}


def _snippet(cause: str) -> str:
    return _SNIPPETS.get(cause, _SNIPPETS["copy"])
