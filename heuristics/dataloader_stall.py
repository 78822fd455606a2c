"""DataLoader stalls: the training loop waits for the next batch.

**What it detects.** Time per step spent in ``enumerate(DataLoader)#...__next__`` (the range
torch.profiler records around each batch fetch). ``_SingleProcessDataLoaderIter`` means
``num_workers=0``: every batch is loaded, transformed and collated in the training process
while the GPU waits. ``_MultiProcessingDataLoaderIter`` with long waits means the workers cannot
keep up. With ``run.json`` (``advisor profile``) the DataLoader's settings and source line are
named.

**Why it costs time.** Data loading in the main process is serial with the step: the GPU idles
while the host reads files, decodes and augments. Background workers prepare batches while the
current step runs, so the fetch in the loop only takes a queue pop. Peers flag 5% of the step
(moderate) and 20% (high).

**How the saving is estimated.** With ``W`` recommended workers the remaining wait per step
is ``max(0, B/W - R)``, where ``B`` is the time to produce one batch (the ``__next__`` time with
``num_workers=0``) and ``R`` the rest of the step. On GPU traces the steady steps are replayed
(see docs/savings.md) with the ``__next__`` ranges shrunk to that remaining wait: the GPU work
queued before still has to run, so the saving is what the step really loses, not the time
removed from the host. On CPU-only traces: the *exposed* time minus the remaining wait.

**How to fix.** ``DataLoader(..., num_workers=N, pin_memory=True, persistent_workers=True)``:
start with 4 workers per GPU, bounded by the CPU cores; raise ``prefetch_factor`` when batches
vary in cost; make ``__getitem__`` cheaper (decode once, cache, move augmentation to the GPU).

**Known false positives.** The first batches of an epoch (worker start-up) and steps right
after an epoch boundary take longer; profile a steady-state window. On machines with few CPU
cores, workers compete with the training process.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from advisor.derive.dataloader import SINGLE, WORKERS_PER_GPU, fetches, recommended_workers
from advisor.derive.locate import aggregate
from advisor.derive.timeline import activity
from advisor.detect.draft import Draft
from advisor.detect.registry import Context, detector
from advisor.detect.thresholds import register
from advisor.findings import Evidence, Location
from advisor.replay.fixes import ShrinkHost
from advisor.replay.whatif import Saving
from advisor.runinfo import DataLoader
from advisor.trace.model import Trace

from ._per_step import fmt_ms, in_steps, n_steps

ID = "dataloader-stall"
TITLE = "Training loop waits for the DataLoader"
EVAL_TITLE = "Evaluation loop waits for the DataLoader"  # the trace of an evaluation phase

register(
    "dataloader_stall.min_share_pct",
    5.0,
    "report when the exposed DataLoader time is at least this % of the step",
)
register(
    "dataloader_stall.workers_per_gpu",
    float(WORKERS_PER_GPU),
    "num_workers recommended per GPU when run.json has no CPU count",
)


def _cpu_count(ctx: Context) -> int | None:
    run = ctx.live
    for v in (run.cpu_count, run.host.cpu_count):
        if isinstance(v, int) and v > 0:
            return v
    if run.device.type == "cpu":
        v = run.device.count
        if isinstance(v, int) and v > 0:
            return v
    return None


def _loader(ctx: Context, single: bool) -> DataLoader | None:
    """The run.json DataLoader entry of this trace's phase (each row says which phase first
    iterated it: the evaluation window's findings name the test loader, not the training one)
    that matches the iterator kind (the first one if several)."""
    rows = list(ctx.live.dataloaders)
    phase = ctx.live.phase
    rows = [d for d in rows if d.phase == phase] or rows
    match = [d for d in rows if (d.num_workers == 0) == single]
    pick = match or rows
    return pick[0] if pick else None


def _exposed_ns(trace: Trace, dl: Any) -> np.ndarray:
    """Per call: the time inside ``__next__`` with no GPU activity on any device."""
    starts = dl["ts_ns"].to_numpy(dtype=np.int64)
    ends = dl["end_ns"].to_numpy(dtype=np.int64)
    return ends - starts - activity(trace).covered(starts, ends)


class _Facts(NamedTuple):
    """The batch fetches in steps (``dl``), their exposed time per call, the per-step figures
    and the loader's settings (run.json) with the recommended workers."""

    dl: pd.DataFrame
    exposed: np.ndarray
    steps: int
    step_ms: float  # mean
    raw_ms: float  # __next__ per step
    exp_ms: float  # exposed per step
    share: float  # exposed, % of the step
    single: bool  # num_workers=0
    cfg: DataLoader | None
    w0: int  # workers now
    cpus: int | None
    rec_w: int  # workers recommended
    rest_ms: float  # the rest of the step
    batch_ms: float  # time to produce one batch


