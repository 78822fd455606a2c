"""Tensors built on the CPU and then copied to the GPU every step.

**What it detects.** A tensor-creation op that runs on the host (`torch.randn`, `rand`,
`randint`, `zeros`, `ones`, `full`, `arange`, `eye`, `torch.tensor(...)`) followed, in the
same step and on the same thread, by a host-to-device copy of a tensor of the same shape (or,
without shapes, from the same source line): `torch.randn(n, d).cuda()`,
`torch.zeros(b).to(device)`, `torch.tensor(lst).to(device)`. The copy must start within 2 ms
(`host_tensor_creation.max_gap_ms`) with no kernel launched in between, and the pattern must
show in at least half of the profiled steps. Python data already staged through pinned memory
(`torch.tensor(x).pin_memory().to(device, non_blocking=True)`) is not reported.

**Why it costs time.** The host fills the tensor element by element (random numbers on the CPU
are slow), then the data crosses PCIe, usually from pageable memory, which blocks the host.
Created on the GPU it is one fast kernel and no transfer.

**How the saving is estimated.** The steady steps are replayed (see docs/savings.md) without the
creation ops, the copy calls and the copies: the saving is what the step loses (host work the
GPU waited for, and the copies when they were on the GPU's path). Making the tensor on the GPU
(about 5 us) is not counted. Where the replay cannot place the steps: per occurrence, the
copy's GPU time plus the time the GPU sat idle while the host was inside the creation op and
the copy call, minus the cost of creating it on the device (a 5 us launch plus the bytes
written at 500 GB/s).

**How to fix.** Pass `device=` to the factory (`torch.randn(n, d, device="cuda")`), build
from existing GPU tensors, or, for data that really comes from Python/NumPy, use
`torch.as_tensor`/`torch.from_numpy` on a pinned buffer and copy with `non_blocking=True`, or
hoist constants out of the loop.

**Known false positives.** Random tensors made on the GPU draw a different random stream (the
values change, not their distribution). A CPU tensor reused on the host after the copy still
needs its CPU copy. Shapes are matched, not tensor identities: a coincidental shape match in the
same step can be mistaken for the pattern.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from advisor.derive.locate import aggregate
from advisor.derive.runtime import BOOKKEEPING_CALLS, COPY_CALL_RE, SYNC_CALL_RE
from advisor.derive.timeline import main_busy
from advisor.detect.draft import Draft
from advisor.detect.registry import Context, Skip, detector
from advisor.detect.thresholds import register
from advisor.findings import Evidence
from advisor.replay.fixes import AsyncCopies, Combined, ShrinkHost
from advisor.trace.model import Trace
from advisor.trace.names import name_in

from ._ops import arg_dims, launched_below, op_names, outermost, parent_has, runtime_op
from ._per_step import ms, n_steps, per_step_words, rows_in_steps

ID = "host-tensor-creation"
register(
    "host_tensor_creation.max_gap_ms",
    2.0,
    "a copy starting within this many ms after a creation op can be its copy",
)
register(
    "host_tensor_creation.min_step_frac",
    0.5,
    "report only when the pattern shows in at least this share of the steps",
)

CREATE_OPS = frozenset(
    f"aten::{n}"
    for n in (
        "randn",
        "rand",
        "randint",
        "randperm",
        "zeros",
        "ones",
        "full",
        "arange",
        "linspace",
        "eye",
        "tensor",
        "from_numpy",
        "lift_fresh",
        "scalar_tensor",
    )
)
COPY_OPS = frozenset({"aten::to", "aten::_to_copy", "aten::copy_", "aten::cuda"})
# tensors made from Python/NumPy data: staged through pinned memory they are already fixed
FROM_DATA = frozenset({"aten::tensor", "aten::from_numpy", "aten::lift_fresh"})
register("host_tensor_creation.min_ms", 0.01, "report from this saving per step (ms)")
RECOMMENDATION = (
    "Create these tensors directly on the GPU with device=..., or build them from "
    "GPU tensors. For data that really comes from Python or NumPy, use "
    "torch.as_tensor/torch.from_numpy into a pinned buffer and copy with "
    "non_blocking=True; hoist constants out of the loop."
)
SNIPPET = (
    "# before: made on the host, then copied every step\n"
    "noise = torch.randn(batch, dim).to(device)\n"
    "# after: made on the GPU\n"
    "noise = torch.randn(batch, dim, device=device)\n"
    "idx = torch.arange(n, device=device)\n"
    "# data from NumPy: no extra host copy, pinned, asynchronous\n"
    "x = torch.from_numpy(arr).pin_memory().to(device, non_blocking=True)"
)
LAUNCH_NS = 5_000
DEVICE_WRITE_GBPS = 500.0
MAX_BACK = 8


def _created_shapes(trace: Trace, roots: np.ndarray) -> list[tuple | None]:
    """The shape each creation op made: its own first Input Dims (lift_fresh) or the first
    non-empty first Input Dims among the ops it ran (normal_, uniform_, fill_, zero_, ...)."""
    ops = trace.cpu_ops
    dims = ops["input_dims"].to_numpy()
    tid = ops["tid"].to_numpy()
    ts = ops["ts_ns"].to_numpy()
    end = ops["end_ns"].to_numpy()
    by_tid: dict[int, np.ndarray] = {}
    out: list[tuple | None] = []
    for r in roots:
        t = int(tid[r])
        if t not in by_tid:
            rows = np.flatnonzero(tid == t)
            by_tid[t] = rows[np.argsort(ts[rows], kind="stable")]
        rows = by_tid[t]
        lo = int(np.searchsorted(ts[rows], ts[r], side="left"))
        hi = int(np.searchsorted(ts[rows], end[r], side="right"))
        shape = None
        for i in rows[lo:hi]:
            if end[i] > end[r]:
                continue
            d = arg_dims(dims[i], 0)
            if d and d != [0]:
                shape = tuple(d)
                break
        out.append(shape)
    return out


def _matches(trace: Trace, ctx: Context) -> pd.DataFrame:
    ops = trace.cpu_ops
    cols = ["root", "copy_op", "mem"]
    m = rows_in_steps(trace.memcpy, trace)
    m = m[(m["kind"].astype(str) == "HtoD") & (m["launch_idx"] >= 0)]
    if not len(m) or not len(ops):
        return pd.DataFrame(columns=cols)
    names = op_names(trace)
    parent = ops["parent_idx"].to_numpy()
    is_create = name_in(ops["name"], CREATE_OPS)
    root_mask = is_create & ~parent_has(is_create, parent)
    root_mask &= ~launched_below(trace)  # made on the host: launched no GPU work
    roots = np.flatnonzero(root_mask)
    if not len(roots):
        return pd.DataFrame(columns=cols)
    shapes = _created_shapes(trace, roots)
    r_tid = ops["tid"].to_numpy()[roots]
    r_end = ops["end_ns"].to_numpy()[roots]
    r_step = ops["step"].to_numpy()[roots]
    order = np.lexsort((r_end, r_tid))
    op_of = runtime_op(trace)
    launches = _kernel_launch_times(trace)
    gap_ns = ctx.t("host_tensor_creation.max_gap_ms") * 1e6
    rows, used = [], set()
    for mi, li in zip(m.index, m["launch_idx"].to_numpy(), strict=True):
        o = int(op_of[li])
        if o < 0:
            continue
        c = outermost(trace, o, COPY_OPS)
        src = arg_dims(ops["input_dims"].iat[c], 0)
        pinned = str(m.at[mi, "src"]) == "Pinned"
        c_ts, c_tid, c_step = (
            int(ops["ts_ns"].iat[c]),
            int(ops["tid"].iat[c]),
            int(ops["step"].iat[c]),
        )
        # creation roots on this thread that ended before the copy op began, latest first
        sel = order[r_tid[order] == c_tid]
        k = int(np.searchsorted(r_end[sel], c_ts, side="right"))
        for j in sel[max(0, k - MAX_BACK) : k][::-1]:
            if c_ts - r_end[j] > gap_ns or r_step[j] != c_step:
                break
            if int(roots[j]) in used or (pinned and names[roots[j]] in FROM_DATA):
                continue
            lt = launches.get(c_tid)
            if lt is not None and np.searchsorted(lt, c_ts) > np.searchsorted(lt, r_end[j]):
                break  # GPU work launched in between: the tensor was used before the copy
            shape = shapes[j]
            if src is not None and shape is not None:
                ok = tuple(src) == shape
            else:
                a, b = ctx.locator.for_op(int(roots[j])), ctx.locator.for_op(c)
                ok = a is not None and b is not None and (a.file, a.line) == (b.file, b.line)
            if ok:
                used.add(int(roots[j]))
                rows.append((int(roots[j]), c, mi))
                break
    return pd.DataFrame(rows, columns=cols)


def _kernel_launch_times(trace: Trace) -> dict[int, np.ndarray]:
    """Sorted start times of kernel launches (not copies, waits or bookkeeping) per thread."""
    rt = trace.runtime
    if not len(rt):
        return {}
    names = rt["name"].astype(str)
    other = (
        names.str.match(COPY_CALL_RE)
        | names.str.match(SYNC_CALL_RE)
        | names.isin(list(BOOKKEEPING_CALLS))
        | names.str.contains("Malloc|Free|Host")
    )
    k = rt[~other.to_numpy()]
    return {int(t): np.sort(g["ts_ns"].to_numpy()) for t, g in k.groupby("tid")}


class _Facts(NamedTuple):
    """The creation ops matched to their copies (``mt``: root, copy_op, mem, and per match the
    closed-form saving ``save_ns`` and the creation op's host time ``create_ns``)."""

    mt: pd.DataFrame
    steps: int
    seen: int  # steps the pattern shows in
    saving_ms: float  # the closed-form saving per step


@detector(
    ID, "Tensors created on the CPU, then copied to the GPU", needs=("cpu_ops",), gpu_only=True
)
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    f = _measure(trace, ctx)
    if f is None:
        return []
    fields, how = _value(trace, ctx, f)
    return [
        Draft(
            id=ID,
            title="Tensors created on the CPU, then copied to the GPU",
            **fields,
            confidence="medium" if trace.has_shapes else "low",
            summary=_summary(trace, f),
            recommendation=RECOMMENDATION,
            snippet=SNIPPET,
            evidence=_evidence(trace, f.mt),
            locations=aggregate(ctx.locator.for_ops(f.mt["root"])),
            assumptions=(
                how,
                "a copy belongs to a creation op when it follows on the same thread in the same "
                "step, with no kernel launched in between, within "
                f"{ctx.t('host_tensor_creation.max_gap_ms'):g} ms and has the same shape "
                "(or the same source line when shapes are missing)",
                f"seen in {f.seen} of {f.steps} step(s); divided over {f.steps} step(s)",
            ),
        )
    ]


def _measure(trace: Trace, ctx: Context) -> _Facts | None:
    """The matches and their closed-form saving; None when the pattern shows in too few steps
    or saves less than ``host_tensor_creation.min_ms`` per step."""
    if not trace.has_shapes and not trace.has_stack:
        raise Skip(
            "needs record_shapes=True or with_stack=True to tie a copy to the op "
            "that made the tensor"
        )
    mt = _matches(trace, ctx)
    if not len(mt):
        return None
    steps = n_steps(trace)
    seen = len(set(trace.cpu_ops["step"].to_numpy()[mt["root"].to_numpy()].tolist()))
    need = (
        1
        if trace.meta.synthetic_steps
        else math.ceil(ctx.t("host_tensor_creation.min_step_frac") * steps)
    )
    if seen < max(1, need):
        return None
    mt = _closed_form(trace, mt)
    saving_ms = float(mt["save_ns"].sum()) / 1e6 / steps
    if saving_ms < ctx.t("host_tensor_creation.min_ms"):
        return None
    return _Facts(mt, steps, seen, saving_ms)


def _closed_form(trace: Trace, mt: pd.DataFrame) -> pd.DataFrame:
    """``mt`` with per match ``save_ns`` (the copy's GPU time plus the GPU idle time while the
    host ran the creation op and the copy call, minus making it on the device) and
    ``create_ns`` (the creation op's host time)."""
    ops, mem = trace.cpu_ops, trace.memcpy
    busy = main_busy(trace)
    save, created_ns = [], []
    for r, c, mi in mt.itertuples(index=False):
        starts = np.array([ops["ts_ns"].iat[r], ops["ts_ns"].iat[c]])
        ends = np.array([ops["end_ns"].iat[r], ops["end_ns"].iat[c]])
        _, idle = busy.idle_in_spans(starts, ends)
        nbytes = float(mem.at[mi, "bytes"])
        device_make = LAUNCH_NS + nbytes / DEVICE_WRITE_GBPS
        save.append(max(0.0, int(mem.at[mi, "dur_ns"]) + idle - device_make))
        created_ns.append(int(ops["dur_ns"].iat[r]))
    return mt.assign(save_ns=save, create_ns=created_ns)


def _value(trace: Trace, ctx: Context, f: _Facts) -> tuple[dict[str, Any], str]:
    """The saving fields and how they were found: the creation ops, copy calls and copies
    removed, replayed; without a replayable step, the closed-form saving."""
    ops, mt = trace.cpu_ops, f.mt
    rr = np.concatenate([mt["root"].to_numpy(), mt["copy_op"].to_numpy()]).astype(np.int64)
    rep = ctx.whatif(
        Combined(
            [
                ShrinkHost(
                    ops["ts_ns"].to_numpy()[rr],
                    ops["end_ns"].to_numpy()[rr],
                    ops["tid"].to_numpy()[rr],
                    keep=0.0,
                ),
                AsyncCopies(memcpy=mt["mem"].to_numpy(), speedup=float("inf")),
            ],
            label="tensors made on the GPU",
        )
    )
    if rep.replayed:
        return rep.draft_fields(), (
            "Replayed without the creation ops, the copy calls and the copies (making the "
            "tensor on the GPU, about 5 us, is not counted). " + rep.assumption
        )
    return {"est_savings_ms": f.saving_ms}, (
        "saving = copy time on the GPU + GPU idle time while the host ran the creation "
        "op and the copy call - (5 us launch + bytes / 500 GB/s to create it on the GPU)"
    )


def _summary(trace: Trace, f: _Facts) -> str:
    ops, mem, mt, steps = trace.cpu_ops, trace.memcpy, f.mt, f.steps
    per_step = len(mt) / steps
    host_ms = float(mt["create_ns"].sum()) / 1e6 / steps
    copy_ms = float(mem.loc[mt["mem"], "dur_ns"].sum()) / 1e6 / steps
    top = pd.Series([_display(str(ops["name"].iat[r])) for r in mt["root"]])
    kinds = ", ".join(f"{n} x{c}" for n, c in top.value_counts().head(3).items())
    return (
        f"{per_step:.0f} tensor{'s' if round(per_step) != 1 else ''} {per_step_words(trace)} "
        f"made on the CPU ({kinds}; {host_ms:.2f} ms on the host) and then copied to the GPU "
        f"({copy_ms:.2f} ms of copies)."
    )


def _display(op: str) -> str:
    """The user-facing factory: aten::lift_fresh is what torch.tensor(data) records."""
    n = op.removeprefix("aten::")
    return "tensor" if n == "lift_fresh" else n


def _evidence(trace: Trace, mt: pd.DataFrame) -> tuple[Evidence, ...]:
    ops, mem = trace.cpu_ops, trace.memcpy
    labels = []
    for r, c, mi in zip(mt["root"], mt["copy_op"], mt["mem"], strict=True):
        d = arg_dims(ops["input_dims"].iat[c], 0)
        shape = f" {list(d)}" if d else ""
        labels.append(f"{ops['name'].iat[r]}{shape} on the host, then {mem.at[mi, 'name']}")
    mt = mt.assign(label=labels, total=mt["create_ns"] + mem.loc[mt["mem"], "dur_ns"].to_numpy())
    rows = []
    for label, g in mt.groupby("label", sort=False):
        first = int(ops["ts_ns"].iat[int(g["root"].iloc[0])])
        rows.append(
            (
                int(g["save_ns"].sum()),
                Evidence(str(label), len(g), ms(g["total"].sum()), trace.to_trace_us(first)),
            )
        )
    rows.sort(key=lambda r: -r[0])
    return tuple(e for _, e in rows[:5])
