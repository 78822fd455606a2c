"""Device memory allocated and freed through the driver inside steady steps.

**What it detects.** ``cudaMalloc``/``cudaFree`` (``hipMalloc``/``hipFree`` on ROCm, and
pinned-host ``cudaHostAlloc``/``cudaFreeHost``) calls inside the steady steps. PyTorch's caching
allocator calls the driver only while its pool grows, in the first iterations (that growth is
``one-time-init``'s and is not counted here); a call in every step means the memory went back to
the driver and is requested again. The usual causes: ``torch.cuda.empty_cache()`` inside the
loop, the pool switched off (``PYTORCH_NO_CUDA_MEMORY_CACHING=1``), or shapes that change every
step so cached blocks never fit. With run.json, the ``empty_cache`` call sites and the allocator
settings (``PYTORCH_CUDA_ALLOC_CONF``) recorded by ``advisor profile`` name the cause.

**Why it costs time.** A ``cudaMalloc`` takes tens of microseconds to tens of milliseconds
(the driver maps and zeroes pages); ``cudaFree`` also waits for the whole device to finish. The
host is stuck in the call, launches nothing, and the GPU runs dry: the idle gaps ``gpu-idle``
used to count as "host launch".

**How the saving is estimated.** The steady steps are replayed (see docs/savings.md) without
these calls: a warm pool serves the same requests in about a microsecond. The saving is what
the step loses in the replay (nothing where the GPU limits the step); the range keeps half of
the calls' host time (some growth may remain). The device-wide wait inside ``cudaFree`` is not
modelled, so the estimate is low. Where the replay cannot place the steps: the time the GPU sat
idle while the host was inside the calls.

**How to fix.** Remove ``torch.cuda.empty_cache()`` from the loop (call it, if at all, between
phases); keep the caching allocator on (unset ``PYTORCH_NO_CUDA_MEMORY_CACHING``); let it reuse
fragmented memory with ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``; keep shapes stable
(pad or bucket variable lengths); allocate pinned host buffers once and reuse them.

With one steady step in the window (or calls in only one), nothing tells the pool's first
growth from churn: the finding is then information only ("cannot tell whether it recurs").

**Known false positives.** A window whose steady steps still grow the pool (a larger batch
after a few steps, the first validation pass) looks the same; check the call sites.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from advisor.derive.locate import aggregate, run_locations
from advisor.derive.timeline import busy_by_device, main_device
from advisor.detect.draft import Draft
from advisor.detect.registry import Context, detector
from advisor.detect.thresholds import register
from advisor.findings import MIN_STEPS_SEEN, Evidence, Location
from advisor.replay.fixes import ShrinkHost
from advisor.replay.whatif import Saving
from advisor.trace.model import Trace

from ._allocator import FREE_RE, HOST_RE, allocator_calls, allocator_spans
from ._per_step import fmt_ms, ms, n_steps

ID = "allocator-churn"
TITLE = "cudaMalloc/cudaFree inside steady steps"

register(
    "allocator_churn.min_pct",
    1.0,
    "report when allocator calls hold the host this % of the step (mean per step)",
)


def _empty_cache_sites(ctx: Context) -> list[Location]:
    rows = ctx.live.allocator.empty_cache
    return run_locations(
        rows, lambda r: f"torch.cuda.empty_cache() x{'?' if r.calls is None else r.calls}"
    )


def _alloc_conf(ctx: Context) -> tuple[str | None, bool]:
    conf = ctx.live.allocator.alloc_conf
    off = bool(ctx.live.allocator.caching_disabled)
    return (conf if isinstance(conf, str) else None), off


def _cause(calls: pd.DataFrame, sites: list[Location], off: bool, steps: int, seen: int) -> str:
    names = calls["name"].astype(str)
    frees = int(names.str.contains(FREE_RE).sum())
    mallocs = len(calls) - frees
    if off:
        return "run.json shows the caching allocator switched off (PYTORCH_NO_CUDA_MEMORY_CACHING)"
    if sites:
        return "run.json shows torch.cuda.empty_cache() called while the script ran"
    if mallocs / steps >= 50 and frees >= 0.5 * mallocs:
        return (
            "nearly every allocation goes to the driver and is freed again: the caching "
            "allocator looks switched off (PYTORCH_NO_CUDA_MEMORY_CACHING=1)"
        )
    if seen < MIN_STEPS_SEEN:
        return "the pool growing for the first time, or memory freed before the step"
    if mallocs > frees:
        return (
            "memory freed before the step (torch.cuda.empty_cache() or a cache clear) is "
            "requested from the driver again"
        )
    return "memory is returned to the driver and requested again every step"


def _locations(trace: Trace, ctx: Context, calls: pd.DataFrame) -> tuple[Location, ...]:
    ops = calls["op_idx"].to_numpy()
    tid = calls["tid"].to_numpy()
    ts = calls["ts_ns"].to_numpy()
    order = np.argsort(-calls["dur_ns"].to_numpy(), kind="stable")[:500]
    locs = [
        ctx.locator.for_op(int(ops[i])) if ops[i] >= 0 else ctx.locator.at(int(tid[i]), int(ts[i]))
        for i in order
    ]
    return aggregate(locs)


class _Churn(NamedTuple):
    """The allocator calls in the steady steps, the host time they hold and the GPU's idle
    time meanwhile."""

    calls: pd.DataFrame
    names: pd.Series
    steps: int
    host_ms: float  # mean per step
    share: float  # % of the mean step
    spans: tuple[np.ndarray, np.ndarray]  # the calls' host spans (every thread)
    idle_ns: int  # the GPU idle inside them


@detector(ID, TITLE, gpu_only=True)
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    m = _measure(trace, ctx)
    sites = _empty_cache_sites(ctx)
    conf, off = _alloc_conf(ctx)
    if m is None:
        # without iterations the calls cannot be told from the pool's one-time growth
        return [_latent(sites)] if sites else []
    saving_ms = m.idle_ns / 1e6 / m.steps
    # every thread: one that waits on the allocating thread (backward() on the autograd
    # thread) gets the time back too
    rep = ctx.whatif(ShrinkHost(*m.spans, None, keep=0.0, low=0.5, label="warm caching allocator"))
    fields: dict[str, Any] = (
        rep.draft_fields() if rep.replayed else {"est_savings_ms": round(saving_ms, 3)}
    )
    seen = _steps_seen(m.calls, trace)
    cause = _cause(m.calls, sites, off, m.steps, seen)
    host_only = bool(m.names.str.contains(HOST_RE).all())
    locs = tuple((*sites, *_locations(trace, ctx, m.calls))[:5])
    return [
        Draft(
            id=ID,
            title=TITLE,
            **fields,
            confidence="high" if m.share >= 5 else "medium",
            summary=_summary(m, rep, saving_ms, cause),
            recommendation=_advice(conf, host_only),
            snippet=_snippet(conf),
            evidence=_evidence(trace, m),
            locations=locs,
            steps_seen=seen,
            assumptions=_assumptions(rep, m.steps),
        )
    ]


def _measure(trace: Trace, ctx: Context) -> _Churn | None:
    """The calls and their cost; None when they hold the host less than
    ``allocator_churn.min_pct`` of the step, or the trace has no iterations."""
    calls = allocator_calls(trace)
    steps = n_steps(trace)
    # per step: the mean over the steady steps, and its share of the mean step (one statistic
    # for every per-step figure: a cost in some steps only is its mean over all of them)
    host_ms = float(calls["dur_ns"].sum()) / 1e6 / steps if len(calls) else 0.0
    mean_step = trace.mean_step_ms()
    share = 100.0 * host_ms / mean_step if mean_step > 0 else 0
    if not len(calls) or share < ctx.t("allocator_churn.min_pct") or trace.meta.synthetic_steps:
        return None
    dev = main_device(trace)
    s, e = allocator_spans(trace)
    busy = busy_by_device(trace).get(dev) if dev is not None else None
    covered = busy.covered(s, e) if busy is not None and len(s) else np.zeros(len(s), np.int64)
    idle_ns = int(np.sum(e - s - covered))
    names = calls["name"].astype(str)
    return _Churn(calls, names, steps, host_ms, share, (s, e), idle_ns)


def _summary(m: _Churn, rep: Saving, saving_ms: float, cause: str) -> str:
    per_step = len(m.calls) / m.steps
    replayed = (
        f" Replayed without these calls, the step is {fmt_ms(rep.ms)} shorter."
        if rep.replayed
        else ""
    )
    return (
        f"{per_step:.0f} allocator call(s) per steady step "
        f"({', '.join(_counts(m.names, m.steps))}) "
        f"hold the host {fmt_ms(m.host_ms)} per step ({m.share:.0f}% of the step); the GPU "
        f"idles {fmt_ms(saving_ms)} per step meanwhile.{replayed} "
        f"Likely cause: {cause}."
    )


def _evidence(trace: Trace, m: _Churn) -> tuple[Evidence, ...]:
    """One row per call name (most host time first), then the GPU idle inside them."""
    ev = []
    for name, g in m.calls.groupby(m.names, sort=False):
        ev.append(
            Evidence(
                f"{name} calls inside steady steps",
                len(g),
                ms(g["dur_ns"].sum()),
                trace.to_trace_us(int(g["ts_ns"].min())),
            )
        )
    ev.sort(key=lambda x: -x.total_ms)
    ev.append(
        Evidence("GPU idle while the host was in these calls", len(m.spans[0]), ms(m.idle_ns))
    )
    return tuple(ev)


def _assumptions(rep: Saving, steps: int) -> tuple[str, ...]:
    return (
        "Counted: cudaMalloc/cudaFree-family calls (hip* on ROCm) inside the steady steps; "
        "the pool's growth before them is one-time-init's.",
        "A warm caching allocator serves the same requests in about a microsecond: the "
        "calls' host time goes (range: half of it stays), on every thread (a thread waiting "
        "on the allocating one, as backward() waits on the autograd thread, gets it back "
        "too); cudaFree's device-wide wait is not modelled.",
        rep.assumption
        if rep.replayed
        else "Saving = the GPU idle time while the host was inside these calls, divided by the "
        f"{steps} step(s).",
    )


def _steps_seen(calls: pd.DataFrame, trace: Trace) -> int:
    """The steady steps holding allocator calls (the pool's first growth happens once)."""
    return int(np.count_nonzero(np.isin(trace.steps["step"].to_numpy(), calls["step"].to_numpy())))


def _counts(names: pd.Series, steps: int) -> list[str]:
    vc = names.value_counts()
    return [f"{n / steps:.0f} {k}" for k, n in vc.items() if n / steps >= 0.5][:4]


def _advice(conf: str | None, host_only: bool) -> str:
    if host_only:
        return (
            "Allocate pinned host buffers once and reuse them (or let DataLoader's "
            "pin_memory=True, which caches them) instead of pinning new memory every step."
        )
    seg = (
        ""
        if conf and "expandable_segments:true" in conf.replace(" ", "").lower()
        else (
            " Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True so freed memory is reused even "
            "when sizes vary."
        )
    )
    return (
        "Keep the caching allocator's memory across steps: remove torch.cuda.empty_cache() "
        "from the loop and leave the pool on (unset PYTORCH_NO_CUDA_MEMORY_CACHING)."
        + seg
        + " Keep shapes stable (pad or bucket variable lengths) so cached blocks fit."
    )


def _snippet(conf: str | None) -> str:
    return (
        "for batch in loader:\n"
        "    loss = model(batch).sum(); loss.backward(); opt.step()\n"
        "    # torch.cuda.empty_cache()   <- not in the loop: it hands the pool back every step\n"
        "\n"
        "# and run with the pool on and able to reuse fragmented memory:\n"
        "#   unset PYTORCH_NO_CUDA_MEMORY_CACHING\n"
        "#   PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py\n"
    )


def _latent(sites: list[Location]) -> Draft:
    return Draft(
        id=ID,
        title=TITLE,
        est_savings_ms=0.0,
        latent=True,
        confidence="medium",
        summary=(
            f"torch.cuda.empty_cache() is called at {len(sites)} site(s) (run.json); this "
            "trace shows no allocator calls inside its steady steps to measure their cost."
        ),
        recommendation=(
            "Call torch.cuda.empty_cache() between phases at most, never inside the "
            "training loop: the next step has to get the memory from the driver."
        ),
        snippet=_snippet(None),
        locations=tuple(sites[:5]),
        assumptions=(
            "seen by advisor profile's empty_cache hook; cost not measured in this trace",
        ),
    )
