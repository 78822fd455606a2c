"""Synchronous copies that serialize the host and the GPU.

**What it detects.** Host-to-device and device-to-host copies (64 KiB or more) during which the
host thread waits: a synchronous `cudaMemcpy`, a `cudaMemcpyAsync` followed at once by a
`cudaStreamSynchronize`/`cudaDeviceSynchronize` (what `.to(device)` / `.cuda()` / `.cpu()`
without `non_blocking=True` do), or a copy from/to pageable memory, which blocks the call itself.
Small blocking reads such as `.item()` are left to `sync-point`.

**Why it costs time.** While the host waits it launches nothing, and while the copy runs the
GPU computes nothing: the transfer sits on the critical path of both. A copy from pinned memory
with `non_blocking=True` returns at once, so the host queues the next kernels behind it; issued
early on a side stream (prefetch) it overlaps the previous step's compute entirely.

**How the saving is estimated.** The fix is replayed (see docs/savings.md): the steady steps'
dependency graph is replayed with the calls that launch these copies no longer waiting for them
(pinned memory and `non_blocking=True`; a synchronous or pageable copy call, which blocks for
the transfer itself, loses that host time) and the copies off the step's critical path
(prefetched on a side stream, overlapping the previous step's compute); the saving is the
measured step minus the replayed step. The low end of the range keeps the copies in the
compute stream (`non_blocking=True` alone): in a GPU-bound loop that saves little, since the GPU
still runs the transfer. When the trace has no step the replay can place, the window from the
copy call to the end of the host's wait, minus the GPU kernel time inside it, is used instead.
Overlaps `pageable-memcpy` and `sync-point`.

**How to fix.** Pin the host side (`DataLoader(pin_memory=True)`, or a pinned buffer), copy
with `.to(device, non_blocking=True)`, and prefetch the next batch on a side stream. For
device-to-host results, copy into a pinned buffer with `non_blocking=True` and wait on an event
only where the values are used.

Copies that return a call's result to the host (the last read of an inference step, see
``sync-point``) are left out: the host needs them, so only overlap with the next call helps,
and ``sync-point`` values that.

**Known false positives.** A copy whose result the host needs immediately (e.g. a value that
decides control flow) must wait anyway; only overlapping it with other work helps then.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from advisor.derive.locate import aggregate
from advisor.derive.runtime import BOOKKEEPING_CALLS, COPY_CALL_RE, SYNC_COPY_RE, is_sync_call
from advisor.derive.timeline import Intervals, activity
from advisor.detect.draft import Draft
from advisor.detect.registry import Context, detector
from advisor.detect.thresholds import register
from advisor.findings import Evidence
from advisor.replay.fixes import AsyncCopies, Combined, ShrinkHost
from advisor.trace.model import Trace

from ._ops import runtime_op
from ._per_step import ms, n_steps, per_step_words, rows_in_steps
from ._sync_roles import event_runtime_rows, sync_roles
from ._syncs import sync_events

ID = "blocking-copy"
register(
    "blocking_copy.min_bytes",
    65536.0,
    "only copies of at least this many bytes (smaller reads are sync-point's)",
)
register(
    "blocking_copy.max_gap_us",
    100.0,
    "a wait starting within this many us after the copy call belongs to the copy",
)


def _episodes(trace: Trace, ctx: Context) -> pd.DataFrame:
    """One row per blocking copy: memcpy row, runtime row, window [w_start, w_end), wait name."""
    rt = trace.runtime
    m = rows_in_steps(trace.memcpy, trace)
    m = m[
        m["kind"].astype(str).isin(["HtoD", "DtoH"])
        & (m["launch_idx"] >= 0)
        & (m["bytes"] >= ctx.t("blocking_copy.min_bytes"))
    ]
    cols = ["mem", "rt", "w_start", "w_end", "wait", "how"]
    if not len(m) or not len(rt):
        return pd.DataFrame(columns=cols)
    names = rt["name"].astype(str).to_numpy()
    tid = rt["tid"].to_numpy()
    ts = rt["ts_ns"].to_numpy()
    end = rt["end_ns"].to_numpy()
    order = np.lexsort((ts, tid))
    nxt = np.full(len(rt), -1, dtype=np.int64)
    same = tid[order[1:]] == tid[order[:-1]]
    nxt[order[:-1][same]] = order[1:][same]
    op_of = runtime_op(trace)
    gap_ns = ctx.t("blocking_copy.max_gap_us") * 1000.0
    rows = []
    for mi, r in zip(m.index, m["launch_idx"].to_numpy(), strict=True):
        name = names[r]
        if not COPY_CALL_RE.match(name):
            continue
        w_end, wait, how = int(end[r]), "", ""
        n = nxt[r]
        for _ in range(3):  # skip bookkeeping calls between the copy and its wait
            if n >= 0 and names[n] in BOOKKEEPING_CALLS and ts[n] - end[r] <= gap_ns:
                n = nxt[n]
        if (
            n >= 0
            and is_sync_call(names[n])
            and (ts[n] - end[r] <= gap_ns or (op_of[n] >= 0 and op_of[n] == op_of[r]))
        ):
            w_end, wait, how = int(end[n]), names[n], f"{name} + {names[n]}"
        elif SYNC_COPY_RE.match(name):
            how = f"synchronous {name}"
        else:
            src, dst = str(trace.memcpy.at[mi, "src"]), str(trace.memcpy.at[mi, "dst"])
            gpu_dur = int(trace.memcpy.at[mi, "dur_ns"])
            if "Pageable" in (src, dst) and end[r] - ts[r] >= 0.5 * gpu_dur:
                how = f"{name} from/to pageable memory (blocks the call)"
            else:
                continue
        rows.append((mi, int(r), int(ts[r]), w_end, wait, how))
    return pd.DataFrame(rows, columns=cols)


def _kept(trace: Trace) -> np.ndarray:
    """Runtime rows inside the sync events no fix removes: the reads of a call's result and the
    harness's syncs (see ``_sync_roles``)."""
    ev = sync_events(trace)
    if not len(ev):
        return np.zeros(0, dtype=np.int64)
    keep = ev[(sync_roles(trace)["role"] != "remove").to_numpy()]
    rows = event_runtime_rows(trace, keep)
    return np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)


