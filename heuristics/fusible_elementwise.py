"""Chains of memory-bound elementwise kernels that torch.compile would fuse into one.

**What it detects.** Three or more eager elementwise kernels (``vectorized_elementwise_kernel``,
``unrolled_elementwise_kernel``, ``elementwise_kernel``: add, mul, activation functions and
their backward) running back to back on one stream with no other kernel between them, each
taking the previous one's result, and the same chain (by kernel functors) recurring in at
least half of the steps. Data flow is judged from shapes (the next op takes a tensor of the
shape the previous op produced) and call sites: the same op with the same shapes repeated from
one line of code (a loop over one statement, a benchmark's repetitions) is independent work
that fusion cannot join, and breaks the chain. Fills, copies, index
and scatter/gather kernels do not count, and neither do kernels from the optimizer step,
``zero_grad``, gradient accumulation or DDP's reducer (other findings cover those).

**Why it costs time.** Each elementwise kernel reads its inputs from GPU memory and writes its
output back: a chain of k kernels moves about k times the bytes a fused kernel would, and pays
k launches. Elementwise kernels are memory-bound, so their time follows the bytes moved.

**How the saving is estimated.** Fusing k kernels into one keeps about 1/k of the traffic, so
a chain's kernels run k times faster together. The steady steps are replayed with that (see
docs/savings.md): shorter kernels shorten the step only where the GPU is the bottleneck, and
the saving is what the step loses; the top of the range is the kernel time removed. Where the
replay cannot place the steps, that time is scaled by the GPU busy share of the steps. Launch
overhead removed by fusion is not counted.
Intermediates that backward needs are written anyway; torch.compile's partitioner recomputes
most cheap elementwise ops instead of saving them.

**How to fix.** ``torch.compile(model)`` (Inductor generates one Triton kernel per fused chain),
or a fused implementation of the block (``F.gelu`` instead of a hand-written tanh formula,
``torch.addcmul``, ``torch.lerp``). When the model is already compiled, the chains found run
outside its compiled regions (code left eager, graph breaks): the advice is to compile that code
too or remove the breaks.

**Known false positives.** Independent ops whose shapes happen to connect (traces carry no
tensor identities): compile then fuses fewer of them. Graph breaks inside the chain also stop
fusion. Known misses: ``x = x + 1`` repeated in a loop is a chain but reads as repeats.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from advisor.derive.locate import aggregate
from advisor.derive.timeline import main_busy
from advisor.detect.draft import Draft
from advisor.detect.registry import Context, detector
from advisor.detect.thresholds import register
from advisor.findings import Evidence, Location
from advisor.replay.fixes import Combined, ScaleGpu
from advisor.replay.whatif import Saving
from advisor.trace.model import Trace
from advisor.trace.names import name_mask

from ._compile import model_compiled
from ._dataflow import Flow, kernel_links
from ._kernelname import functor_name as short_name
from ._ops import inherit, kernel_op, parent_has, ranges, runtime_op
from ._per_step import ms, n_steps

ID = "fusible-elementwise"
TITLE = "Unfused chains of elementwise kernels"

register(
    "fusible_elementwise.min_chain",
    3.0,
    "back-to-back elementwise kernels that make a fusible chain",
)
register(
    "fusible_elementwise.min_step_share_pct",
    50.0,
    "% of steps a chain must recur in (repeated per step)",
)
register(
    "fusible_elementwise.min_savings_pct",
    0.5,
    "report only when the estimated saving reaches this % of the median step",
)
COMPILED = re.compile(r"^CompiledFunction")

EXCLUDE_NAMES = ("index_elementwise", "scatter_gather_elementwise", "FillFunctor", "copy_kernel")
# launched by work other findings cover (optimizer, zero_grad, grad accumulation, DDP)
EXCLUDE_OPS = re.compile(
    r"AccumulateGrad|^Optimizer\.|zero_grad|_foreach_|_fused_|reducer|"
    r"^c10d::|^nccl:|record_param_comms"
)
EXCLUDE_RANGES = re.compile(r"^Optimizer\.|zero_grad")

SNIPPET = """model = torch.compile(model)          # fuses elementwise chains into Triton kernels
# or compile just the hot block:
@torch.compile
def bias_gelu(x, bias):
    return torch.nn.functional.gelu(x + bias, approximate="tanh")
