"""Sync points: places where the host stops and waits for the GPU.

**What it detects.** Host-device synchronizations inside the profiled steps: explicit
``torch.cuda.synchronize()`` / ``stream.synchronize()`` / ``event.synchronize()``
(``cuda/hip{Device,Stream,Event}Synchronize``), and blocking device-to-host reads:
``.item()``, ``float(t)``, ``.cpu()``, ``.tolist()``, ``.numpy()``, ``print(cuda_tensor)``,
``torch.nonzero`` / boolean-mask indexing / ``unique`` (their output size depends on the data),
and data-dependent Python branches such as ``if (t != 0).all():``. Each is traced back to the
op that issued it (``aten::item``, ``aten::_local_scalar_dense``, ``aten::nonzero``,
``aten::is_nonzero``, ``aten::to``/``copy_``) and to your source line when the trace has stacks.

**Why it costs time.** PyTorch normally runs ahead of the GPU: the host queues kernels while the
GPU works through earlier ones. A sync empties that queue: the host waits until the GPU has
finished everything, and when the sync returns the GPU has nothing left to do until the host
launches the next kernel. The GPU then idles for the whole time the host spends in Python and
in launch overhead before the next kernel.

**How the saving is estimated.** The steady steps are replayed (see docs/savings.md) with these
syncs removed: the host no longer waits, runs ahead and keeps the GPU's queue full; the saving
is what the step loses in the replay (the GPU idle the syncs caused when the GPU limits the
step, up to the host's waiting when the host does). For traces the replay cannot place: for
each sync ``G`` = the GPU idle gap from the moment the sync returns to the next GPU activity,
``W`` = the GPU work the host waited for, and the idle it causes is ``min(G, W)``, summed and
divided by the number of steps.

**How to fix.** Keep values on the GPU and read them rarely: accumulate losses and metrics as
tensors and call ``.item()`` every N steps; replace data-dependent ``if`` on tensors by tensor
ops (``torch.where``, masks); use fixed-size ops (``torch.where(mask, x, 0)`` instead of
``x[mask]``, ``nonzero_static``, ``repeat_interleave(..., output_size=n)``); copy results with
``.to("cpu", non_blocking=True)`` into pinned memory and synchronize on an event later; keep
``torch.cuda.synchronize()`` out of the training loop. ``torch.cuda.set_sync_debug_mode("warn")``
lists every sync with a stack trace.

**Known false positives.** A sync you need once per step (e.g. a loss printed every step on
purpose, or a CPU-side decision that really depends on the value) still costs the time shown
here: the fix is then to do it less often. Syncs that only wait for host-to-device copies are
reported by ``blocking-copy``, and cuDNN autotuning syncs (``cudnn.benchmark``, first
iterations) are ignored. A sync is counted only where a device waits: a read of a CPU tensor
(``.item()`` in a Dataset's ``__getitem__``, a CPU step counter) issues no device call and is
never one. On CPU-only traces the ``.item()`` / ``nonzero`` calls of the step are listed as
information only (they cost nothing on a CPU but will block on a GPU), except those inside a
DataLoader fetch or an optimizer step, which read CPU tensors on any machine.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from advisor.derive.dataloader import fetches
from advisor.derive.locate import aggregate
from advisor.derive.timeline import union
from advisor.detect.draft import Draft
from advisor.detect.registry import Context, Skip, detector
from advisor.detect.thresholds import register
from advisor.findings import Confidence, Evidence, Location
from advisor.replay.fixes import DropSyncs
from advisor.replay.whatif import Saving
from advisor.trace.model import Trace
from advisor.trace.names import name_flags

from ._frameworks import framework_note
from ._ops import op_chain, op_names
from ._per_step import fmt_ms, in_steps, n_steps
from ._sync_roles import (
    ResultReads,
    event_runtime_rows,
    harness_note,
    result_reads,
    sync_roles,
)
from ._syncs import REASONS, classify, sync_events

ID = "sync-point"
TITLE = "Host-device synchronization points"

register(
    "sync_point.min_idle_ms",
    0.01,
    "report when the GPU idle the syncs cause is at least this many ms per step",
)
register(
    "sync_point.min_wait_ms",
    0.1,
    "also report when the host waits on syncs at least this many ms per step",
)

FIXES: dict[str, tuple[str, str]] = {
    "item": (
        "Read scalars back rarely: accumulate losses and metrics as GPU tensors and call "
        "`.item()` every N steps (or once per epoch).",
        "running = torch.zeros((), device=device)\n"
        "for step, (x, y) in enumerate(loader):\n"
        "    loss = model(x).loss\n"
        "    ...\n"
        "    running += loss.detach()          # no sync\n"
        "    if step % 100 == 0:\n"
        "        print(running.item() / 100)   # one sync every 100 steps\n"
        "        running.zero_()",
    ),
    "to_cpu": (
        "Copy results to the host asynchronously into pinned memory and wait on an event "
        "only when you need them (or copy less often).",
        "host_buf = torch.empty(out.shape, dtype=out.dtype, pin_memory=True)\n"
        "host_buf.copy_(out, non_blocking=True)\n"
        "done = torch.cuda.Event(); done.record()\n"
        "...  # queue more GPU work here\n"
        "done.synchronize(); use(host_buf)",
    ),
    "branch": (
        "Do not branch in Python on GPU tensor values: express the condition with tensor ops "
        "(`torch.where`, masks) or check it every N steps.",
        "# before: if (t != 0).all(): x = x * 2\n"
        "x = torch.where((t != 0).all(), x * 2, x)   # stays on the GPU, no sync",
    ),
    "nonzero": (
        "Use fixed-size operations: mask with `torch.where` or multiplication instead of "
        "boolean indexing, `nonzero_static(size=...)`, or pass `output_size` to "
        "`repeat_interleave`.",
        "# before: y = x[mask]            (nonzero: output size depends on the data)\n"
        "y = torch.where(mask, x, torch.zeros_like(x))   # same shape, no sync",
    ),
    "equal": (
        "Compare on the GPU and read the result rarely (`(a == b).all()` stays a tensor).",
        "same = (a == b).all()   # a GPU tensor: no sync until you read it",
    ),
    "explicit": (
        "Remove `torch.cuda.synchronize()` / `stream.synchronize()` from the step; to time "
        "code use CUDA events and read them after the loop.",
        "start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)\n"
        "start.record(); train_step(); end.record()\n"
        "# ... later, outside the hot loop:\n"
        "torch.cuda.synchronize(); print(start.elapsed_time(end))",
    ),
    "result": (
        "The host needs this result, so the read stays; launch the next call's GPU work "
        "before working on it: copy it into pinned memory with `non_blocking=True`, record an "
        "event, queue the next call, then wait on the event and post-process.",
        "host_buf = torch.empty(out.shape, dtype=out.dtype, pin_memory=True)\n"
        "host_buf.copy_(out, non_blocking=True); done = torch.cuda.Event(); done.record()\n"
        "next_out = model(next_inputs)      # queued while the copy and post-processing run\n"
        "done.synchronize(); postprocess(host_buf)",
    ),
    "op": (
        "An op synchronizes internally; find an alternative that does not need the data on "
        "the host, or call it less often.",
        'torch.cuda.set_sync_debug_mode("warn")  # prints a stack for every sync',
    ),
}


def _fix_key(kind: str) -> str:
    return "explicit" if kind.startswith("explicit") else kind


def _location(ctx: Context, op_idx: int, tid: int, ts_ns: int) -> Location | None:
    loc = ctx.locator.for_op(op_idx) if op_idx >= 0 else None
    return loc if loc is not None else ctx.locator.at(tid, ts_ns)


class _Syncs(NamedTuple):
    """The syncs in the steps (the harness's apart) and what they cost per step."""

    ev: pd.DataFrame  # rows of sync_events, with their role
    harness: pd.DataFrame  # the measuring harness's syncs, left out
    steps: int
    caused_ms: float  # GPU idle they caused
    wait_ms: float  # host blocked in them


class _Value(NamedTuple):
    """The syncs that can go replayed away, and the reads of a result the host needs."""

    rep: Saving
    removable: bool  # some syncs can go
    caused_ms: float  # the saving per step
    res: ResultReads

    @property
    def replayed_removal(self) -> bool:
        return self.rep.replayed and self.removable


@detector(ID, TITLE)
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    if not trace.has_gpu:
        return _latent(trace, ctx)
    if not len(trace.runtime):
        raise Skip("no CUDA/HIP runtime events in this trace")
    s = _measure(trace, ctx)
    if s is None:
        return []
    val = _value(trace, ctx, s)
    ev, locs = _located(ctx, s.ev)
    groups = _groups(ev)
    top = groups.iloc[0]
    fix_text, snippet = FIXES[_fix_key(str(top["kind"]))]
    summary = _summary(s, val, top["label"].split(" (")[0], len(ev))
    rec = _recommendation(fix_text, groups)
    fw = framework_note(ctx.locator, ev["reason_idx"].where(ev["reason_idx"] >= 0, ev["op_idx"]))
    if fw is not None:  # the sync is a framework's: its setting first (_frameworks.CAUSES)
        summary, rec = f"{summary} {fw.sentence}", f"{fw.advice} {rec}"
    has_loc = any(loc is not None for loc in locs)
    confidence: Confidence = "low" if val.caused_ms <= 0 else ("high" if has_loc else "medium")
    return [
        Draft(
            id=ID,
            title=TITLE,
            est_savings_ms=val.caused_ms,
            confidence=confidence,
            summary=summary,
            recommendation=rec,
            snippet=snippet,
            evidence=_evidence(trace, ev, groups, s.steps),
            locations=aggregate(locs),
            assumptions=_assumptions(s, val),
            extra={"host_wait_ms_per_step": round(s.wait_ms, 3)},
            saving=val.rep if val.replayed_removal else None,
        )
    ]


def _measure(trace: Trace, ctx: Context) -> _Syncs | None:
    """The syncs other than the harness's; None when there are none or they cost less than
    ``sync_point.min_idle_ms`` of GPU idle and ``sync_point.min_wait_ms`` of host waiting."""
    ev = sync_events(trace)
    if not len(ev):
        return None
    role = sync_roles(trace)["role"].to_numpy()
    harness = ev[role == "harness"]
    ev = ev[role != "harness"].assign(role=role[role != "harness"])
    if not len(ev):
        return None  # only the harness's syncs: run.trace_quality says so
    steps = n_steps(trace)
    caused_ms = float(ev["caused_ns"].sum()) / 1e6 / steps
    wait_ms = float(ev["wait_ns"].sum()) / 1e6 / steps
    if caused_ms < ctx.t("sync_point.min_idle_ms") and wait_ms < ctx.t("sync_point.min_wait_ms"):
        return None
    return _Syncs(ev, harness, steps, caused_ms, wait_ms)


def _value(trace: Trace, ctx: Context, s: _Syncs) -> _Value:
    """The steps replayed without the removable syncs (the GPU idle they caused where the
    replay cannot place the steps), plus what is claimed for reads of a needed result."""
    ev = s.ev
    gone = ev[ev["role"] == "remove"]
    rep = ctx.whatif(
        DropSyncs(_rows(trace, gone), label="no syncs in the loop"),
    )
    caused_ms = s.caused_ms
    if rep.replayed:
        caused_ms = rep.ms if len(gone) else 0.0
    res = result_reads(trace, ev[ev["role"] == "result"])
    caused_ms += res.claimed_ms
    return _Value(rep, bool(len(gone)), caused_ms, res)


def _located(ctx: Context, ev: pd.DataFrame) -> tuple[pd.DataFrame, list[Location | None]]:
    """Each sync's source line (of the op that issued it), and ``ev`` with ``loc`` (its text)
    and ``kind`` (``result`` for reads of a needed result)."""
    locs: list[Location | None] = []
    for r in ev.itertuples(index=False):
        oi = int(r.reason_idx) if r.reason_idx >= 0 else int(r.op_idx)
        locs.append(_location(ctx, oi, int(r.tid), int(r.start_ns)))
    ev = ev.assign(loc=[f"{lc.file}:{lc.line}" if lc else "" for lc in locs])
    ev = ev.assign(kind=np.where(ev["role"] == "result", "result", ev["kind"]))
    return ev, locs


def _groups(ev: pd.DataFrame) -> pd.DataFrame:
    """The syncs grouped by kind, label and line, the costliest first."""
    return (
        ev.groupby(["kind", "label", "loc"], sort=False)
        .agg(
            n=("wait_ns", "size"),
            wait=("wait_ns", "sum"),
            caused=("caused_ns", "sum"),
            api=("api", "first"),
            reason=("reason_idx", "first"),
        )
        .reset_index()
        .sort_values(["caused", "wait", "n"], ascending=False, kind="stable")
    )


def _evidence(
    trace: Trace, ev: pd.DataFrame, groups: pd.DataFrame, steps: int
) -> tuple[Evidence, ...]:
    """One row per group (the first five), its costliest sync as the example."""
    opn = op_names(trace)
    evidence = []
    for g in groups.head(5).itertuples(index=False):
        sel = ev[(ev["kind"] == g.kind) & (ev["loc"] == g.loc)]
        ex = sel.loc[sel["caused_ns"].idxmax() if sel["caused_ns"].max() > 0 else sel.index[0]]
        where = f" at {g.loc}" if g.loc else ""
        op = f" [{opn[int(g.reason)]}]" if g.reason >= 0 else ""
        tail = (
            "the call's result, used by the host next: necessary"
            if g.kind == "result"
            else "total = GPU idle caused"
        )
        evidence.append(
            Evidence(
                what=f"{g.label}{op}{where} ({g.api}): {g.n / steps:g}/step, host blocked "
                f"{fmt_ms(g.wait / 1e6 / steps)}/step; {tail}",
                count=int(g.n),
                total_ms=round(float(g.caused) / 1e6, 3),
                example_ts_us=trace.to_trace_us(int(ex["start_ns"])),
            )
        )
    return tuple(evidence)


def _summary(s: _Syncs, val: _Value, what: str, n: int) -> str:
    """What the ``n`` syncs (mostly ``what``) cost: the replayed saving, the idle they cause,
    or why removing them would not shorten the step; the result reads' sentence after."""
    per_step = n / s.steps
    head = f"{per_step:g} host-device sync(s) per step (mostly {what}) block the host "
    summary = (
        f"{head}{fmt_ms(s.wait_ms)} per step; the GPU then idles {fmt_ms(val.caused_ms)} "
        "per step waiting for new work."
    )
    if val.replayed_removal:
        summary = (
            f"{head}{fmt_ms(s.wait_ms)} per step; replayed without "
            f"{'them' if not val.res.n else 'the removable ones'}, the step is "
            f"{fmt_ms(val.rep.ms)} shorter."
        )
    elif val.res.n:
        summary = f"{head}{fmt_ms(s.wait_ms)} per step."
    if val.caused_ms <= 0 and not val.res.n:
        summary = (
            f"{head}{fmt_ms(s.wait_ms)} per step; here the GPU had already run dry or the host "
            "limits the step, so removing them would not shorten it."
        )
    if val.res.n:
        summary += " " + val.res.sentence
    return summary


def _recommendation(fix_text: str, groups: pd.DataFrame) -> str:
    """The top group's fix, then those of the next two kinds of sync."""
    kinds = list(dict.fromkeys(_fix_key(str(k)) for k in groups["kind"]))
    extra = [FIXES[k][0] for k in kinds[1:3]]
    return " ".join(
        [
            fix_text,
            *extra,
            'Run once with `torch.cuda.set_sync_debug_mode("warn")` to list every sync.',
        ]
    )


def _assumptions(s: _Syncs, val: _Value) -> tuple[str, ...]:
    notes = [val.res.assumption] if val.res.n else []
    if len(s.harness):
        notes.append(
            harness_note(len(s.harness), float(s.harness["wait_ns"].sum()) / 1e6 / s.steps)
        )
    return (
        *(
            (val.rep.assumption,)
            if val.replayed_removal
            else ()
            if val.rep.replayed
            else (
                "Saving = GPU idle each sync causes: min(idle gap from the sync's return to the "
                "next GPU activity on its device, GPU work the host waited for during the sync), "
                f"summed over the trace and divided by its {s.steps} step(s).",
                "Removing a sync lets the host run ahead by at most the time it waited, so idle "
                "time beyond that is not claimed (it is host-bound: see gpu-idle).",
            )
        ),
        *notes,
        "gpu-idle's 'sync' share overlaps this figure.",
        "Syncs that only wait for host-to-device copies (blocking-copy) and cuDNN "
        "autotuning syncs are not counted; large device-to-host copies also appear in "
        "blocking-copy, which counts the copy window itself, not the idle after it.",
    )


def _rows(trace: Trace, ev: pd.DataFrame) -> np.ndarray:
    """Rows of ``trace.runtime`` inside the sync events (same thread, within their span)."""
    rows = event_runtime_rows(trace, ev)
    return np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)


