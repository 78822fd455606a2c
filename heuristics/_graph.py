"""The whole step captured in CUDA graphs: what it would hold, what it keeps on the host and
which operators keep it from being captured. Shared by ``gpu-idle`` (which values that fix on a
launch-bound step) and the findings whose claims are part of it; not a detector.

A step is *launch-bound* when its GPU idles at least ``gpu_idle.launch_bound_pct`` (50%) of it
waiting for the host to launch the next work (gpu-idle's *host launch* share): most of the step,
as peers flag a GPU under half busy. Its whole-step fix is a CUDA graph
(``torch.compile(mode="reduce-overhead")``, ``torch.cuda.graphs``): one launch per graph, the
kernels back to back, the host's per-operator cost (Python, dispatch, launch) gone between the
launches it replaces (:class:`advisor.replay.fixes.StepGraph`). What a graph does not hold stays:

- host work outside the model's operators that a graph does not replace: DataLoader fetches
  (``dataloader-stall``'s), Python that launches nothing for a while (``host-preprocessing``'s),
  the caching allocator's driver calls (``allocator-churn``'s);
- what ends a graph (:func:`advisor.replay.fixes.run_breaks`): a call that waits for the GPU
  (``.item()``, ``.cpu()``, ``.tolist()``, ``nonzero``, an explicit synchronize, a blocking
  copy). The host work around it stays, and the work after it is a graph of its own.

Those breaking calls are named by the outermost ``aten`` operator that issued them (or the
runtime call itself when no operator did: an explicit ``torch.cuda.synchronize()``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from advisor.detect.registry import Context
from advisor.detect.thresholds import register
from advisor.findings import Evidence, Location
from advisor.replay.graphfix import StepGraph, run_breaks
from advisor.replay.whatif import Saving
from advisor.trace.model import Trace
from advisor.trace.names import name_flags

from ._ops import chain_match, op_names
from ._per_step import fmt_ms, n_steps

register(
    "gpu_idle.launch_bound_pct",
    50.0,
    "a step whose GPU idles this % of it waiting for launches is launch-bound: its whole-step "
    "fix is a CUDA graph",
)


@dataclass(frozen=True)
class Breaks:
    """The operators that end a graph, most frequent first: name, calls per step, an example
    runtime row; their evidence rows and source lines."""

    names: tuple[str, ...]
    per_step: tuple[float, ...]
    evidence: tuple[Evidence, ...]
    locations: tuple[Location | None, ...]


def step_graph(trace: Trace, keep_starts: np.ndarray, keep_ends: np.ndarray) -> StepGraph:
    """The whole-step fix: every kernel and copy the steady steps launch, in graphs, the host
    ranges ``keep_starts``/``keep_ends`` kept."""
    k, m = trace.kernels, trace.memcpy
    return StepGraph(
        kernels=np.flatnonzero(k["step"].to_numpy() >= 0),
        memcpy=np.flatnonzero(m["step"].to_numpy() >= 0),
        keep_starts=np.asarray(keep_starts, dtype=np.int64),
        keep_ends=np.asarray(keep_ends, dtype=np.int64),
        label="the whole step in CUDA graphs",
    )


def capture_breaks(trace: Trace, ctx: Context) -> Breaks:
    """The operators of the steady steps that end a graph (see the module doc)."""
    rows = run_breaks(trace)
    if not len(rows):
        return Breaks((), (), (), ())
    rt = trace.runtime
    ops = trace.cpu_ops
    op_idx = rt["op_idx"].to_numpy()[rows]
    names = op_names(trace)
    if len(ops):
        is_aten = name_flags(ops["name"], lambda n: n.startswith("aten::"))
        outer = chain_match(trace, op_idx, is_aten, outermost=True)
        outer = np.where(outer >= 0, outer, op_idx)
    else:
        outer = np.full(len(rows), -1, dtype=np.int64)
    rt_names = rt["name"].astype(str).to_numpy()[rows]
    label = np.array(
        [
            str(names[o]) if o >= 0 else f"{n} (no operator: an explicit synchronize)"
            for o, n in zip(outer.tolist(), rt_names.tolist(), strict=True)
        ],
        dtype=object,
    )
    steps = n_steps(trace)
    uniq, counts = np.unique(label, return_counts=True)
    order = np.argsort(-counts, kind="stable")
    ev, locs, per = [], [], []
    ts = rt["ts_ns"].to_numpy()[rows]
    dur = rt["dur_ns"].to_numpy()[rows]
    tid = rt["tid"].to_numpy()[rows]
    for j in order.tolist():
        sel = np.flatnonzero(label == uniq[j])
        per.append(len(sel) / steps)
        ev.append(
            Evidence(
                what=f"ends a CUDA graph: {uniq[j]} ({len(sel) / steps:.0f} per step), "
                "a call that waits for the GPU",
                count=len(sel),
                total_ms=round(float(dur[sel].sum()) / 1e6, 3),
                example_ts_us=trace.to_trace_us(int(ts[sel[0]])),
            )
        )
        o = int(outer[sel[0]])
        locs.append(
            ctx.locator.for_op(o) if o >= 0 else ctx.locator.at(int(tid[sel[0]]), int(ts[sel[0]]))
        )
    return Breaks(tuple(str(uniq[j]) for j in order.tolist()), tuple(per), tuple(ev), tuple(locs))


GRAPH_SNIPPET = (
    "# the whole step in CUDA graphs (static shapes; no .item()/.cpu() inside it):\n"
    'model = torch.compile(model, mode="reduce-overhead")\n'
    "# or capture it by hand: g = torch.cuda.CUDAGraph(); with torch.cuda.graph(g): ...; g.replay()"
)


def graph_sentence(rep: Saving, breaks: Breaks) -> str:
    """The summary's sentence on the whole-step fix: the replayed saving of the graph, of
    compile's fusion, and what keeps the step from being one graph."""
    rng = rep.range_ms
    low = (
        f" (compile's fusion, each kernel still launched by the host: {fmt_ms(rng[0])})"
        if rng
        else ""
    )
    out = (
        f" Replayed as CUDA graphs (one launch, the kernels back to back, the host's per-operator "
        f"cost gone), the step is {fmt_ms(rep.ms)} shorter{low}."
    )
    if breaks.names:
        what = ", ".join(
            f"{n} ({k:.0f} per step)"
            for n, k in zip(breaks.names[:3], breaks.per_step, strict=False)
        )
        out += f" It cannot be one graph: {what} wait for the GPU, and each starts a new graph."
    return out