"""
RECOMMENDATION = (
    "Compile the model (or the block) with torch.compile: Inductor fuses each chain of "
    "elementwise ops into one kernel that reads the inputs once and writes the result once."
)


def _num(x: float) -> str:
    """3.0 -> "3", 2.5 -> "2.5"."""
    return f"{x:.1f}".removesuffix(".0")


def _elementwise(trace: Trace) -> np.ndarray:
    k = trace.kernels
    names = k["name"].reset_index(drop=True)  # categorical: .str works per distinct name
    ew = np.array(names.str.contains("elementwise_kernel", regex=False), dtype=bool)
    for bad in EXCLUDE_NAMES:
        ew &= ~names.str.contains(bad, regex=False).to_numpy()
    if not ew.any():
        return ew
    # context: the op that launched it, or a CPU range around the launch
    ops_excl = (
        inherit(trace, name_mask(trace.cpu_ops["name"], EXCLUDE_OPS))
        if len(trace.cpu_ops)
        else np.zeros(0, dtype=bool)
    )
    kop = kernel_op(trace)
    if len(ops_excl):
        ew &= ~parent_has(ops_excl, kop)
    win = ranges(trace, EXCLUDE_RANGES)
    rt = trace.runtime
    li = k["launch_idx"].to_numpy()
    if len(win) and len(rt):
        rts, rtid = rt["ts_ns"].to_numpy(), rt["tid"].to_numpy()
        in_win = np.zeros(len(rt), dtype=bool)
        for w in win.itertuples(index=False):
            in_win |= (rtid == w.tid) & (rts >= w.ts_ns) & (rts <= w.end_ns)
        ew &= ~parent_has(in_win, li)
    return ew


def _chains(
    trace: Trace,
    ew: np.ndarray,
    min_chain: int,
    links: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray] | None = None,
) -> list[np.ndarray]:
    """Maximal runs of at least ``min_chain`` elementwise kernels back to back on one stream
    in one step; ``links(prev, next, before)`` (kernel rows of neighbouring pairs, and of the
    kernel before ``prev`` on the stream or -1): whether each pair is data-dependent (a run
    breaks where it is not)."""
    k = trace.kernels
    order = np.lexsort((k["ts_ns"].to_numpy(), k["stream"].to_numpy(), k["device"].to_numpy()))
    dev, stream, step = (k[c].to_numpy()[order] for c in ("device", "stream", "step"))
    if not len(order):
        return []
    e = ew[order]
    same = np.r_[
        False,
        (dev[1:] == dev[:-1])
        & (stream[1:] == stream[:-1])
        & (step[1:] == step[:-1])
        & e[1:]
        & e[:-1],
    ]
    if links is not None and same.any():
        at = np.flatnonzero(same)
        before = np.where(same[at - 1], order[np.maximum(at - 2, 0)], -1)
        same[at] = links(order[at - 1], order[at], before)
    # a chain starts where a kernel does not continue the previous one and runs up to the
    # next such break: maximal runs of linked elementwise kernels
    brk = np.flatnonzero(~same)
    stop = np.r_[brk[1:], len(order)]
    keep = e[brk] & (stop - brk >= min_chain)
    return [order[a:b] for a, b in zip(brk[keep], stop[keep], strict=True)]


def _chain_ns(dur: np.ndarray, chains: list[np.ndarray]) -> dict[int, float]:
    """Kernel time of each chain, keyed by its first kernel row (chains are disjoint)."""
    starts = np.r_[0, np.cumsum([len(c) for c in chains])[:-1]]
    sums = np.add.reduceat(dur[np.concatenate(chains)], starts)  # int64: exact per chain
    return {int(c[0]): float(t) for c, t in zip(chains, sums, strict=True)}


class _Chains(NamedTuple):
    """The chains that recur in enough steps, by the functors of their kernels."""

    kept: dict[tuple[str, ...], list[np.ndarray]]
    ns: dict[int, float]  # kernel time of each chain, by its first kernel row
    real_steps: bool  # the trace marks its steps (without, every chain is kept)
    steps: int


class _Value(NamedTuple):
    ms: float  # the saving per step
    full_ms: float  # the kernel time fusion removes per step
    how: str
    saving: Saving | None  # the replay's, where it placed the steps


@detector(ID, TITLE, needs=("kernels",), gpu_only=True)
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    found = _measure(trace, ctx)
    if found is None:
        return []
    value = _value(trace, ctx, found)
    if value is None:
        return []
    rt_linked = bool(len(trace.runtime)) and bool((runtime_op(trace) >= 0).any())
    return [
        Draft(
            id=ID,
            title=TITLE,
            est_savings_ms=round(value.ms, 3),
            confidence="medium" if found.real_steps and rt_linked else "low",
            summary=_summary(found, value),
            recommendation=_recommendation(trace, ctx, found),
            snippet=SNIPPET,
            evidence=_evidence(trace, found),
            locations=_locations(trace, ctx, found),
            assumptions=(
                "A chain of k memory-bound kernels fused into one moves about 1/k of the bytes: "
                "saving (k-1)/k of the chain's measured kernel time; launch overhead not counted.",
                value.how,
                "Chains must recur in at least "
                f"{ctx.t('fusible_elementwise.min_step_share_pct'):g}% of the steps; optimizer, "
                "zero_grad, gradient accumulation and DDP kernels are excluded.",
            ),
            est_savings_range_ms=(round(value.ms, 3), round(max(value.full_ms, value.ms), 3)),
            saving=value.saving,
        )
    ]


def _measure(trace: Trace, ctx: Context) -> _Chains | None:
    """The chains of linked elementwise kernels that recur in enough steps (None: none)."""
    ew = _elementwise(trace)
    flow = Flow(trace, ctx.locator)
    chains = _chains(
        trace,
        ew,
        int(ctx.t("fusible_elementwise.min_chain")),
        lambda a, b, c: kernel_links(trace, flow, a, b, c),
    )
    if not chains:
        return None
    kept, real_steps = _recurring(trace, ctx, chains)
    if not kept:
        return None
    dur = trace.kernels["dur_ns"].to_numpy()
    return _Chains(kept, _chain_ns(dur, chains), real_steps, n_steps(trace))


def _recurring(
    trace: Trace, ctx: Context, chains: list[np.ndarray]
) -> tuple[dict[tuple[str, ...], list[np.ndarray]], bool]:
    """The chains by the functors of their kernels, those recurring in at least
    ``fusible_elementwise.min_step_share_pct`` of the steps (all where the trace marks no
    steps); and whether it marks them."""
    k = trace.kernels
    kname = k["name"].astype(str).to_numpy()
    kstep = k["step"].to_numpy()
    short = {n: short_name(n) for n in set(kname[np.concatenate(chains)])}
    sig_chains: dict[tuple[str, ...], list[np.ndarray]] = defaultdict(list)
    for c in chains:
        sig_chains[tuple(short[n] for n in kname[c])].append(c)
    real_steps = [int(s) for s in trace.steps["step"]] if not trace.meta.synthetic_steps else []
    need = max(
        1, math.ceil(len(real_steps) * ctx.t("fusible_elementwise.min_step_share_pct") / 100.0)
    )
    kept = {
        s: cs
        for s, cs in sig_chains.items()
        if len({int(kstep[c[0]]) for c in cs if kstep[c[0]] >= 0}) >= need or not real_steps
    }
    return kept, bool(real_steps)


def _busy_share(trace: Trace) -> float:
    """The share of the steps' time the main GPU is busy (1 without steps to measure)."""
    st = trace.steps
    span = int((st["end_ns"] - st["ts_ns"]).sum())
    busy = sum(
        main_busy(trace).covered_ns(int(a), int(b))
        for a, b in zip(st["ts_ns"], st["end_ns"], strict=True)
    )
    return min(1.0, busy / span) if span > 0 else 1.0