@detector(ID, TITLE, needs=("cpu_ops",))
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    f = _measure(trace, ctx)
    if f is None:
        return []
    saving, rep = _value(trace, ctx, f)
    rec, snippet = _advice(trace, f.cfg, f.single, f.w0, f.rec_w, f.cpus)
    return [
        Draft(
            id=ID,
            title=EVAL_TITLE if ctx.live.phase == "eval" else TITLE,
            est_savings_ms=saving,
            confidence="high" if f.single else "medium",
            summary=_summary(trace, ctx, f),
            recommendation=rec,
            snippet=snippet,
            evidence=_evidence(trace, f),
            locations=_locations(ctx, f),
            assumptions=_assumptions(f, rep),
            extra={
                "share_pct": round(f.share, 2),
                "raw_ms_per_step": round(f.raw_ms, 3),
            },
            saving=rep,
        )
    ]


def _measure(trace: Trace, ctx: Context) -> _Facts | None:
    """The fetches and their exposed time; None when that is under
    ``dataloader_stall.min_share_pct`` of the step."""
    dl = fetches(trace)
    dl = dl[in_steps(trace, dl["ts_ns"].to_numpy(np.int64))].reset_index(drop=True)
    if not len(dl):
        return None
    steps = n_steps(trace)
    step_ms = float(trace.steps["dur_ns"].sum()) / 1e6 / steps
    if step_ms <= 0:
        return None
    raw_ms = float(dl["dur_ns"].sum()) / 1e6 / steps
    exposed = _exposed_ns(trace, dl)
    exp_ms = float(exposed.sum()) / 1e6 / steps
    share = 100.0 * exp_ms / step_ms
    if share < ctx.t("dataloader_stall.min_share_pct"):
        return None
    single = bool((dl["it"] == SINGLE).mean() >= 0.5)
    cfg = _loader(ctx, single)
    cur = cfg.num_workers if cfg else None
    w0 = 0 if single else (cur or 0)
    cpus = _cpu_count(ctx)
    rec_w = recommended_workers(cpus, w0, int(ctx.t("dataloader_stall.workers_per_gpu")))
    rest_ms = max(0.0, step_ms - raw_ms)
    batch_ms = raw_ms if w0 == 0 else w0 * (raw_ms + rest_ms)
    return _Facts(
        dl,
        exposed,
        steps,
        step_ms,
        raw_ms,
        exp_ms,
        share,
        single,
        cfg,
        w0,
        cpus,
        rec_w,
        rest_ms,
        batch_ms,
    )


def _value(trace: Trace, ctx: Context, f: _Facts) -> tuple[float, Saving | None]:
    """The saving per step and its replay (None: not replayed or no GPU): the fetches shrunk
    to the wait left with ``rec_w`` workers, replayed on GPU traces; else the exposed time
    minus that wait."""
    left_ms = max(0.0, f.batch_ms / max(f.rec_w, 1) - f.rest_ms) if f.rec_w > f.w0 else f.exp_ms
    saving = max(0.0, f.exp_ms - min(left_ms, f.exp_ms))
    keep = min(1.0, left_ms / f.raw_ms) if f.raw_ms > 0 else 1.0
    rep = ctx.whatif(
        ShrinkHost(
            f.dl["ts_ns"].to_numpy(),
            f.dl["end_ns"].to_numpy(),
            f.dl["tid"].to_numpy(),
            keep=keep,
            label=f"{f.rec_w} DataLoader workers",
        )
    )
    if trace.has_gpu and rep.replayed:
        return rep.ms, rep
    return saving, None


def _summary(trace: Trace, ctx: Context, f: _Facts) -> str:
    kind = "num_workers=0" if f.single else f"num_workers={f.w0 or '>0'}"
    some = _some_steps(trace, f.dl, f.exposed, f.step_ms, ctx.t("dataloader_stall.min_share_pct"))
    if not trace.has_gpu:
        return (
            f"Fetching batches takes {fmt_ms(f.exp_ms)} per step ({f.share:.0f}% of the step, "
            f"{kind}); the model waits for it" + (f"{some}." if some else " on every step.")
        )
    return (
        f"The loop waits {fmt_ms(f.exp_ms)} per step ({f.share:.0f}% of the step) for the "
        f"next batch with the GPU idle{some} ({kind}; `__next__` takes {fmt_ms(f.raw_ms)} per "
        "step in total)."
    )


def _evidence(trace: Trace, f: _Facts) -> tuple[Evidence, ...]:
    return tuple(
        Evidence(
            what=f"enumerate(DataLoader)#{it}.__next__: exposed {fmt_ms(float(f.exposed[g.index].sum()) / 1e6 / f.steps)}/step",
            count=len(g),
            total_ms=round(float(g["dur_ns"].sum()) / 1e6, 3),
            example_ts_us=trace.to_trace_us(int(g.loc[g["dur_ns"].idxmax(), "ts_ns"])),
        )
        for it, g in f.dl.groupby("it", sort=False)
    )


