"""GPU idle time inside the steps, split by what the GPU was waiting for.

**What it detects.** Time inside each step (``ProfilerStep`` range; for a trace without step
markers, the span from the first to the last GPU activity) when the main GPU runs nothing: no
kernel, copy or memset on any stream. Each idle gap is attributed to what the GPU waited on:

- *dataloader*: the host was inside ``enumerate(DataLoader)#...__next__`` (see
  ``dataloader-stall``);
- *sync*: the host had blocked on the GPU and the GPU drained its queue (see ``sync-point``;
  the same ``min(gap, wait)`` figure);
- *allocator*: the host was inside ``cudaMalloc``/``cudaFree`` (``hip*``) calls (see
  ``allocator-churn``; the same figure);
- *preprocessing*: the host was inside Python frames that launch no GPU work for at least
  ``host_preprocessing.min_frame_ms`` (decoding, an image processor, building the batch: see
  ``host-preprocessing``);
- *prelaunch*: the host ran Python outside every operator before the step's first launch (a
  serving engine's scheduler, a loop's bookkeeping, hooks), named by the Python frames that ran
  (``heuristics/_prelaunch.py``); counted when it is at least ``gpu_idle.min_prelaunch_pct`` of
  the step, else part of *host launch*;
- *host launch* (CPU-bound): the work that ends the gap was launched only after the GPU ran dry,
  so the GPU waited for Python, the dispatcher and launch calls (see ``tiny-kernels``);
- *other*: the work that ends the gap had already been queued: the GPU waited on something
  else (an event from another stream, a collective waiting for other ranks, another device).

**Why it costs time.** A step cannot finish faster than the GPU can work through it, but an
idle GPU means the step is bound by something else. Peers flag a GPU less than 50% busy.

**How the saving is estimated.** A *launch-bound* step (the GPU waits for launches at least
``gpu_idle.launch_bound_pct`` of it) is replayed as the whole step in CUDA graphs
(``heuristics/_graph.py``, docs/savings.md): one launch per graph, the kernels back to back, the
host time between launches gone but for what a graph does not hold; the operators that wait for
the GPU (``.item()``, ``.cpu()``, syncs) end a graph and are named. Its range runs from compile's
fusion (every kernel still launched by the host) to the graph, and ``tiny-kernels``,
``host-overhead`` and an optimizer's host time inside it are one row with it. Other steps are
replayed (see docs/savings.md) with
half of the host time spent inside ``aten::`` calls that launch GPU work, while the GPU sat
idle waiting for them, removed (their dispatch and launch cost, which fewer, larger kernels or
CUDA graphs remove; Python and other host work is not touched); the range removes a quarter to
three quarters. The saving is what the step
loses: nothing when the GPU limits it. Where the replay cannot place the steps: half of the
*host launch* idle time spent in those calls, minus the launch gaps ``tiny-kernels`` reports
and the share ``host-overhead`` reports. Allocator calls inside those calls are left to
``allocator-churn`` in both cases.
Only the
steady steps are measured (set-up before them is ``one-time-init``); a trace that cannot be
split into iterations gets no claim, since its span mixes set-up with the loop. The dataloader,
sync, allocator and preprocessing shares are the savings of ``dataloader-stall``,
``sync-point``, ``allocator-churn`` and ``host-preprocessing``, and *other* has no single fix,
so none of them is claimed here (no double
counting).

The *prelaunch* share is overlapped with the steps' own GPU work: as much of it as that work
can hide leaves the step (all of it when the GPU works at least as long; range: half of that),
what preparing a step while the previous one computes gives back.

**How to fix.** Follow the finding named for the largest share. For host-bound steps: fewer,
larger kernels (``torch.compile``, CUDA graphs via ``mode="reduce-overhead"``, larger batches),
CPU preprocessing moved into DataLoader workers, no Python loops over tensors.

**Known false positives.** Steps that are short by design (tiny models, inference at batch 1)
are launch-bound by nature.
Only the busiest device is analyzed in multi-GPU processes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from advisor.derive.dataloader import fetches
from advisor.derive.kind import trace_kind
from advisor.derive.locate import aggregate
from advisor.derive.quality import affected_spans
from advisor.derive.timeline import Busy, Intervals, busy_by_device, main_device, subtract, union
from advisor.derive.waits import waited_spans
from advisor.detect.draft import Draft
from advisor.detect.registry import Context, detector
from advisor.detect.thresholds import register
from advisor.findings import Evidence
from advisor.replay.fixes import Combined, Fix, ShrinkHost
from advisor.replay.whatif import Saving
from advisor.trace.model import Trace

from ._allocator import allocator_spans, without_allocator
from ._compile import model_compiled
from ._graph import (
    GRAPH_SNIPPET,
    Breaks,
    capture_breaks,
    graph_advice,
    graph_assumption,
    graph_sentence,
    step_graph,
)
from ._host_cost import excess_idle_ns
from ._launch import launching_calls, reported_gaps
from ._per_step import fmt_ms, in_steps, n_steps
from ._prelaunch import (
    PRELAUNCH_ASSUMPTION,
    PRELAUNCH_SNIPPET,
    PreLaunch,
    prelaunch,
    prelaunch_advice,
    prelaunch_evidence,
    prelaunch_sentence,
)
from ._preprocess import preprocessing_spans
from ._syncs import sync_events

ID = "gpu-idle"
TITLE = "GPU idle inside steps"

register("gpu_idle.min_idle_pct", 10.0, "report when the GPU is idle this % of the step time")
register(
    "gpu_idle.min_prelaunch_pct",
    1.0,
    "claim the host's Python before a step's first launch when the GPU idles this % of the "
    "step waiting for it",
)
register(
    "gpu_idle.host_fraction",
    0.5,
    "share of host-launch idle time claimed as saving (beyond tiny-kernels')",
)

CATS = ("host", "prelaunch", "allocator", "preprocessing", "dataloader", "sync", "other")
LABELS = {
    "host": "waiting for the host to launch work (CPU-bound)",
    "prelaunch": "waiting for the host's Python before the step's first launch (outside any "
    "operator)",
    "allocator": "waiting while the host was in cudaMalloc/cudaFree (allocator)",
    "preprocessing": "waiting while the host ran Python that launches nothing (preprocessing)",
    "dataloader": "waiting for the DataLoader",
    "sync": "drained by a host-device sync",
    "other": "work queued but waiting on another stream, device or rank",
}
FINDING = {
    "dataloader": "dataloader-stall",
    "sync": "sync-point",
    "host": "tiny-kernels",
    "allocator": "allocator-churn",
    "preprocessing": "host-preprocessing",
}


_Spans = tuple[np.ndarray, np.ndarray]


class _Gaps(NamedTuple):
    """The main GPU's idle gaps inside the steps (or its active span without step markers)."""

    dev: int
    gs: np.ndarray
    ge: np.ndarray
    span_ns: int
    idle_ns: int
    idle_pct: float
    unrecorded: bool  # spans the trace did not fully record, counted as busy