class _Facts(NamedTuple):
    """The blocking copies the host does not need, with each one's window (ns) and the part
    of it the GPU ran no kernel (serial) and the part beyond the transfer itself (low)."""

    ep: pd.DataFrame  # _episodes' rows with serial_ns, low_ns, window_ns
    n_needed: int  # copies left out: the host needs them
    steps: int
    save_ms: float  # serial time per step
    low_ms: float
    win_ms: float


@detector(ID, "Blocking copies serialize host and GPU", gpu_only=True)
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    f = _measure(trace, ctx)
    if f is None:
        return []
    fields, latent, how_saved = _value(trace, ctx, f)
    op_of = runtime_op(trace)
    locs = aggregate(ctx.locator.for_ops([op_of[r] for r in f.ep["rt"] if op_of[r] >= 0]))
    return [
        Draft(
            id=ID,
            title="Blocking copies serialize host and GPU",
            **fields,
            latent=latent,
            confidence="medium",
            summary=_summary(trace, f, latent),
            recommendation=(
                "Copy from pinned memory with non_blocking=True so the host keeps launching "
                "while the transfer runs, and prefetch the next batch on a side stream so the "
                "copy overlaps this step's compute. For results read back to the host, copy "
                "into a pinned buffer without blocking and wait on an event only where the "
                "values are used."
            ),
            snippet=_SNIPPET,
            evidence=_evidence(trace, f.ep),
            locations=locs,
            assumptions=_assumptions(ctx, f, how_saved),
        )
    ]


def _measure(trace: Trace, ctx: Context) -> _Facts | None:
    """The episodes the host does not need, timed; None when they hold nothing serial."""
    ep = _episodes(trace, ctx)
    needed = np.isin(ep["rt"].to_numpy(np.int64), _kept(trace))
    n_needed = int(needed.sum())
    ep = ep[~needed] if n_needed else ep
    if not len(ep):
        return None
    ep = _timed(trace, ep)
    steps = n_steps(trace)
    save_ms = float(ep["serial_ns"].sum()) / 1e6 / steps
    if save_ms <= 0:
        return None
    low_ms = float(ep["low_ns"].sum()) / 1e6 / steps
    win_ms = float(ep["window_ns"].sum()) / 1e6 / steps
    return _Facts(ep, n_needed, steps, save_ms, low_ms, win_ms)


def _timed(trace: Trace, ep: pd.DataFrame) -> pd.DataFrame:
    """Per episode: its window, the part with no kernel on its device (serial) and the part
    beyond the transfer itself (low)."""
    mem = trace.memcpy
    serial, low, window = [], [], []
    busy_by_dev: dict[int, Intervals] = {}
    act = trace.gpu_activity()
    first_gpu = {int(d): int(t) for d, t in act.groupby("device")["ts_ns"].min().items()}
    for row in ep.itertuples(index=False):
        dev = int(mem.at[row.mem, "device"])
        if dev not in busy_by_dev:
            busy_by_dev[dev] = activity(trace, dev, kinds=("kernel", "comm"))
        # before the device's first recorded activity its timeline is unknown (work launched
        # before the profiler started is not in the trace): count the window from there
        w_start = min(max(row.w_start, first_gpu.get(dev, row.w_start)), row.w_end)
        w = row.w_end - w_start
        busy = busy_by_dev[dev].covered_ns(w_start, row.w_end)
        c_lo = max(int(mem.at[row.mem, "ts_ns"]), w_start)
        c_hi = min(int(mem.at[row.mem, "end_ns"]), row.w_end)
        s = max(0, w - busy)
        serial.append(s)
        low.append(max(0, s - max(0, c_hi - c_lo)))
        window.append(w)
    return ep.assign(serial_ns=serial, low_ns=low, window_ns=window)


