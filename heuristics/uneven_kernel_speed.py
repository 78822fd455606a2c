"""Same work at different speed: identical launches where some run far slower than their peers.

**What it detects.** Kernels launched identically (the same kernel, grid and block, from an op
with the same input shapes, on the same GPU) in the steady steps,
where some calls take ``uneven_kernel_speed.min_ratio`` (1.5x) or more of the group's median.
Only kernels whose time follows their shape are compared (GEMMs, convolutions, elementwise,
normalization, softmax and fill kernels of at least ``uneven_kernel_speed.min_kernel_us``, in
groups of ``uneven_kernel_speed.min_calls`` or more): attention (variable lengths),
communication (waiting for peers), gathers, sorts and unknown kernels can differ with their
data. GEMM, convolution, normalization and softmax kernels need their op's recorded shapes (their
grid leaves out K or the row length); elementwise kernels, whose grid follows their size, are
compared by grid alone when shapes are missing. The finding says when the slow calls ran, which
points at the cause:

- *beside other kernels*: other streams of this process computed during most of their time:
  they shared the GPU (stream contention);
- *the same calls in every step* (the same positions, e.g. 3 layers of 10): something about
  those calls' data: its placement (another GPU's or the host's memory read over a link,
  another NUMA node), its layout or alignment;
- *in one stretch of time*: the GPU was slower then: clocks throttled (power, temperature),
  or another process used the GPU;
- otherwise, scattered: any of these.

**Why it costs time.** The slow calls do the same work as their peers in more time; the steps
wait for them when they are on the critical path.

**How the saving is estimated.** The steps are replayed (docs/savings.md) with each slow call at
its group's median time: what the step would take if the cause were removed (nothing when
other work limits the step). Without a replayable step: the slow calls' time above the median.
Reported from ``uneven_kernel_speed.min_pct`` of the median step.

**How to fix.** Per pattern: for contention, give the critical stream priority
(``torch.cuda.Stream(priority=-1)``) or run less beside it; for the same calls every step,
compare their inputs with the fast calls' (``.is_contiguous()``, ``.stride()``,
``.device``; weights or activations left on the host or another GPU, pinned or managed memory
read over PCIe); for a stretch of time, check clocks and other processes (``nvidia-smi -q -d
PERFORMANCE,CLOCK`` throttle reasons, ``nvidia-smi`` for other processes; ``rocm-smi`` on AMD),
keep the GPU cool and at its power limit, run alone.

**Known false positives.** Kernels whose time depends on their data's values (sparsity,
early exits) look uneven although nothing is wrong; a profiler's own overhead can slow the
first calls after a flush.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from advisor.derive.locate import aggregate
from advisor.detect.draft import Draft
from advisor.detect.registry import Context, detector
from advisor.detect.thresholds import register
from advisor.findings import Evidence
from advisor.replay.fixes import Combined, Fix, ScaleGpu
from advisor.trace.intervals import covered_by, union
from advisor.trace.kernelnames import kernel_family
from advisor.trace.model import Trace

from ._efficiency import shape_text
from ._kernelname import short
from ._ops import kernel_op
from ._per_step import fmt_ms, n_steps

ID = "uneven-kernel-speed"
TITLE = "Same work at different speed: identical kernels, some far slower"
FAMILIES = frozenset({"GEMM", "convolution", "elementwise", "normalization", "softmax", "fill"})
BY_GRID = frozenset({"elementwise", "fill"})  # compared by grid alone when shapes are missing
register("uneven_kernel_speed.min_ratio", 1.5, "a call this many times its group's median is slow")
register("uneven_kernel_speed.min_calls", 6.0, "identical launches a group needs to be compared")
register("uneven_kernel_speed.min_kernel_us", 20.0, "median kernel time a group needs (us)")
register("uneven_kernel_speed.min_pct", 1.0, "report from this % of the median step")
BESIDE = 0.5  # of a slow call's time with other streams computing: it shared the GPU
STRETCH = 0.25  # slow calls within this share of the steps' span: one stretch of time


@detector(ID, TITLE, needs=("kernels",), gpu_only=True)
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    calls = _calls(trace, ctx)
    if not len(calls):
        return []
    steps = n_steps(trace)
    extra_ms = float(calls["extra"].sum()) / 1e6 / steps
    step_ms = ctx.step_ms_median
    if step_ms <= 0 or 100 * extra_ms / step_ms < ctx.t("uneven_kernel_speed.min_pct"):
        return []
    fields, how = _value(ctx, calls, extra_ms)
    when, advice = _pattern(trace, calls)
    top = calls.groupby("key", sort=False)["extra"].sum().sort_values(ascending=False)
    return [
        Draft(
            id=ID,
            title=TITLE,
            confidence="low",
            summary=_summary(calls, top.index[0], steps, extra_ms, when),
            recommendation=advice,
            snippet=SNIPPET,
            evidence=tuple(_evidence(trace, calls, top.index[:6])),
            locations=aggregate(
                ctx.locator.for_ops(int(o) for o in calls["op"].to_numpy() if o >= 0)
            ),
            assumptions=(
                "Identical launches: the same kernel, grid and block, from an op with the same "
                "input shapes (when recorded), on the same GPU; slow: at least "
                f"{ctx.t('uneven_kernel_speed.min_ratio'):g}x the group's median.",
                "Saving: the slow calls replayed at their group's median time (what removing "
                "the cause gives). " + how,
                "The trace shows when the calls ran, not why: clocks and other processes are "
                "not recorded in it.",
            ),
            **fields,
        )
    ]


def _value(ctx: Context, calls: pd.DataFrame, extra_ms: float) -> tuple[dict[str, Any], str]:
    """Each group's slow calls at its median time, replayed; without a replayable step, their
    time above the median (its half as the low end)."""
    fixes: list[Fix] = []
    for _, g in calls.groupby("key", sort=False):
        speed = float(g["dur"].sum()) / float(g["median"].sum())
        fixes.append(ScaleGpu(kernels=g["row"].to_numpy(), speedup=speed, label="peer speed"))
    rep = ctx.whatif(Combined(fixes, label="slow calls at their peers' speed"))
    if rep.replayed:
        return rep.draft_fields(), rep.assumption
    fields = {
        "est_savings_ms": round(extra_ms, 3),
        "est_savings_range_ms": (round(extra_ms / 2, 3), round(extra_ms, 3)),
    }
    how = "Not replayed (no steady step the replay can place): the slow calls' extra time."
    return fields, how


def _summary(calls: pd.DataFrame, top_key: str, steps: int, extra_ms: float, when: str) -> str:
    """How many calls ran how much slower than their peers, the largest group, and when."""
    g0 = calls[calls["key"] == top_key]
    ratio = calls["dur"] / calls["median"]
    hit = calls["step"].nunique()
    where = f" (in {hit} of {steps} steps)" if hit < steps else ""
    return (
        f"{round(len(calls) / steps, 1):g} call(s) per step{where} ran {ratio.min():.1f}-{ratio.max():.1f}x "
        f"slower than identical launches of the same kernel (largest: {g0['label'].iloc[0]}, "
        f"{int(g0['n'].iloc[0])} identical calls, median {fmt_ms(g0['median'].iloc[0] / 1e6)}): "
        f"{fmt_ms(extra_ms)} per step above their peers. {when}"
    )


SNIPPET = """# what differs for the slow calls? compare their inputs with a fast call's
print(x.device, x.is_contiguous(), x.stride(), x.data_ptr() % 256)
# clocks throttled or another process on the GPU?
#   nvidia-smi -q -d PERFORMANCE,CLOCK     (clocks throttle reasons)
#   nvidia-smi                             (processes on the GPU)
"""


def _calls(trace: Trace, ctx: Context) -> pd.DataFrame:
    """The slow calls: row, key, label, dur, median, extra (ns), n (calls in the group), op,
    ts, end, step, device, stream."""
    k = trace.kernels
    if not len(k):
        return pd.DataFrame()
    cats = [str(c) for c in k["name"].cat.categories]
    fam = np.array([kernel_family(c) in FAMILIES for c in cats] + [False], dtype=bool)
    codes = k["name"].cat.codes.to_numpy()
    keep = fam[codes] & ~k["is_comm"].to_numpy(dtype=bool) & (k["step"].to_numpy() >= 0)
    rows = np.flatnonzero(keep)
    if not len(rows):
        return pd.DataFrame()
    ops = kernel_op(trace)[rows]
    dims = trace.cpu_ops["input_dims"].to_numpy() if len(trace.cpu_ops) else np.zeros(0, object)
    shape = [repr(dims[o]) if o >= 0 and isinstance(dims[o], list) else "" for o in ops]
    # a GEMM's, convolution's or row-wise kernel's grid leaves dims out (K, the row length):
    # without the op's shapes only elementwise kernels, whose grid follows their size, compare
    by_grid = np.array([kernel_family(c) in BY_GRID for c in cats] + [False], dtype=bool)
    has = np.array([bool(x) for x in shape], dtype=bool) | by_grid[codes[rows]]
    rows, ops, shape = rows[has], ops[has], [x for x, h in zip(shape, has, strict=True) if h]
    if not len(rows):
        return pd.DataFrame()
    df = pd.DataFrame(
        {
            "row": rows,
            "key": [
                f"{c}|{g}|{b}|{s}|{d}"
                for c, g, b, s, d in zip(
                    codes[rows],
                    k["grid"].to_numpy()[rows],
                    k["block"].to_numpy()[rows],
                    shape,
                    k["device"].to_numpy()[rows],
                    strict=True,
                )
            ],
            "dur": k["dur_ns"].to_numpy()[rows],
            "op": ops,
            "ts": k["ts_ns"].to_numpy()[rows],
            "step": k["step"].to_numpy()[rows],
            "device": k["device"].to_numpy()[rows],
            "stream": k["stream"].to_numpy()[rows],
        }
    )
    return _slow(trace, ctx, df)


def _slow(trace: Trace, ctx: Context, df: pd.DataFrame) -> pd.DataFrame:
    """The calls of ``df`` (one row per kernel, its ``key``) at least
    ``uneven_kernel_speed.min_ratio`` times their group's median, among groups large and long
    enough, with their extra time, position in the step and label."""
    grp = df.groupby("key", sort=False)["dur"]
    df["n"] = grp.transform("size")
    df["median"] = grp.transform("median")
    df = df[
        (df["n"] >= ctx.t("uneven_kernel_speed.min_calls"))
        & (df["median"] >= ctx.t("uneven_kernel_speed.min_kernel_us") * 1e3)
    ]
    slow = df[df["dur"] >= ctx.t("uneven_kernel_speed.min_ratio") * df["median"]].copy()
    slow["extra"] = slow["dur"] - slow["median"]
    slow["end"] = slow["ts"] + slow["dur"]
    # each group's position of a call in its step, for "the same calls in every step"
    df["pos"] = df.sort_values("ts").groupby(["key", "step"]).cumcount()
    slow["pos"] = df.loc[slow.index, "pos"]
    slow["steps_in_group"] = slow["key"].map(df.groupby("key")["step"].nunique())
    slow["label"] = [
        _label(trace, int(r), int(o)) for r, o in zip(slow["row"], slow["op"], strict=True)
    ]
    return slow


def _label(trace: Trace, row: int, op: int) -> str:
    k = trace.kernels
    name = short(str(k["name"].iat[row]), 60)
    grid = k["grid"].iat[row]
    g = "x".join(str(x) for x in grid) if isinstance(grid, list | tuple) else "?"
    if op >= 0:
        ops = trace.cpu_ops
        dims = ops["input_dims"].iat[op]
        shape = f" [{shape_text(dims)}]" if dims else ""
        return f"{name} grid {g} ({ops['name'].iat[op]}{shape})"
    return f"{name} grid {g}"


def _pattern(trace: Trace, calls: pd.DataFrame) -> tuple[str, str]:
    """When the slow calls ran (one sentence) and the advice that fits."""
    k = trace.kernels
    beside = 0
    for (dev, st), g in calls.groupby(["device", "stream"]):
        other = (k["device"].to_numpy() == dev) & (k["stream"].to_numpy() != st)
        s, e = union(k["ts_ns"].to_numpy()[other], k["end_ns"].to_numpy()[other])
        cov = covered_by(s, e, g["ts"].to_numpy(), g["end"].to_numpy())
        beside += int((cov >= BESIDE * g["dur"].to_numpy()).sum())
    if beside >= len(calls) / 2:
        return (
            f"{beside} of the {len(calls)} slow calls ran while other streams of this process "
            "computed: they shared the GPU.",
            "The slow calls ran beside kernels on other streams: give the stream they are on "
            "priority (torch.cuda.Stream(priority=-1)) or run less beside them when they are on "
            "the step's critical path.",
        )
    same = all(
        int(g["steps_in_group"].iloc[0]) >= 2
        and (g["pos"].value_counts() == int(g["steps_in_group"].iloc[0])).all()
        for _, g in calls.groupby("key", sort=False)
    )
    if same:
        return (
            "They are the same calls in every step (the same positions among identical "
            "launches): something about those calls' data.",
            "Compare the slow calls' inputs with the fast ones': their device and placement "
            "(tensors left on the host or another GPU, pinned or managed memory read over PCIe, "
            "another NUMA node), their layout (.is_contiguous(), .stride()) and alignment; make "
            "them like the fast calls'.",
        )
    span = int(trace.steps["end_ns"].max() - trace.steps["ts_ns"].min()) if len(trace.steps) else 0
    spread = int(calls["end"].max() - calls["ts"].min())
    if span > 0 and spread <= STRETCH * span:
        return (
            f"They ran in one stretch of {fmt_ms(spread / 1e6)} of the {fmt_ms(span / 1e6)} "
            "profiled: the GPU was slower then (clocks throttled, or another process on it).",
            "Check the GPU's clocks and other processes while it runs: nvidia-smi -q -d "
            "PERFORMANCE,CLOCK (throttle reasons: power, thermal), nvidia-smi (processes); keep "
            "it cool and at its power limit, and profile with the GPU to itself.",
        )
    return (
        "They are scattered over the steps: clocks, another process on the GPU, or those "
        "calls' data placement.",
        "Check the GPU's clocks and other processes (nvidia-smi -q -d PERFORMANCE,CLOCK; "
        "nvidia-smi), and compare the slow calls' inputs with the fast ones' (device, layout, "
        "alignment).",
    )


def _evidence(trace: Trace, calls: pd.DataFrame, keys: pd.Index) -> list[Evidence]:
    out = []
    for key in keys:
        g = calls[calls["key"] == key]
        worst = g.loc[g["dur"].idxmax()]
        steps = sorted({int(s) for s in g["step"]})
        out.append(
            Evidence(
                f"{g['label'].iloc[0]}: {len(g)} of {int(g['n'].iloc[0])} identical calls at "
                f"{(g['dur'] / g['median']).min():.1f}-{(g['dur'] / g['median']).max():.1f}x the "
                f"median {fmt_ms(g['median'].iloc[0] / 1e6)}, in step(s) "
                f"{', '.join(map(str, steps[:8]))}{' ...' if len(steps) > 8 else ''}",
                len(g),
                round(float(g["extra"].sum()) / 1e6, 3),
                trace.to_trace_us(int(worst["ts"])),
            )
        )
    return out
