"""Unbucketed collectives: one all-reduce (or all-gather, reduce-scatter) per parameter.

**What it detects.** Steps that issue many collectives of one kind (by default 100 or more
per step, ``unbucketed_collectives.min_per_step``) on the GPU that communicates most:
typically one ``c10d::allreduce_`` per gradient, where bucketing or coalescing would send a
few large messages. Where the calls come from decides the fix, so the launching op chain is
read: a compiled region (``CompiledFunction``/``CompiledFunctionBackward``), an FSDP unit
(its ranges, or run.json's ``modules.fully_sharded_data_parallel``), a DDP reducer, or plain
``torch.distributed`` calls.

**Why it costs time.** Every collective pays a fixed price whatever its size: a host call
through the process group (tens to hundreds of microseconds), a kernel launch and NCCL's
start-up latency, and a rendezvous with every other rank. Hundreds of small collectives per
step serialize on the communication stream, and while the host issues them one by one the
GPU idles between them; a slow host on one rank makes every other rank wait inside each one.

**How the saving is estimated.** From the trace: the host time of the collective calls per
step (the outermost ``c10d::``/``nccl:`` op of each launch), the window from the first call
to the end of the last collective kernel, and the GPU idle time inside that window. With
bucketing, about one call per ten parameters remains (DDP's 25 MB buckets usually hold far
more, so this errs low): the steps are replayed (``advisor/replay``) with the host time of the
collective calls cut to that share, so the saving counts only where the host issuing them
held the step back; the range replays a quarter of the calls removed (low) and all but one
(high). Without a replayable step, the host time saved capped at the GPU idle time in the
window is shown instead. The collectives' own kernels are left as they are (message sizes are
not in most traces, and the waiting inside them is the other ranks' host, which coalescing on
every rank shrinks too: the saving errs low).

**How to fix.** The advice follows the source. Collectives traced into a compiled backward:
keep DDP outside ``torch.compile`` (``torch.compile(DDP(model))``), whose reducer buckets
gradients and ``torch._dynamo.config.optimize_ddp`` splits graphs at bucket boundaries (with
compiled autograd, ``optimize_ddp = "python_reducer"``), instead of all-reducing each
gradient inside the compiled function. FSDP: a coarser wrap policy (one unit per transformer
block, ``ModuleWrapPolicy({Block})`` or ``fully_shard`` per block, never per ``nn.Linear``).
DDP reducer: a larger ``bucket_cap_mb``, one DDP wrapper around the whole model (not one per
submodule). Plain ``torch.distributed``: flatten the tensors into one buffer per bucket before
``all_reduce``, or wrap the model in ``DistributedDataParallel``.

**Known false positives.** A model whose gradients fill more than 100 full DDP buckets (about
2.5 GB of gradients at 25 MB) issues that many bucketed collectives legitimately; message
sizes would tell them apart, but most traces do not record them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from advisor.arrays import unique_ints
from advisor.derive.comm import collective_name, has_ddp_reducer
from advisor.derive.locate import aggregate
from advisor.derive.timeline import union
from advisor.detect.draft import Draft
from advisor.detect.registry import Context, Skip, detector
from advisor.detect.thresholds import register
from advisor.findings import Evidence
from advisor.replay.fixes import ShrinkHost
from advisor.trace.model import Trace
from advisor.trace.names import name_flags

from ._comm_advice import bucketing_advice, collective_source
from ._ops import chain_match, op_names
from ._per_step import fmt_ms, n_steps

ID = "unbucketed-collectives"
TITLE = "Many small collectives per step instead of a few buckets"

# unbucketed_collectives.min_per_step is declared in _comm_advice (comm-overlap reads it too)
register(
    "unbucketed_collectives.params_per_bucket",
    10.0,
    "collectives assumed to merge into one bucket when estimating the saving",
)
register("unbucketed_collectives.min_ms", 0.1, "report from this saving per step (ms)")

_CALL_PREFIXES = ("c10d::", "nccl:", "rccl:", "record_param_comms")


def _is_call(name: str) -> bool:
    return name.startswith(_CALL_PREFIXES)


def collective_calls(trace: Trace) -> pd.DataFrame:
    """Communication kernels inside steps on the device that communicates most, each with its
    collective kind and the outermost collective op that launched it (-1 when unknown):
    columns collective, step, ts_ns, end_ns, device, op."""
    k = trace.kernels
    k = k[k["is_comm"].to_numpy(dtype=bool) & (k["step"] >= 0).to_numpy()]
    if not len(k):
        return pd.DataFrame(columns=["collective", "step", "ts_ns", "end_ns", "device", "op"])
    dev = int(k["device"].value_counts().idxmax())
    k = k[k["device"] == dev]
    li = k["launch_idx"].to_numpy()
    op = np.full(len(k), -1, dtype=np.int64)
    if len(trace.runtime) and len(trace.cpu_ops):
        launcher = np.where(li >= 0, trace.runtime["op_idx"].to_numpy()[np.clip(li, 0, None)], -1)
        hit = name_flags(trace.cpu_ops["name"], _is_call)
        op = chain_match(trace, launcher, hit, outermost=True)
    names = k["name"].astype(str)
    return pd.DataFrame(
        {
            "collective": [collective_name(x) for x in names],
            "step": k["step"].to_numpy(),
            "ts_ns": k["ts_ns"].to_numpy(),
            "end_ns": k["end_ns"].to_numpy(),
            "device": dev,
            "op": op,
        }
    )


def _window(trace: Trace, calls: pd.DataFrame, device: int) -> tuple[float, float]:
    """Per step (mean): the window from the first collective call (host) or kernel to the end of
    the last collective kernel, and the GPU idle time inside it (ms)."""
    ops = trace.cpu_ops
    act = trace.gpu_activity()
    act = act[act["device"] == device]
    s_all, e_all = act["ts_ns"].to_numpy(), act["end_ns"].to_numpy()
    spans, idles = [], []
    for _, g in calls.groupby("step", sort=True):
        lo = int(g["ts_ns"].min())
        o = g["op"].to_numpy()
        if (o >= 0).any():
            lo = min(lo, int(ops["ts_ns"].to_numpy()[o[o >= 0]].min()))
        hi = int(g["end_ns"].max())
        m = (e_all > lo) & (s_all < hi)
        bs, be = union(np.clip(s_all[m], lo, hi), np.clip(e_all[m], lo, hi))
        spans.append(hi - lo)
        idles.append(hi - lo - int(np.sum(be - bs)))
    return float(np.mean(spans)) / 1e6, float(np.mean(idles)) / 1e6


@dataclass(frozen=True)
class _Calls:
    """The most frequent collective's kernels in the steps, and what issuing them costs."""

    mine: pd.DataFrame  # collective_calls' rows of that kind
    kind: str
    steps: int
    per_step: float
    uniq: np.ndarray  # the collective ops that launched them (cpu_ops rows)
    host_ms: float  # per step: those ops' host time
    kernel_ms: float  # ...the kernels' time
    window_ms: float  # ...from the first call to the last kernel's end
    idle_ms: float  # ...GPU idle inside that window