def _value(trace: Trace, ctx: Context, f: _Facts) -> tuple[dict[str, Any], bool, str]:
    """The draft's saving fields, whether it is latent and how the saving was obtained."""
    mem = trace.memcpy
    rows = f.ep["mem"].to_numpy()
    fix = AsyncCopies(
        memcpy=rows, speedup=float("inf"), low=1.0, label="non-blocking copies from pinned memory"
    )
    # a synchronous or pageable copy blocks inside the call itself: a pinned non_blocking call
    # returns at once, so that call's host time goes too
    rt = trace.runtime
    call = f.ep["rt"].to_numpy()
    c_ts, c_end = rt["ts_ns"].to_numpy()[call], rt["end_ns"].to_numpy()[call]
    blocks = (c_end - c_ts) >= 0.5 * mem.loc[rows, "dur_ns"].to_numpy()
    rep = ctx.whatif(
        Combined(
            [
                fix,
                ShrinkHost(
                    c_ts[blocks], c_end[blocks], rt["tid"].to_numpy()[call][blocks], keep=0.0
                ),
            ],
            label=fix.label,
        )
        if blocks.any()
        else fix
    )
    if not rep.replayed:
        return (
            {
                "est_savings_ms": f.save_ms,
                "est_savings_range_ms": (round(f.low_ms, 3), round(f.save_ms, 3)),
            },
            False,
            "saving = copy call to end of the host's wait, minus GPU kernel time inside that "
            "window (time both sides were held by the copy); low end = the wait beyond the "
            "transfer itself, saved by non_blocking=True alone",
        )
    # the step is not limited by these waits: nothing to gain now
    return (
        rep.draft_fields(),
        max(rep.ms, rep.high_ms) <= 0,
        "The calls launching these copies no longer wait for them (pinned memory, "
        "non_blocking=True; a call that blocked for the copy itself loses that time) and "
        "the copies leave the step's critical path (side-stream prefetch); the low end "
        "keeps the copies in the stream (non_blocking=True alone). " + rep.assumption,
    )


def _summary(trace: Trace, f: _Facts, latent: bool) -> str:
    mem, steps = trace.memcpy, f.steps
    kinds = mem.loc[f.ep["mem"], "kind"].astype(str).to_numpy()
    n_htod, n_dtoh = int((kinds == "HtoD").sum()), int((kinds == "DtoH").sum())
    parts = []
    if n_htod:
        parts.append(f"{n_htod / steps:.0f} host-to-device")
    if n_dtoh:
        parts.append(f"{n_dtoh / steps:.0f} device-to-host")
    mb = float(mem.loc[f.ep["mem"], "bytes"].sum()) / 1e6 / steps
    one = len(f.ep) == steps
    summary = (
        f"{' and '.join(parts)} blocking cop{'y' if one else 'ies'} ({mb:.1f} MB) "
        f"{per_step_words(trace)} hold{'s' if one else ''} the host for {f.win_ms:.2f} ms, "
        f"{f.save_ms:.2f} ms of it with the GPU running no kernel."
    )
    if latent:
        summary += (
            " Replaying the steps without these waits saves nothing: other work limits the step."
        )
    return summary


def _assumptions(ctx: Context, f: _Facts, how_saved: str) -> tuple[str, ...]:
    n = f.n_needed
    return (
        how_saved,
        f"copies of at least {ctx.t('blocking_copy.min_bytes'):.0f} bytes; divided over "
        f"{f.steps} step(s)",
        "overlaps pageable-memcpy (faster transfer) and sync-point (the same waits)",
        *(
            (
                f"{n} cop{'y' if n == 1 else 'ies'} returning a call's "
                "result to the host (its last read, see sync-point) or made by the "
                "harness are left out: the host needs them.",
            )
            if n
            else ()
        ),
    )


def _evidence(trace: Trace, ep: pd.DataFrame) -> tuple[Evidence, ...]:
    mem = trace.memcpy
    ep = ep.assign(
        label=[
            f"{mem.at[i, 'name']} {mem.at[i, 'bytes'] / 1e6:.2f} MB via {how}"
            for i, how in zip(ep["mem"], ep["how"], strict=True)
        ]
    )
    rows = []
    for label, g in ep.groupby("label", sort=False):
        rows.append(
            (
                int(g["serial_ns"].sum()),
                Evidence(
                    str(label),
                    len(g),
                    ms(g["window_ns"].sum()),
                    trace.to_trace_us(int(g["w_start"].min())),
                ),
            )
        )
    rows.sort(key=lambda r: -r[0])
    return tuple(e for _, e in rows[:5])


_SNIPPET = """\
loader = DataLoader(dataset, batch_size=64, num_workers=4, pin_memory=True)
copy_stream = torch.cuda.Stream()

def to_device(batch):
    with torch.cuda.stream(copy_stream):  # the copy overlaps the current step
        return [t.to(device, non_blocking=True) for t in batch]

it = iter(loader)
nxt = to_device(next(it))
for batch in it:
    torch.cuda.current_stream().wait_stream(copy_stream)
    x, y = nxt
    for t in (x, y):
        t.record_stream(torch.cuda.current_stream())
    nxt = to_device(batch)  # prefetch the next batch
    loss = loss_fn(model(x), y)
    ..."""
