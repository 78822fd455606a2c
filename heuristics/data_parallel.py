"""nn.DataParallel: one process drives every GPU, re-copying the model each step.

**What it detects.** ``torch.nn.DataParallel`` in use: its autograd Functions show in the trace
as operators named ``Broadcast`` (the parameters copied to every GPU by ``replicate``),
``Scatter`` (the input split across GPUs) and ``Gather`` (the outputs collected on GPU 0), with
``BroadcastBackward``/``ReduceAddCoalesced`` in backward, or as Python frames in
``torch/nn/parallel/data_parallel.py``; run.json ``modules.data_parallel`` when
``advisor profile`` saw the wrapper. (``GatherBackward0``, with a digit, is ``torch.gather``'s
backward and is not counted.)

**Why it costs time.** Every step DataParallel broadcasts all parameters from GPU 0, scatters
the batch, runs the replicas in Python threads that contend for the GIL, gathers the outputs
on GPU 0 (which also computes the loss and reduces every gradient: GPU 0 becomes the
bottleneck). DistributedDataParallel runs one process per GPU, keeps a model copy per process
and overlaps its bucketed gradient all-reduce with backward; PyTorch recommends it even on a
single node.

**How the saving is estimated.** The fix is replayed (see docs/savings.md): the steady steps'
dependency graph is replayed without the host time of the ``Broadcast`` and ``Gather`` ranges
and the GPU copies and kernels they launch (DDP does neither), and with (n-1)/n of each
``Scatter`` range's host time removed (each DDP process still copies its own share of the
batch); the saving is the measured step minus the replayed step. What the step graph cannot
express is not modelled and not counted (so the real gain is usually larger): the gradient
reduction onto GPU 0, GIL contention among replica threads, GPU 0's extra load, and DDP's
own all-reduce. When nothing can be replayed (no GPU activity the replay can place) the host
time of those ranges is the saving.

**How to fix.** ``DistributedDataParallel`` with one process per GPU
(``torchrun --nproc_per_node``).

**Known false positives.** A user's own autograd Functions named exactly ``Broadcast`` and
``Scatter``/``Gather`` (two of the three names are required without other evidence).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from advisor.derive.locate import aggregate
from advisor.detect.draft import Draft
from advisor.detect.registry import Context, Skip, detector
from advisor.findings import Evidence, Location
from advisor.replay.fixes import Combined, ScaleGpu, ShrinkHost
from advisor.trace.model import Trace
from advisor.trace.names import name_in

from ._ops import gpu_rows_from, inherit, op_names, parent_has
from ._per_step import ms, n_steps

ID = "data-parallel"
TITLE = "nn.DataParallel instead of DistributedDataParallel"

FORWARD = ("Broadcast", "Scatter", "Gather")
BACKWARD = (
    "BroadcastBackward",
    "ScatterBackward",
    "GatherBackward",
    "ReduceAddCoalesced",
    "ReduceAddCoalescedBackward",
)
DP_FILE = "torch/nn/parallel/data_parallel.py"

SNIPPET = """# torchrun --nproc_per_node=NUM_GPUS train.py
import os, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("nccl")
rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(rank)
model = DDP(model.to(rank), device_ids=[rank])      # was: nn.DataParallel(model)
sampler = torch.utils.data.distributed.DistributedSampler(dataset)
loader = torch.utils.data.DataLoader(dataset, batch_size=per_gpu_batch, sampler=sampler)
"""
RECOMMENDATION = (
    "Replace nn.DataParallel with DistributedDataParallel, one process per GPU (torchrun), even "
    "on a single machine: no per-step model broadcast, scatter or gather, no GIL contention, "
    "and the gradient all-reduce overlaps backward."
)


def _run_flag(ctx: Context) -> int:
    return int(ctx.live.modules.data_parallel is True)


def _run_sites(ctx: Context) -> list[Location]:
    """Where run.json saw the model wrapped (``modules.data_parallel_sites``)."""
    return [
        Location(s.file, s.line, s.function or "<module>")
        for s in ctx.live.modules.data_parallel_sites
        if isinstance(s.file, str) and isinstance(s.line, int)
    ]


def _dp_frames(trace: Trace) -> int:
    py = trace.python
    if not len(py):
        return 0
    f = py["file"].astype(str).str.replace("\\", "/", regex=False)
    return int(f.str.endswith(DP_FILE).sum())


@dataclass(frozen=True)
class _Seen:
    """What the trace and run.json show of nn.DataParallel."""

    flagged: int  # run.json says the model is wrapped
    frames: int  # Python frames in DataParallel's file
    names: np.ndarray  # cpu_ops names
    col: Any  # the name column the masks were read from
    fwd: np.ndarray  # Broadcast/Scatter/Gather ops
    bwd: np.ndarray  # their backward nodes
    kinds: set[str]  # the forward kinds seen

    @property
    def seen(self) -> bool:
        return len(self.kinds) >= 2 or (
            len(self.kinds) >= 1 and (self.frames > 0 or self.flagged > 0)
        )


@detector(ID, TITLE)
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    s = _seen(trace, ctx)
    if not s.seen or "Broadcast" not in s.kinds:  # no replication: one device, nothing to measure
        return _unmeasured(trace, ctx, s)
    rows = _ranges(trace, s.fwd)
    n_dev = max(2, int(trace.kernels["device"].nunique())) if len(trace.kernels) else 2
    scatter = s.names[rows] == "Scatter"
    # DDP still copies each process's share of the batch: Scatter saves (n-1)/n of its time
    weight = np.where(scatter, (n_dev - 1) / n_dev, 1.0)
    dur = trace.cpu_ops["dur_ns"].to_numpy()[rows]
    per_step_ms = float((dur * weight).sum()) / 1e6 / n_steps(trace)
    fields, replayed_ms, how = _value(trace, ctx, rows, scatter, n_dev, per_step_ms)
    locs = (*_run_sites(ctx), *aggregate(ctx.locator.for_op(int(r)) for r in rows[:200]))[:5]
    return [
        Draft(
            id=ID,
            title=TITLE,
            **fields,
            confidence="high" if (s.flagged or s.frames) else "medium",
            summary=_summary(trace, s.names[rows], per_step_ms, replayed_ms),
            recommendation=RECOMMENDATION,
            snippet=SNIPPET,
            evidence=_evidence(trace, s, rows)[:5],
            locations=locs,
            assumptions=(
                how,
                "Not counted: the gradient reduction onto GPU 0, GIL contention between replica "
                "threads and GPU 0's extra load, so the real gain is usually larger.",
            ),
        )
    ]


def _seen(trace: Trace, ctx: Context) -> _Seen:
    flagged = _run_flag(ctx)
    if not len(trace.cpu_ops) and not flagged:
        raise Skip("no CPU operator events in this trace and no run.json module facts")
    names = op_names(trace) if len(trace.cpu_ops) else np.zeros(0, dtype=object)
    col = trace.cpu_ops["name"] if len(trace.cpu_ops) else names
    fwd = name_in(col, FORWARD)
    bwd = name_in(
        col, [*BACKWARD, *(f"autograd::engine::evaluate_function: {b}" for b in BACKWARD)]
    )
    return _Seen(flagged, _dp_frames(trace), names, col, fwd, bwd, set(names[fwd].tolist()))


def _unmeasured(trace: Trace, ctx: Context, s: _Seen) -> list[Draft]:
    """DataParallel seen with no replication to measure: information; not seen: nothing."""
    if not (s.flagged or s.frames or s.seen):
        return []
    where = (
        "run.json"
        if s.flagged
        else f"Python frames in {DP_FILE}"
        if s.frames
        else f"{'/'.join(sorted(s.kinds))} operators in the trace"
    )
    count = max(s.flagged, s.frames, int(s.fwd.sum()))
    return [_latent(trace, where, count, _run_sites(ctx))]


def _ranges(trace: Trace, fwd: np.ndarray) -> np.ndarray:
    """The outermost DataParallel ranges (a Scatter nested in another is counted once), in the
    steps when some are."""
    ops = trace.cpu_ops
    parent = ops["parent_idx"].to_numpy()
    under_fwd = inherit(trace, fwd)
    par_fwd = parent_has(under_fwd, parent)
    rows = np.flatnonzero(fwd & ~par_fwd & (ops["step"].to_numpy() >= 0))
    if not len(rows):
        rows = np.flatnonzero(fwd & ~par_fwd)
    return rows


def _value(
    trace: Trace,
    ctx: Context,
    rows: np.ndarray,
    scatter: np.ndarray,
    n_dev: int,
    per_step_ms: float,
) -> tuple[dict[str, Any], float | None, str]:
    """DDP replayed instead (:func:`_fix`): the fields, the replayed saving (None without a
    replay) and how; without a replay the host time DDP does not spend."""
    fields: dict[str, Any] = {"est_savings_ms": round(per_step_ms, 3)}
    how = (
        "Saving = host time of the Broadcast and Gather ranges (DDP does neither) plus "
        f"{n_dev - 1}/{n_dev} of the Scatter range (each DDP process still copies its own "
        f"share of the batch; {n_dev} GPUs), divided by the {n_steps(trace)} step(s) in the "
        "trace."
    )
    if not trace.has_gpu:
        return fields, None, how
    rep = ctx.whatif(_fix(trace, rows, scatter, n_dev))
    if not rep.replayed:
        return fields, None, how
    how = (
        "The Broadcast and Gather ranges' host time and the GPU work they launch are "
        f"removed (DDP does neither), and {n_dev - 1}/{n_dev} of each Scatter range's "
        f"host time (each DDP process still copies its own share; {n_dev} GPUs). " + rep.assumption
    )
    return rep.draft_fields(), rep.ms, how


def _summary(
    trace: Trace, range_names: np.ndarray, per_step_ms: float, replayed_ms: float | None
) -> str:
    counts = pd.Series(range_names).value_counts()
    calls = int(counts.max()) if len(counts) else 0
    summary = (
        f"nn.DataParallel replicates the model, scatters the batch and gathers outputs "
        f"every step ({calls} call(s) in {n_steps(trace)} step(s)): {per_step_ms:.3f} ms "
        f"per step of host time that DistributedDataParallel does not spend."
    )
    if replayed_ms is not None:
        summary += f" Replayed without it, the step is {replayed_ms:.3f} ms shorter."
    return summary


def _evidence(trace: Trace, s: _Seen, rows: np.ndarray) -> tuple[Evidence, ...]:
    """Each forward kind's ranges, backward's gradient reduction, run.json's flag."""
    ops = trace.cpu_ops
    dur = ops["dur_ns"].to_numpy()[rows]
    ts = ops["ts_ns"].to_numpy()[rows]
    evidence = []
    for name in FORWARD:
        m = s.names[rows] == name
        if m.any():
            what = {
                "Broadcast": "Broadcast (replicate: parameters copied to every GPU)",
                "Scatter": "Scatter (batch split across GPUs)",
                "Gather": "Gather (outputs collected on GPU 0)",
            }[name]
            evidence.append(
                Evidence(what, int(m.sum()), ms(dur[m].sum()), trace.to_trace_us(int(ts[m].min())))
            )
    if s.bwd.any():
        parent = ops["parent_idx"].to_numpy()
        own = name_in(s.col, BACKWARD)
        under = inherit(trace, own)
        b = ops[own & ~parent_has(under, parent)]
        evidence.append(
            Evidence(
                "gradient reduction onto GPU 0 in backward (not counted)",
                len(b),
                ms(b["dur_ns"].sum()),
            )
        )
    if s.flagged:
        evidence.append(Evidence("run.json: nn.DataParallel wraps the model", s.flagged, 0.0))
    return tuple(evidence)