_LATENT_OPS = {n for kind, ops, _ in REASONS if kind != "to_cpu" for n in ops}


def _in_optimizer(trace: Trace, ts_ns: np.ndarray) -> np.ndarray:
    """Moments inside torch's own optimizer ranges (``Optimizer.step#Adam.step``...).

    torch's single-tensor optimizers read their step counter with ``.item()``; that counter is a
    CPU tensor even when the model is on a GPU, so those reads never synchronize.
    """
    ann = trace.annotations
    if not len(ann) or not len(ts_ns):
        return np.zeros(len(ts_ns), dtype=bool)
    names = ann["name"]
    cats = names.cat.categories if hasattr(names, "cat") else pd.Index(names.unique())
    opt_names = [c for c in cats if str(c).startswith("Optimizer.")]
    mask = names.isin(opt_names).to_numpy() & ~ann["on_gpu"].to_numpy(dtype=bool)
    if not mask.any():
        return np.zeros(len(ts_ns), dtype=bool)
    lo, hi = union(ann["ts_ns"].to_numpy()[mask], ann["end_ns"].to_numpy()[mask])
    i = np.searchsorted(lo, ts_ns, side="right") - 1
    return (i >= 0) & (ts_ns < hi[np.clip(i, 0, None)])


def _in_fetch(trace: Trace, ts_ns: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """Moments inside a DataLoader batch fetch (``enumerate(DataLoader)#...__next__``) on the
    same thread: the Dataset's ``__getitem__`` and the collate function work on CPU tensors
    (the batch reaches a device only after the fetch), so their reads never wait for a device."""
    f = fetches(trace)
    out = np.zeros(len(ts_ns), dtype=bool)
    for t, g in f.groupby("tid", sort=False):
        on = tid == t
        if not on.any():
            continue
        lo, hi = union(g["ts_ns"].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64))
        x = ts_ns[on]
        i = np.searchsorted(lo, x, side="right") - 1
        out[on] = (i >= 0) & (x < hi[np.clip(i, 0, None)])
    return out