class _Bucketing(NamedTuple):
    per_bucket: float
    left: int  # calls per step once bucketed
    keep: float  # share of the host time that stays
    fields: dict[str, Any]  # the draft's saving
    how: str


@detector(ID, TITLE, needs=("kernels",), gpu_only=True)
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    found = _measure(trace, ctx)
    if found is None:
        return []
    value = _value(trace, ctx, found)
    if value.fields["est_savings_ms"] < ctx.t("unbucketed_collectives.min_ms"):
        return []
    ddp = has_ddp_reducer(trace) or bool(ctx.live.modules.distributed_data_parallel)
    fsdp = bool(ctx.live.modules.fully_sharded_data_parallel)
    source, via = collective_source(trace, found.uniq, ddp, fsdp)
    advice = bucketing_advice(source, found.kind)
    opn = op_names(trace)
    call = pd.Series(opn[found.uniq]).value_counts().index[0] if len(found.uniq) else found.kind
    return [
        Draft(
            id=ID,
            title=TITLE,
            confidence="medium" if source != "ddp" else "low",
            summary=(
                f"{found.per_step:.0f} separate {found.kind} collectives per step ({call}), "
                f"{advice.source_text}: {fmt_ms(found.host_ms)} of host time per step issuing "
                f"them and a {fmt_ms(found.window_ms)} window in which the GPU idles "
                f"{fmt_ms(found.idle_ms)} between collectives. A few buckets would do the same "
                f"work in about {value.left} calls."
            ),
            recommendation=advice.text,
            snippet=advice.snippet,
            evidence=_evidence(trace, found, call, via),
            locations=aggregate(ctx.locator.for_ops(found.uniq[:2000])),
            assumptions=(
                f"Bucketing leaves about one call per {value.per_bucket:g} collectives "
                f"({value.left} per step): their host time keeps {value.keep:.0%} of itself "
                "(range: 75% to one call per step).",
                value.how,
                "Message sizes are not in the trace: the collective kernels are left unchanged.",
                f"Source: {source} (DDP reducer {'present' if ddp else 'absent'}).",
            ),
            **value.fields,
        )
    ]