def _fix(trace: Trace, rows: np.ndarray, scatter: np.ndarray, n_dev: int) -> Combined:
    """DDP instead: no Broadcast/Gather (host ranges and the GPU work under them), Scatter's
    host time down to one device's share."""
    ops = trace.cpu_ops
    ts, end, tid = (ops[c].to_numpy()[rows] for c in ("ts_ns", "end_ns", "tid"))
    under = np.zeros(len(ops), dtype=bool)
    under[rows[~scatter]] = True
    under = inherit(trace, under)
    fixes = [
        ShrinkHost(ts[~scatter], end[~scatter], tid[~scatter], keep=0.0),
        ShrinkHost(ts[scatter], end[scatter], tid[scatter], keep=1.0 / n_dev),
        ScaleGpu(
            kernels=np.flatnonzero(gpu_rows_from(trace, trace.kernels, under)),
            memcpy=np.flatnonzero(gpu_rows_from(trace, trace.memcpy, under)),
            speedup=float("inf"),
        ),
    ]
    return Combined(fixes, label="DistributedDataParallel")


def _latent(trace: Trace, where: str, count: int, sites: list[Location]) -> Draft:
    gpu = (
        " over a single device (it only scatters the input)"
        if trace.has_gpu
        else " (on a machine without GPUs it just calls the module)"
    )
    return Draft(
        id=ID,
        title=TITLE,
        est_savings_ms=0.0,
        confidence="medium",
        latent=True,
        summary=(
            f"The model is wrapped in nn.DataParallel ({where}){gpu}; the trace shows no "
            f"replication to measure, but on several GPUs every step pays for replicate, "
            f"scatter and gather: use DistributedDataParallel there."
        ),
        recommendation=RECOMMENDATION,
        snippet=SNIPPET,
        evidence=(Evidence(f"nn.DataParallel seen in {where}", count, 0.0),),
        locations=tuple(sites[:5]),
        assumptions=("No measured cost in this trace: reported as information.",),
    )