@dataclass(frozen=True)
class _Split:
    """Each gap's idle time by what the GPU waited for (``by_cat``), and the host spans that
    explain it."""

    by_cat: dict[str, np.ndarray]
    tot: dict[str, int]
    pct: dict[str, float]
    rest: np.ndarray  # neither dataloader, sync, allocator, preprocessing nor prelaunch
    host: np.ndarray  # per gap: the work ending it was launched only after the GPU ran dry
    tail: np.ndarray  # per gap: no GPU work after it in the trace
    dl: _Spans
    pre: _Spans
    pl: PreLaunch
    with_pl: bool  # the prelaunch share is claimed (else part of host launch)


class _Claim(NamedTuple):
    """The host-launch idle time a launch-side fix removes, and what other findings claim."""

    claim_ns: int  # launching calls' host time in the host-launch gaps
    tiny_ns: int  # tiny-kernels' launch gaps
    over_ns: int  # host-overhead's share
    launches: _Spans  # those calls, less allocator calls and the host's waits for the device
    launch_bound: bool


class _Value(NamedTuple):
    rep: Saving
    fields: dict[str, Any]
    capped: str  # the cap's sentence ("" when the idle time did not cap the saving)


def _taken(trace: Trace, *spans: _Spans) -> _Spans:
    """The union of ``spans`` and the allocator calls: host time other findings explain."""
    parts = [*spans, allocator_spans(trace)]
    return union(
        np.concatenate([np.asarray(p[0], np.int64) for p in parts]),
        np.concatenate([np.asarray(p[1], np.int64) for p in parts]),
    )