def _value(trace: Trace, ctx: Context, found: _Chains) -> _Value | None:
    """The steps replayed with each chain of k kernels k times faster; without a replayable
    step, the kernel time removed scaled by the GPU busy share. None: below the threshold."""
    nst = found.steps
    full_ns = sum(
        found.ns[int(c[0])] * (len(c) - 1) / len(c) for cs in found.kept.values() for c in cs
    )
    share = _busy_share(trace)
    saving_ms = full_ns * share / 1e6 / nst
    full_ms = full_ns / 1e6 / nst
    if saving_ms < ctx.t("fusible_elementwise.min_savings_pct") / 100.0 * ctx.step_ms_median:
        return None
    by_len: dict[int, list[np.ndarray]] = defaultdict(list)
    for cs in found.kept.values():
        for c in cs:
            by_len[len(c)].append(c)
    rep = ctx.whatif(
        Combined(
            [
                ScaleGpu(kernels=np.concatenate(v), speedup=float(n))
                for n, v in sorted(by_len.items())
            ],
            label="fused chains",
        )
    )
    if rep.replayed:
        return _Value(rep.ms, full_ms, rep.assumption, rep)
    how = (
        f"Scaled by the GPU busy share of the steps ({share:.0%}): shorter kernels shorten a "
        f"step only while the GPU is the bottleneck; divided by the {nst} step(s) in the "
        "trace."
    )
    return _Value(saving_ms, full_ms, how, None)