def _measure(trace: Trace, ctx: Context) -> _Calls | None:
    """The most frequent collective, when it runs at least
    ``unbucketed_collectives.min_per_step`` times per step (else None)."""
    calls = collective_calls(trace)
    if not len(calls):
        raise Skip("no communication kernels (NCCL/RCCL) in this trace")
    steps = n_steps(trace)
    counts = calls["collective"].value_counts()
    kind = str(counts.index[0])
    per_step = float(counts.iloc[0]) / steps
    if per_step < ctx.t("unbucketed_collectives.min_per_step"):
        return None
    mine = calls[calls["collective"] == kind]
    o = mine["op"].to_numpy()
    uniq = unique_ints(o[o >= 0])
    host_ms = float(trace.cpu_ops["dur_ns"].to_numpy()[uniq].sum()) / 1e6 / steps
    kernel_ms = float((mine["end_ns"] - mine["ts_ns"]).sum()) / 1e6 / steps
    window_ms, idle_ms = _window(trace, mine, int(mine["device"].iat[0]))
    return _Calls(mine, kind, steps, per_step, uniq, host_ms, kernel_ms, window_ms, idle_ms)


def _value(trace: Trace, ctx: Context, found: _Calls) -> _Bucketing:
    """The calls' host time cut to one call per bucket, replayed; without a replayable step,
    that host time saved, at most the GPU idle time in the collective window."""
    per_step, uniq = found.per_step, found.uniq
    per_bucket = max(1.0, ctx.t("unbucketed_collectives.params_per_bucket"))
    left = math.ceil(per_step / per_bucket)
    keep = left / per_step
    saving = max(0.0, min(found.host_ms * (1.0 - keep), found.idle_ms))
    ops = trace.cpu_ops
    rep = ctx.whatif(
        ShrinkHost(
            ops["ts_ns"].to_numpy()[uniq],
            ops["end_ns"].to_numpy()[uniq],
            ops["tid"].to_numpy()[uniq],
            keep=keep,
            low=0.75,
            high=1.0 / per_step,
            label="bucketed collectives",
        )
    )
    if rep.replayed:
        return _Bucketing(per_bucket, left, keep, rep.draft_fields(), rep.assumption)
    fields: dict[str, Any] = {
        "est_savings_ms": round(saving, 3),
        "est_savings_range_ms": (round(saving / 2, 3), round(saving, 3)),
    }
    how = (
        f"Without a replayable step: the host time saved, capped at the GPU idle time inside "
        f"the collective window ({fmt_ms(found.idle_ms)}); low end: half of it."
    )
    return _Bucketing(per_bucket, left, keep, fields, how)


def _evidence(trace: Trace, found: _Calls, call: str, via: str) -> tuple[Evidence, ...]:
    kind, steps, mine = found.kind, found.steps, found.mine
    evidence = [
        Evidence(
            f"{call} -> {kind}: {found.per_step:.0f} per step, {fmt_ms(found.host_ms)} of host "
            f"calls and {fmt_ms(found.kernel_ms)} of kernels per step",
            int(len(mine)),
            round(found.host_ms * steps, 3),
            trace.to_trace_us(int(mine.iloc[0]["ts_ns"])),
        ),
        Evidence(
            f"window from the first call to the last {kind} end: {fmt_ms(found.window_ms)} per "
            f"step, GPU idle {fmt_ms(found.idle_ms)} of it",
            steps,
            round(found.idle_ms * steps, 3),
        ),
    ]
    if via:
        o = mine["op"].to_numpy()
        evidence.append(Evidence(f"launched from {via}", int((o >= 0).sum()), 0.0))
    return tuple(evidence)