def _windows(trace: Trace, busy: Busy) -> list[tuple[int, int]]:
    """The time ranges analyzed: the steps, or the device's active span for a synthetic step."""
    st = trace.steps
    wins = [(int(a), int(b)) for a, b in zip(st["ts_ns"], st["end_ns"], strict=True)]
    if trace.meta.synthetic_steps and len(busy.starts):  # the GPU's active span in the step
        lo, hi = wins[0][0], wins[-1][1]
        s = busy.starts[(busy.ends > lo) & (busy.starts < hi)]
        e = busy.ends[(busy.ends > lo) & (busy.starts < hi)]
        wins = [(max(lo, int(s[0])), min(hi, int(e[-1])))] if len(s) else wins
    return wins


def _overlap(gs: np.ndarray, ge: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """ns of each gap [gs, ge) covered by the disjoint sorted intervals [s, e)."""
    if not len(s):
        return np.zeros(len(gs), dtype=np.int64)
    return Intervals(s, e).covered(gs, ge)


def _intersect(a: _Spans, b: _Spans) -> _Spans:
    """Intersection of two disjoint sorted interval sets (where both cover)."""
    (as_, ae), (bs, be) = a, b
    if not len(as_) or not len(bs):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    pts = np.concatenate([as_, ae, bs, be]).astype(np.int64)
    step = np.concatenate(
        [np.ones(len(as_)), -np.ones(len(ae)), np.ones(len(bs)), -np.ones(len(be))]
    ).astype(np.int64)
    o = np.lexsort((step, pts))  # at one point, ends before starts (half-open intervals)
    pts, depth = pts[o], np.cumsum(step[o])
    both = np.flatnonzero(depth[:-1] == 2)
    lo, hi = pts[both], pts[both + 1]
    keep = hi > lo
    return lo[keep], hi[keep]


@detector(ID, TITLE, gpu_only=True)
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    g = _gaps(trace, ctx)
    if g is None:
        return []
    sp = _split(trace, ctx, g)
    cl = _claim(trace, ctx, g, sp)
    val = _value(trace, ctx, g, sp, cl)
    steps = n_steps(trace)
    largest = max(CATS, key=lambda c: sp.tot[c])
    ref = _pointer(largest, cl)
    breaks = capture_breaks(trace, ctx) if cl.launch_bound else None
    pl = sp.pl
    recommendation, snippet = _remedy(trace, ctx, pl, breaks, largest, ref)
    return [
        Draft(
            id=ID,
            title=TITLE,
            **val.fields,
            confidence="medium" if not trace.meta.synthetic_steps else "low",
            summary=_summary(trace, g, sp, val, breaks, largest, ref),
            recommendation=recommendation,
            snippet=snippet,
            evidence=_evidence(trace, g, sp)
            + (breaks.evidence if breaks is not None else ())
            + (prelaunch_evidence(pl, steps, trace) if sp.with_pl else ()),
            locations=aggregate(
                [
                    *(breaks.locations if breaks is not None else ()),
                    *(pl.locations if sp.with_pl else ()),
                ]
            ),
            assumptions=_assumptions(trace, ctx, g, sp, cl, val, breaks),
            extra={
                "idle_pct": round(g.idle_pct, 2),
                "split_pct": {c: round(sp.pct[c], 2) for c in CATS},
                # the checks its text points to: pointers to ones that did not report are
                # taken out (advisor/analysis/pointers.py)
                "see": (*FINDING.values(), "host-overhead"),
            },
        )
    ]


def _gaps(trace: Trace, ctx: Context) -> _Gaps | None:
    """The main GPU's idle gaps; None without a GPU or when it idles less than
    ``gpu_idle.min_idle_pct`` of the steps."""
    dev = main_device(trace)
    if dev is None:
        return None
    busy = busy_by_device(trace)[dev]
    hs, he = affected_spans(trace)
    if len(hs):  # spans the trace did not fully record (graph replays) are not idle
        busy = Busy(*union(np.r_[busy.starts, hs], np.r_[busy.ends, he]), device=dev)
    wins = _windows(trace, busy)
    parts = [busy.gaps(lo, hi) for lo, hi in wins]
    gs = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int64)
    ge = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int64)
    span_ns = sum(hi - lo for lo, hi in wins)
    idle_ns = int(np.sum(ge - gs))
    idle_pct = 100.0 * idle_ns / span_ns if span_ns > 0 else 0.0
    if idle_pct < ctx.t("gpu_idle.min_idle_pct") or not len(gs):
        return None
    return _Gaps(dev, gs, ge, span_ns, idle_ns, idle_pct, bool(len(hs)))