def _latent_reads(trace: Trace) -> dict[int, str]:
    """The ops in the steps that would read a tensor back on a GPU (op index -> kind), first
    seen first; none inside torch's optimizer steps or a DataLoader fetch."""
    opn = op_names(trace)
    ops_ts = trace.cpu_ops["ts_ns"].to_numpy()
    cand = np.flatnonzero(name_flags(trace.cpu_ops["name"], _LATENT_OPS.__contains__))
    cand = cand[in_steps(trace, ops_ts[cand])]
    cand = cand[~_in_optimizer(trace, ops_ts[cand])]
    cand = cand[~_in_fetch(trace, ops_ts[cand], trace.cpu_ops["tid"].to_numpy()[cand])]
    seen: dict[int, str] = {}
    for i in cand:
        kind, reason, _ = classify(op_chain(trace, int(i)), opn)
        if reason >= 0 and kind not in ("op", "to_cpu"):
            seen.setdefault(reason, kind)
    return seen


def _latent(trace: Trace, ctx: Context) -> list[Draft]:
    """CPU-only trace: scalar reads / nonzero that would block on a GPU (info, 0 ms). Reads that
    would stay on the CPU on any machine are left out: inside a DataLoader fetch (the Dataset
    and collate work on CPU tensors) and inside torch's optimizer steps (CPU step counters)."""
    if not len(trace.cpu_ops):
        raise Skip("no CPU operator events in this trace")
    seen = _latent_reads(trace)
    if not seen:
        return []
    opn = op_names(trace)
    steps = n_steps(trace)
    rows = pd.DataFrame({"idx": list(seen), "kind": list(seen.values())})
    ops = trace.cpu_ops
    locs = ctx.locator.for_ops(rows["idx"])
    labels = {k: lbl for k, _, lbl in REASONS}
    evidence = []
    for kind, g in rows.groupby("kind", sort=False):
        first = int(g["idx"].iloc[0])
        evidence.append(
            Evidence(
                what=f"{labels[str(kind)]} [{opn[first]}]: {len(g) / steps:g}/step",
                count=len(g),
                total_ms=round(float(ops["dur_ns"].to_numpy()[g["idx"]].sum()) / 1e6, 3),
                example_ts_us=trace.to_trace_us(int(ops["ts_ns"].iat[first])),
            )
        )
    evidence.sort(key=lambda e: -e.count)
    top = str(rows["kind"].value_counts().index[0])
    fix_text, snippet = FIXES[top]
    n = len(rows) / steps
    fw = framework_note(ctx.locator, rows["idx"])
    said = f" {fw.sentence}" if fw is not None else ""
    if fw is not None:  # the read is a framework's: its setting first (_frameworks.CAUSES)
        fix_text = f"{fw.advice} {fix_text}"
    return [
        Draft(
            id=ID,
            title=TITLE,
            est_savings_ms=0.0,
            confidence="medium",
            latent=True,
            summary=(
                f"{n:g} call(s) per step read tensor values back to Python ("
                f"{labels[top].split(' (')[0]}); free on this CPU run, but on a GPU each one "
                "stops the host until the GPU drains its queue." + said
            ),
            recommendation=fix_text + " This matters once the model runs on a GPU.",
            snippet=snippet,
            evidence=tuple(evidence[:5]),
            locations=aggregate(locs),
            assumptions=(
                "CPU-only trace: no GPU time is claimed. On a GPU each call is a "
                "host-device sync costing the GPU's queue drain plus the relaunch gap.",
            ),
        )
    ]
