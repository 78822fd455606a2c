"""Host-to-device copies from pageable (not pinned) host memory.

**What it detects.** `Memcpy HtoD (Pageable -> Device)` activity: tensors copied to the GPU from
ordinary (pageable) host memory, typically a batch from a `DataLoader` without
`pin_memory=True`, moved with `.to(device)` or `.cuda()`.

**Why it costs time.** The GPU's copy engine can only read page-locked (pinned) memory, so the
driver first copies pageable data into a pinned staging buffer and then transfers it, chunk by
chunk. The transfer runs below the link's bandwidth (peers report pinned copies 2-3x faster), and
a copy from pageable memory cannot overlap the host: `non_blocking=True` has no effect on it.

**How the saving is estimated.** Per copy: measured duration minus the time the same bytes
would take from pinned memory (plus 10 us of fixed latency, so small latency-bound copies count
for nothing). The pinned bandwidth is the one measured in this trace for pinned host-to-device
copies of 1 MiB or more when there are any; otherwise twice the measured pageable bandwidth
(the low end of the published 2-3x), capped at a conservative pinned rate: 12 GB/s (what
pinned copies reached in real multi-GPU A100 training traces), 24 GB/s from compute capability
9.0 (PCIe 5); override with `--set pageable_memcpy.pinned_gbps=N`. The steady steps are
replayed with the copies that much faster (see docs/savings.md): the saving is what the step
loses. The host time the copy blocks is reported separately by `blocking-copy`; the two
savings overlap.

**How to fix.** `DataLoader(..., pin_memory=True)` and `.to(device, non_blocking=True)` on the
batch; for tensors made in the loop, keep a pinned buffer (`torch.empty(..., pin_memory=True)`)
and copy into it, or create the tensor on the GPU in the first place.

**Known false positives.** Copies of setup data (weights, one-off tables) inside the profiled
window; traces without ProfilerStep markers count the whole trace as one step, setup included.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from advisor.derive.locate import aggregate, merge_locations, run_locations
from advisor.detect.draft import Draft
from advisor.detect.registry import Context, detector
from advisor.detect.thresholds import register
from advisor.findings import Evidence, Location
from advisor.replay.fixes import ScaleGpu
from advisor.replay.whatif import Saving
from advisor.trace.model import Trace

from ._matmul import arch_cc
from ._ops import launching_op
from ._per_step import ms, n_steps, per_step_words, rows_in_steps

ID = "pageable-memcpy"
register(
    "pageable_memcpy.min_bytes_per_step",
    1024.0**2,
    "report pageable host-to-device copies from this many bytes per step",
)
register(
    "pageable_memcpy.pinned_speedup",
    2.0,
    "assumed pinned/pageable bandwidth ratio when the trace has no pinned copy to measure",
)
register(
    "pageable_memcpy.pinned_gbps",
    0.0,
    "pinned host-to-device bandwidth in GB/s (0 = measured in the trace, else by GPU generation)",
)

LATENCY_NS = 10_000
MIN_PINNED_SAMPLE_BYTES = 1024**2


def _link_cap_gbps(trace: Trace) -> float:
    cc, _ = arch_cc(trace)
    # conservative: pinned copies in real 8-GPU A100 training traces ran at 8-12 GB/s (shared
    # PCIe switches), well below the link's peak
    return 24.0 if cc is not None and cc >= (9, 0) else 12.0


def _pinned_gbps(trace: Trace, ctx: Context, pageable_gbps: float) -> tuple[float, str, bool]:
    """(bandwidth, how it was obtained, measured in this trace)."""
    forced = ctx.t("pageable_memcpy.pinned_gbps")
    if forced > 0:
        return forced, f"pinned bandwidth {forced:.1f} GB/s (set with --set)", False
    m = trace.memcpy
    pin = m[
        (m["kind"].astype(str) == "HtoD")
        & (m["src"].astype(str) == "Pinned")
        & (m["bytes"] >= MIN_PINNED_SAMPLE_BYTES)
        & (m["dur_ns"] > 0)
    ]
    if len(pin):
        bw = float(pin["bytes"].sum()) / float(pin["dur_ns"].sum())
        return bw, f"pinned bandwidth {bw:.1f} GB/s measured on {len(pin)} pinned copies here", True
    cap = _link_cap_gbps(trace)
    speedup = ctx.t("pageable_memcpy.pinned_speedup")
    bw = min(pageable_gbps * speedup, cap)
    how = (
        f"pinned bandwidth assumed {bw:.1f} GB/s: {speedup:g}x the measured pageable "
        f"{pageable_gbps:.1f} GB/s, capped at {cap:.0f} GB/s (conservative pinned rate for this GPU)"
    )
    return bw, how, False


def _size(nbytes: float) -> str:
    return f"{nbytes / 1e6:.1f} MB" if nbytes >= 1e5 else f"{nbytes / 1e3:.1f} kB"


class _Copies(NamedTuple):
    """The pageable host-to-device copies in the steps and their time from pinned memory."""

    pg: pd.DataFrame  # rows of trace.memcpy
    steps: int
    bytes_step: float
    dur: np.ndarray  # ns per copy
    pageable_gbps: float
    pinned_ns: np.ndarray  # ns per copy from pinned memory
    how: str  # how the pinned bandwidth was obtained
    measured: bool  # ...measured in this trace


_ADVICE = (
    "Pin the host memory the batch comes from: DataLoader(..., pin_memory=True), then "
    "copy with .to(device, non_blocking=True) so the transfer runs at full bandwidth "
    "and overlaps the host. For tensors built in the loop, create them on the GPU or "
    "copy through a reused pinned buffer."
)
_SNIPPET = (
    "loader = DataLoader(dataset, batch_size=64, num_workers=4, pin_memory=True)\n"
    "for x, y in loader:\n"
    "    x = x.to(device, non_blocking=True)\n"
    "    y = y.to(device, non_blocking=True)\n"
    "    ...\n"
    "# a tensor made on the host each step: stage it through a pinned buffer\n"
    "buf = torch.empty(shape, dtype=dtype, pin_memory=True)  # once\n"
    "buf.copy_(host_tensor)\n"
    "x = buf.to(device, non_blocking=True)"
)


@detector(ID, "Host-to-device copies from pageable memory", gpu_only=True)
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    c = _measure(trace, ctx)
    if c is None:
        return []
    save_ns = np.maximum(c.dur - c.pinned_ns, 0.0)
    saving_ms = float(save_ns.sum()) / 1e6 / c.steps
    if saving_ms <= 0:
        return []
    sp = float(c.dur.sum() / max(float(np.minimum(c.dur, c.pinned_ns).sum()), 1.0))
    rep = ctx.whatif(ScaleGpu(memcpy=c.pg.index.to_numpy(), speedup=sp, label="pinned copies"))
    fields: dict = {"est_savings_ms": saving_ms}
    if rep.replayed:
        fields = rep.draft_fields()
    evidence = _evidence(trace, c.pg)
    locs = _locations(trace, ctx, c.pg)
    unpinned = [d for d in ctx.live.dataloaders if d.pin_memory is False]
    dl_locs = run_locations(unpinned, lambda r: "DataLoader(pin_memory=False)")
    return [
        Draft(
            id=ID,
            title="Host-to-device copies from pageable memory",
            **fields,
            confidence="high" if c.measured else "medium",
            summary=_summary(trace, c, saving_ms, len(unpinned)),
            recommendation=_ADVICE,
            snippet=_SNIPPET,
            evidence=evidence,
            locations=merge_locations(dl_locs, locs),
            assumptions=_assumptions(c, sp, rep),
        )
    ]


def _measure(trace: Trace, ctx: Context) -> _Copies | None:
    """The copies; None below ``pageable_memcpy.min_bytes_per_step`` or without a pinned
    bandwidth to compare with."""
    m = rows_in_steps(trace.memcpy, trace)
    pg = m[(m["kind"].astype(str) == "HtoD") & (m["src"].astype(str) == "Pageable")]
    if not len(pg):
        return None
    steps = n_steps(trace)
    bytes_step = float(pg["bytes"].sum()) / steps
    if bytes_step < ctx.t("pageable_memcpy.min_bytes_per_step"):
        return None
    dur = pg["dur_ns"].to_numpy(dtype=np.float64)
    nb = pg["bytes"].to_numpy(dtype=np.float64)
    pageable_gbps = float(nb.sum() / dur.sum()) if dur.sum() > 0 else 0.0
    pinned_gbps, how, measured = _pinned_gbps(trace, ctx, pageable_gbps)
    if pinned_gbps <= 0:
        return None
    pinned_ns = LATENCY_NS + nb / pinned_gbps  # GB/s == bytes/ns
    return _Copies(pg, steps, bytes_step, dur, pageable_gbps, pinned_ns, how, measured)


def _summary(trace: Trace, c: _Copies, saving_ms: float, unpinned: int) -> str:
    copy_ms = float(c.dur.sum()) / 1e6 / c.steps
    per_step = len(c.pg) / c.steps
    summary = (
        f"{per_step:.0f} host-to-device cop{'y' if round(per_step) == 1 else 'ies'} from "
        f"pageable memory {per_step_words(trace)} move {c.bytes_step / 1e6:.1f} MB in "
        f"{copy_ms:.2f} ms ({c.pageable_gbps:.1f} GB/s); from pinned memory they would take "
        f"about {copy_ms - saving_ms:.2f} ms."
    )
    if unpinned:
        summary += f" {unpinned} DataLoader(s) run with pin_memory=False."
    return summary


def _assumptions(c: _Copies, sp: float, rep: Saving) -> tuple[str, ...]:
    return (
        c.how,
        "pinned time per copy = 10 us + bytes / pinned bandwidth; copies that are already at "
        "that rate count for nothing",
        (f"The copies run {sp:.2f}x faster together (their pinned time). " + rep.assumption)
        if rep.replayed
        else f"saving = measured minus pinned time, divided over {c.steps} step(s)",
        "the copy's host blocking is counted by blocking-copy, not here (the savings overlap)",
    )


def _evidence(trace: Trace, pg: pd.DataFrame) -> tuple[Evidence, ...]:
    rows = []
    for nbytes, g in pg.groupby("bytes", sort=False):
        first = g.sort_values("ts_ns").iloc[0]
        rows.append(
            (
                float(g["dur_ns"].sum()),
                Evidence(
                    what=f"Memcpy HtoD (Pageable -> Device), {_size(float(nbytes))} each",
                    count=len(g),
                    total_ms=ms(g["dur_ns"].sum()),
                    example_ts_us=trace.to_trace_us(int(first["ts_ns"])),
                ),
            )
        )
    rows.sort(key=lambda r: -r[0])
    return tuple(e for _, e in rows[:5])


def _locations(trace: Trace, ctx: Context, pg: pd.DataFrame) -> tuple[Location, ...]:
    ops = [int(o) for o in launching_op(trace, pg) if o >= 0]
    return aggregate(ctx.locator.for_ops(ops))