def _split(trace: Trace, ctx: Context, g: _Gaps) -> _Split:
    """Each gap's idle time split by what the host was doing (the module docstring's list)."""
    gs, ge = g.gs, g.ge
    calls = fetches(trace)
    calls = calls[in_steps(trace, calls["ts_ns"].to_numpy(np.int64))]
    dl = union(calls["ts_ns"].to_numpy(np.int64), calls["end_ns"].to_numpy(np.int64))
    sy = _sync_spans(trace, g.dev)
    dl_ns = _overlap(gs, ge, *dl)
    sync_ns = _overlap(gs, ge, *sy) - _overlap(gs, ge, *_intersect(dl, sy))
    # allocator calls in the rest of the gap (host stuck in the driver, not launching)
    alloc_ns = np.minimum(_overlap(gs, ge, *allocator_spans(trace)), ge - gs - dl_ns - sync_ns)
    # Python frames that launch nothing (host-preprocessing's): not waiting for launches
    min_frame_ns = int(ctx.t("host_preprocessing.min_frame_ms") * 1e6)
    pre = preprocessing_spans(trace, min_frame_ns)
    pre_ns = np.minimum(_overlap(gs, ge, *pre), ge - gs - dl_ns - sync_ns - alloc_ns)
    rest = ge - gs - dl_ns - sync_ns - alloc_ns - pre_ns
    # the host's Python before each step's first launch, outside any operator
    pl = prelaunch(trace, ctx, g.dev, (gs, ge), _taken(trace, dl, sy, pre))
    pl_ns = np.minimum(_overlap(gs, ge, *union(pl.starts, pl.ends)), rest)
    with_pl = 100.0 * int(pl_ns.sum()) >= ctx.t("gpu_idle.min_prelaunch_pct") * g.span_ns
    pl_ns = pl_ns if with_pl else np.zeros_like(pl_ns)  # too little: part of the launch share
    rest = rest - pl_ns
    host, tail = _launched_late(trace, g.dev, gs, ge)
    by_cat = {
        "host": np.where(host, rest, 0),
        "prelaunch": pl_ns,
        "allocator": alloc_ns,
        "preprocessing": pre_ns,
        "dataloader": dl_ns,
        "sync": sync_ns,
        "other": np.where(host, 0, rest),
    }
    tot = {c: int(v.sum()) for c, v in by_cat.items()}
    pct = {c: 100.0 * tot[c] / g.span_ns for c in CATS}
    return _Split(by_cat, tot, pct, rest, host, tail, dl, pre, pl, with_pl)


def _sync_spans(trace: Trace, dev: int) -> _Spans:
    """The GPU's idle time each host-device sync on ``dev`` caused (sync-point's figure)."""
    ev = sync_events(trace)
    ev = ev[(ev["device"] == dev) & (ev["caused_ns"] > 0)] if len(ev) else ev
    if not len(ev):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return union(
        ev["idle_from_ns"].to_numpy(dtype=np.int64),
        (ev["idle_from_ns"] + ev["caused_ns"]).to_numpy(dtype=np.int64),
    )