def _summary(found: _Chains, value: _Value) -> str:
    nst = found.steps
    n_chains = sum(len(cs) for cs in found.kept.values())
    n_kernels = sum(len(c) for cs in found.kept.values() for c in cs)
    lens = Counter(len(c) for cs in found.kept.values() for c in cs)
    return (
        f"{_num(n_chains / nst)} chains of back-to-back elementwise kernels per step "
        f"({n_kernels / nst:.0f} kernels, typical length {lens.most_common(1)[0][0]}) "
        f"could each be one fused kernel: about {value.ms:.3f} ms per step "
        f"(up to {value.full_ms:.3f} ms if the GPU were the bottleneck throughout)."
    )


def _evidence(trace: Trace, found: _Chains) -> tuple[Evidence, ...]:
    """The five chains (by functors) with the most kernel time."""
    ns = found.ns
    ranked = sorted(found.kept.items(), key=lambda kv: -sum(ns[int(c[0])] for c in kv[1]))
    kts = trace.kernels["ts_ns"].to_numpy()
    evidence = []
    for sig, cs in ranked[:5]:
        what = " -> ".join(sig[:6]) + (f" ... ({len(sig)} kernels)" if len(sig) > 6 else "")
        first = min(int(kts[c[0]]) for c in cs)
        evidence.append(
            Evidence(
                f"{what}, {_num(len(cs) / found.steps)} per step",
                len(cs),
                ms(sum(ns[int(c[0])] for c in cs)),
                trace.to_trace_us(first),
            )
        )
    return tuple(evidence)


def _locations(trace: Trace, ctx: Context, found: _Chains) -> tuple[Location, ...]:
    kop = kernel_op(trace)
    firsts = [int(kop[c[0]]) for cs in found.kept.values() for c in cs[:20]]
    return aggregate(ctx.locator.for_ops(int(r) for r in firsts if r >= 0))


def _in_compiled(trace: Trace, found: _Chains) -> float:
    """The share of the chains' kernels launched inside a compiled region."""
    kop = kernel_op(trace)
    all_k = np.concatenate([c for cs in found.kept.values() for c in cs])
    compiled = (
        inherit(trace, name_mask(trace.cpu_ops["name"], COMPILED))
        if len(trace.cpu_ops)
        else np.zeros(0, dtype=bool)
    )
    if not len(compiled):
        return 0.0
    return float(np.mean(np.where(kop[all_k] >= 0, compiled[np.clip(kop[all_k], 0, None)], False)))


def _recommendation(trace: Trace, ctx: Context, found: _Chains) -> str:
    in_compiled = _in_compiled(trace, found)
    if in_compiled >= 0.5:
        return (
            f"{in_compiled:.0%} of these kernels already run inside a compiled region "
            "(CompiledFunction) whose backend did not fuse them (aot_eager or an old "
            "torch.compile): use the default Inductor backend. " + RECOMMENDATION
        )
    if model_compiled(trace, ctx):
        return (
            "The model is compiled, but these chains run outside its compiled regions (code "
            "left eager, or split off by graph breaks: see compile-graph-breaks): bring that "
            "code under torch.compile too, or remove the breaks, so Inductor fuses the chains."
        )
    return RECOMMENDATION