def graph_assumption(rep: Saving) -> str:
    return (
        "Replayed as the whole step in CUDA graphs: every kernel and copy of the steady steps "
        "launched by one graph launch per stretch of launches (1 us per node), the kernels back "
        "to back, the host time between launches gone except DataLoader fetches, quiet Python "
        "frames, allocator calls and the host work before the step's first launch; a call that "
        "waits for the GPU ends a graph and the host work around it stays. The low end is "
        "compile's fusion: the host time between launches goes the same way, but each kernel "
        "keeps its own launch call at its measured cost (no fewer kernels counted). "
    )


def graph_advice(breaks: Breaks, slow_host: bool) -> str:
    """What to do on a launch-bound step (``slow_host``: every operator costs the host far more
    than usual, host-overhead's finding)."""
    first = (
        f"First move what ends a graph out of the step or make it asynchronous: "
        f"{', '.join(breaks.names[:3])} (keep values on the GPU, read them every N steps, "
        "pre-size data-dependent outputs). "
        if breaks.names
        else ""
    )
    machine = (
        "Every operator also costs the host far more than usual: check the CPU and debug modes "
        "first (see host-overhead). "
        if slow_host
        else ""
    )
    return (
        "The host cannot launch work fast enough, and most of the step the GPU waits for it. "
        + machine
        + "Capture the whole step in CUDA graphs (`torch.compile(model, "
        'mode="reduce-overhead")`, or `torch.cuda.graphs` by hand; static shapes and buffers) '
        "so one launch replays every kernel, or at least fuse it (`torch.compile(model)`: "
        "fewer, larger kernels and no per-operator dispatch). " + first + "A larger batch makes "
        "each kernel longer for the same launch cost."
    )