def _claim(trace: Trace, ctx: Context, g: _Gaps, sp: _Split) -> _Claim:
    """The launching calls' host time while the GPU waited for it, and the shares of it that
    tiny-kernels and host-overhead report."""
    gs, ge = g.gs, g.ge
    tiny = reported_gaps(trace, ctx)
    tiny_ns = int(tiny.loc[tiny["device"] == g.dev, "gap_ns"].sum()) if len(tiny) else 0
    # idle after the trace's last GPU work: no launch shows what the host was doing
    # only the host time spent issuing GPU work (aten calls that launch) is what fewer, larger
    # kernels or CUDA graphs remove; Python and other host work in the gap is not claimed
    issuing = np.minimum(sp.rest, _overlap(gs, ge, *launching_calls(trace)))
    claim_ns = int(np.where(sp.host & ~sp.tail, issuing, 0).sum())
    # host-launch idle due to operators costing far more than typical is host-overhead's
    over_ns = excess_idle_ns(trace, ctx)
    # the launching calls' host time while the GPU waited for it (host-launch idle gaps), less
    # the allocator calls inside them (allocator-churn's) and the host's waits for the device
    # (not its own work: advisor.derive.waits)
    hm = sp.host & ~sp.tail
    ls, le, _ = without_allocator(trace, *_intersect(launching_calls(trace), (gs[hm], ge[hm])))
    ls, le = subtract(ls, le, *waited_spans(trace))
    # launch-bound: the GPU waits for launches most of the step
    launch_bound = sp.pct["host"] >= ctx.t("gpu_idle.launch_bound_pct")
    return _Claim(claim_ns, tiny_ns, over_ns, (ls, le), launch_bound)


def _value(trace: Trace, ctx: Context, g: _Gaps, sp: _Split, cl: _Claim) -> _Value:
    """The launch-side fix replayed (the closed-form share of the claim where it cannot be),
    capped at the GPU's idle time for a whole-step graph; nothing without iterations."""
    frac = ctx.t("gpu_idle.host_fraction")
    steps = n_steps(trace)
    saving_ms = frac * max(0, cl.claim_ns - cl.tiny_ns - cl.over_ns) / 1e6 / steps
    rep = ctx.whatif(_fix(trace, g, sp, cl, frac))
    capped = ""
    idle_ms = g.idle_ns / 1e6 / steps
    # a graph changes when the GPU work starts, never how long it runs: the step cannot get
    # shorter than the GPU's own work, so no more than its idle time is claimed (the replay
    # finds more where communication comes to overlap compute: comm-overlap's cause)
    at_most = rep.at_most(idle_ms) if cl.launch_bound and rep.replayed else rep
    if at_most is not rep:
        rep = at_most
        capped = (
            f" Capped at the GPU's idle time ({fmt_ms(idle_ms)} per step): graphs change when "
            "the GPU work starts, not how long it runs; more than that would come from other "
            "streams' work (communication) overlapping compute, which is not the graph's to claim."
        )
    fields: dict[str, Any] = {"est_savings_ms": saving_ms}
    if rep.replayed and (len(cl.launches[0]) or cl.launch_bound or sp.with_pl):
        fields = rep.draft_fields()
    if trace.meta.synthetic_steps:
        # no iterations: the span mixes set-up, teardown and the loop, and nothing says how
        # much of the host's time a launch-side fix would remove (no claim; see one-time-init)
        fields = {"est_savings_ms": 0.0}
    return _Value(rep, fields, capped)


def _fix(trace: Trace, g: _Gaps, sp: _Split, cl: _Claim, frac: float) -> Fix:
    """The whole step in CUDA graphs (launch-bound) or less launch overhead, and the prelaunch
    Python off the step's start when it is claimed."""
    if cl.launch_bound:  # the whole-step fix: the step in CUDA graphs, compile's fusion the low end
        fix: Fix = step_graph(trace, *_taken(trace, sp.dl, (sp.pl.starts, sp.pl.ends), sp.pre))
    else:
        fix = ShrinkHost(
            *cl.launches,
            keep=1.0 - frac,
            low=1.0 - frac / 2,
            high=max(0.0, 1.0 - 1.5 * frac),
            label="less launch overhead",
        )
    if sp.with_pl:  # and that Python off the step's start
        pl_fix = sp.pl.fix(g.span_ns - g.idle_ns)  # hidden under the steps' GPU work
        fix = Combined((fix, pl_fix), label=f"{fix.label}; {pl_fix.label}")
    return fix


def _pointer(largest: str, cl: _Claim) -> str | None:
    """The finding the largest share points to (None: host launch that no other finding
    reports)."""
    ref = FINDING.get(largest)
    if largest == "host" and cl.over_ns:
        ref = "host-overhead"
    elif largest == "host" and not cl.tiny_ns:
        ref = None
    return ref