def _locations(ctx: Context, f: _Facts) -> tuple[Location, ...]:
    """Where the DataLoader is built (run.json) first, then where it is iterated."""
    locs: list[Location | None] = [
        ctx.locator.for_op(int(r.op_idx))
        if r.op_idx >= 0
        else ctx.locator.at(int(r.tid), int(r.ts_ns))
        for r in f.dl.itertuples(index=False)
    ]
    where = aggregate(locs)
    cfg = f.cfg
    if cfg and cfg.file and isinstance(cfg.line, int):
        return (Location(cfg.file, cfg.line, "DataLoader(...)", len(f.dl)), *where[:4])
    return where


def _assumptions(f: _Facts, rep: Saving | None) -> tuple[str, ...]:
    rec_w = f.rec_w
    return (
        "Cost = time inside DataLoader.__next__ with no GPU activity on any device (on a "
        "CPU-only trace: all of it), per step: its mean over all the steady steps, also "
        "when only some of them wait (and its share: of the mean step).",
        f"Saving with {rec_w} worker{'s' if rec_w != 1 else ''}: exposed time minus max(0, B/{rec_w} - R), B = batch "
        f"production time ({fmt_ms(f.batch_ms)}), R = rest of the step ({fmt_ms(f.rest_ms)}); "
        "worker start-up and inter-process copies are not modeled.",
        "gpu-idle's 'dataloader' share is this same idle time.",
        *((rep.assumption,) if rep is not None else ()),
    )


def _some_steps(trace: Trace, dl: Any, exposed: np.ndarray, step_ms: float, min_pct: float) -> str:
    """ "; in k of n steps, a-b ms each" when only some steps wait for their batch (at least
    ``min_pct`` of the mean step ``step_ms``), else ""."""
    st = trace.steps
    n = len(st)
    if n < 2 or step_ms <= 0:
        return ""
    k = np.searchsorted(st["ts_ns"].to_numpy(np.int64), dl["ts_ns"].to_numpy(np.int64), "right")
    per = np.bincount(np.clip(k - 1, 0, n - 1), weights=exposed, minlength=n)[:n] / 1e6
    hit = per[per >= min_pct / 100.0 * step_ms]
    if not 0 < len(hit) < n:
        return ""
    return f"; in {len(hit)} of {n} steps, {fmt_ms(hit.min())}-{fmt_ms(hit.max())} each"


def _advice(
    trace: Trace, cfg: DataLoader | None, single: bool, w0: int, rec_w: int, cpus: int | None
) -> tuple[str, str]:
    bound = f" (this machine has {cpus} CPUs)" if cpus else " (4 per GPU is a common start)"
    parts = []
    if single:
        parts.append(f"Load batches in background workers: `num_workers={rec_w}`{bound}.")
    elif rec_w > w0:
        parts.append(
            f"The {w0 or ''} workers cannot keep up: raise `num_workers` to {rec_w}"
            f"{bound} or make `__getitem__` cheaper."
        )
    else:
        parts.append(
            "The workers cannot keep up and the CPUs are used: make `__getitem__` "
            "cheaper (decode once, cache, move augmentation to the GPU)."
        )
    pin = cfg.pin_memory if cfg else None
    if trace.has_gpu and pin is not True:
        parts.append("Set `pin_memory=True` so batches are copied to the GPU asynchronously.")
    if cfg is None or not cfg.persistent_workers:
        parts.append("`persistent_workers=True` keeps workers alive across epochs.")
    if not single:
        pf = cfg.prefetch_factor if cfg else None
        parts.append(f"Raise `prefetch_factor` (now {pf or 2}) if batch cost varies.")
    if cfg:
        desc = (
            f"batch_size={cfg.batch_size}, num_workers={cfg.num_workers}, "
            f"pin_memory={cfg.pin_memory}, persistent_workers={cfg.persistent_workers}, "
            f"prefetch_factor={cfg.prefetch_factor}"
        )
        parts.append(f"Current settings: {desc}.")
    bs = cfg.batch_size if cfg else None
    snippet = (
        # the loader's other arguments (shuffle, sampler, collate_fn) stay as they are: an
        # evaluation loader must not start shuffling because of this snippet
        f"loader = DataLoader(dataset, batch_size={bs or 'batch_size'},  # other arguments as they are\n"
        f"                    num_workers={rec_w},\n"
        f"                    pin_memory={trace.has_gpu},\n"
        "                    persistent_workers=True,\n"
        "                    prefetch_factor=4)"
    )
    return " ".join(parts), snippet