def _remedy(
    trace: Trace,
    ctx: Context,
    pl: PreLaunch,
    breaks: Breaks | None,
    largest: str,
    ref: str | None,
) -> tuple[str, str]:
    """The recommendation and its snippet: the whole-step graph on a launch-bound step, else
    the fix for the largest share."""
    if breaks is not None:
        return graph_advice(breaks, ref == "host-overhead"), GRAPH_SNIPPET
    if largest == "prelaunch":
        return prelaunch_advice(pl, trace_kind(trace)), PRELAUNCH_SNIPPET
    return _advice(largest, ref, model_compiled(trace, ctx)), _SNIPPETS[largest]


def _evidence(trace: Trace, g: _Gaps, sp: _Split) -> tuple[Evidence, ...]:
    """One row per share, largest first, with its largest gap as the example."""
    evidence = []
    for c in sorted(CATS, key=lambda c: -sp.tot[c]):
        if sp.tot[c] <= 0:
            continue
        v = sp.by_cat[c]
        k = int(np.argmax(v))
        evidence.append(
            Evidence(
                what=f"{LABELS[c]}: {sp.pct[c]:.1f}% of step time",
                count=int(np.count_nonzero(v)),
                total_ms=round(sp.tot[c] / 1e6, 3),
                example_ts_us=trace.to_trace_us(int(g.gs[k])),
            )
        )
    return tuple(evidence)


def _summary(
    trace: Trace,
    g: _Gaps,
    sp: _Split,
    val: _Value,
    breaks: Breaks | None,
    largest: str,
    ref: str | None,
) -> str:
    steps = n_steps(trace)
    split = ", ".join(
        f"{sp.pct[c]:.0f}% {c if c != 'host' else 'host launch'}"
        for c in sorted(CATS, key=lambda c: -sp.tot[c])
        if sp.tot[c] > 0
    )
    see = f" The largest share is {largest}: see {ref}." if ref else ""
    more = graph_sentence(val.rep, breaks) if breaks is not None and "saving" in val.fields else ""
    if sp.with_pl:
        more += prelaunch_sentence(sp.pl, steps, g.span_ns - g.idle_ns)
    span_word = "of the GPU's active span" if trace.meta.synthetic_steps else "of each step"
    return (
        f"GPU {g.dev} is idle {g.idle_pct:.0f}% {span_word} "
        f"({fmt_ms(g.idle_ns / 1e6 / steps)} per step): {split}.{see}{more}"
    )


def _assumptions(
    trace: Trace,
    ctx: Context,
    g: _Gaps,
    sp: _Split,
    cl: _Claim,
    val: _Value,
    breaks: Breaks | None,
) -> tuple[str, ...]:
    return (
        "Idle = step time not covered by any kernel, copy or memset on the device (all "
        "streams); a trace without step markers is measured from its first to its last "
        "GPU activity.",
        _how(trace, ctx, sp, cl, val, breaks),
        "Only the steady steps are measured: set-up outside them (see one-time-init) is "
        "not idle time of a step.",
        *(
            (
                "Spans the trace did not fully record (CUDA-graph replays, see "
                "run.trace_quality) are counted as busy, not idle.",
            )
            if g.unrecorded
            else ()
        ),
        "The dataloader, sync, allocator and preprocessing shares are the savings of "
        "dataloader-stall, sync-point, allocator-churn and host-preprocessing (the same "
        "time); they are not claimed again here. 'other' is not claimed.",
    )


def _how(
    trace: Trace, ctx: Context, sp: _Split, cl: _Claim, val: _Value, breaks: Breaks | None
) -> str:
    """How the saving was obtained: the replayed fix, or the closed-form share of the claim."""
    frac = ctx.t("gpu_idle.host_fraction")
    steps = n_steps(trace)
    if "saving" in val.fields:
        how = (
            graph_assumption(val.rep)
            if breaks is not None
            else f"Replayed with {frac:g} of the host time inside aten calls that launch GPU work, "
            f"during the host-launch idle gaps ({fmt_ms(cl.claim_ns / 1e6 / steps)} per step), "
            f"removed (range {frac / 2:g}-{min(1.0, 1.5 * frac):g}); it overlaps tiny-kernels' "
            "launch gaps" + (" and host-overhead's claim. " if cl.over_ns else ". ")
        )
        if sp.with_pl:
            how += PRELAUNCH_ASSUMPTION
        return how + val.rep.assumption + val.capped
    return (
        f"Saving = {frac:g} x the host-launch idle time during which the host was inside "
        f"aten calls that launch GPU work ({fmt_ms(cl.claim_ns / 1e6 / steps)} per step; "
        "Python and other host work in the gaps is not claimed), minus the launch gaps "
        f"tiny-kernels reports ({fmt_ms(cl.tiny_ns / 1e6 / steps)} per step) and the share "
        f"host-overhead reports ({fmt_ms(cl.over_ns / 1e6 / steps)} per step), divided by the "
        f"{steps} step(s); idle time after the trace's last GPU work is not claimed"
        + (
            "; none is claimed in a trace with no iterations (set-up and loop are mixed)."
            if trace.meta.synthetic_steps
            else "."
        )
    )


def _launched_late(
    trace: Trace, dev: int, gs: np.ndarray, ge: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per gap: (was the work that ended it launched only after the GPU ran dry, is no GPU work
    left in the trace after it). A gap nothing follows counts as waiting for the host."""
    act = trace.gpu_activity()
    act = act[act["device"] == dev]
    ts = act["ts_ns"].to_numpy()
    li = act["launch_idx"].to_numpy()
    rt_end = trace.runtime["end_ns"].to_numpy() if len(trace.runtime) else np.zeros(0, np.int64)
    i = np.searchsorted(ts, ge, side="left")
    ok = i < len(ts)
    nxt = np.where(ok, li[np.clip(i, 0, len(ts) - 1)], -1) if len(ts) else np.full(len(ge), -1)
    linked = nxt >= 0
    end = np.where(linked, rt_end[np.clip(nxt, 0, None)], 0) if len(rt_end) else np.zeros(len(ge))
    return np.asarray((linked & (end >= gs)) | ~ok, dtype=bool), np.asarray(~ok, dtype=bool)


def _advice(largest: str, ref: str | None, compiled: bool = False) -> str:
    if largest == "dataloader":
        return (
            "The GPU mostly waits for the next batch: load data in background workers "
            "(see dataloader-stall: num_workers, pin_memory, persistent_workers)."
        )
    if largest == "sync":
        return (
            "The GPU mostly idles after host-device syncs: remove or defer them (see sync-point)."
        )
    if largest == "allocator":
        return (
            "The GPU mostly idles while the host allocates or frees device memory through "
            "the driver (see allocator-churn: no empty_cache in the loop, caching "
            "allocator on, expandable_segments)."
        )
    if largest == "preprocessing":
        return (
            "The GPU mostly idles while the host runs Python that launches nothing "
            "(preprocessing: see host-preprocessing): move it into DataLoader workers or onto "
            "the GPU, or overlap it with the GPU's work."
        )
    if largest == "other":
        return (
            "The GPU had work queued but waited: look at the example gap in Perfetto for "
            "cross-stream events, collectives waiting for other ranks or another device."
        )
    if ref == "host-overhead":
        return (
            "The host cannot launch work fast enough because every operator costs it far "
            "more than usual: check the CPU (affinity, governor, other jobs) and debug modes "
            "first (see host-overhead), then issue fewer operators (`torch.compile`, CUDA "
            "graphs)."
        )
    tk = " (see tiny-kernels)" if ref else ""
    how = (
        'the model is compiled: CUDA graphs (`mode="reduce-overhead"`)'
        if compiled
        else '`torch.compile`, CUDA graphs (`mode="reduce-overhead"`)'
    )
    return (
        "The host cannot launch work fast enough: cut per-step CPU overhead with fewer, "
        f"larger kernels{tk}: {how}, larger batches; move CPU preprocessing into DataLoader "
        "workers and avoid Python loops over tensors."
    )


_SNIPPETS = {
    "host": 'model = torch.compile(model, mode="reduce-overhead")  # fewer launches, CUDA graphs',
    "dataloader": "loader = DataLoader(dataset, batch_size=bs, num_workers=4, pin_memory=True,\n"
    "                    persistent_workers=True)",
    "sync": "running += loss.detach()        # instead of running += loss.item()",
    "preprocessing": "loader = DataLoader(items, batch_size=bs, num_workers=4,\n"
    "                    collate_fn=preprocess_batch)  # preprocessing off the step",
    "allocator": "# no torch.cuda.empty_cache() in the loop; run with\n"
    "# PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
    "other": "# open the trace in Perfetto and look at the streams around the example timestamp",
}
