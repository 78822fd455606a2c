"""Convolutions with static shapes while `torch.backends.cudnn.benchmark` is off.

**What it detects.** run.json records `backends.cudnn_benchmark == False` while the trace runs
convolutions whose input shapes (`Input Dims`, record_shapes) are the same in every profiled
step. Without run.json the flag is unknown and the check is skipped; with deterministic cuDNN
requested (`cudnn_deterministic`) it stays silent, since the user chose reproducibility.

**Why it costs time.** With benchmark off, cuDNN picks each convolution's algorithm by
heuristics. With it on, the first call of each new shape times the available algorithms and
caches the fastest; when shapes never change, that one-off cost buys a faster kernel on every
later step. Published speed-ups for convolution forward+backward are 1.27-1.70x.

**How the saving is estimated.** The kernels launched by convolution ops (forward and backward)
made 1.27x faster, the low end of the published range (the range goes up to 1.70x), replayed
on the steady steps (see docs/savings.md): the saving is what the step loses, little when the
host limits it. Confidence is low: modern cuDNN heuristics often already pick the fastest
algorithm, and the gain is only certain after measuring.

**How to fix.** `torch.backends.cudnn.benchmark = True` once at start-up, before the first
convolution. Keep it off when input shapes change every step (variable image sizes, last
partial batch without `drop_last=True`): each new shape is benchmarked again.

**Known false positives.** Traces from one step cannot show that shapes repeat; a shape that
changes only outside the profiled window (e.g. a final smaller batch) re-triggers tuning.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from advisor.derive.locate import aggregate
from advisor.detect.draft import Draft
from advisor.detect.registry import Context, Skip, detector
from advisor.detect.thresholds import register
from advisor.findings import Evidence
from advisor.replay.fixes import ScaleGpu
from advisor.trace.model import Trace
from advisor.trace.names import name_in

from ._matmul import CONV_FWD, CONV_RE, LAYOUT_KERNEL_RE
from ._ops import ancestor_match, gpu_rows_from, parent_has
from ._per_step import ms, n_steps, per_step_words, rows_in_steps

ID = "cudnn-benchmark"
TITLE = "cuDNN autotuning off for static-shape convolutions"
register("cudnn_benchmark.speedup_low", 1.27, "published low-end conv speed-up from benchmark=True")
register("cudnn_benchmark.speedup_high", 1.70, "published high-end conv speed-up")

RECOMMENDATION = (
    "Set torch.backends.cudnn.benchmark = True before the first convolution so cuDNN "
    "times its algorithms once per shape and keeps the fastest. Leave it off if "
    "input shapes vary from step to step (or use drop_last=True for the last batch)."
)
SNIPPET = (
    "import torch\n"
    "torch.backends.cudnn.benchmark = True  # input shapes are fixed\n"
    "loader = DataLoader(dataset, batch_size=64, drop_last=True)"
)


def _static(trace: Trace, rows: np.ndarray) -> tuple[bool | None, int]:
    """Whether every step with convolutions runs the same multiset of (op, Input Dims);
    None when fewer than two steps have convolutions. Also the number of such steps."""
    ops = trace.cpu_ops
    per_step: dict[int, Counter[str]] = {}
    names = ops["name"].astype(str).to_numpy()
    dims = ops["input_dims"].to_numpy()
    for r, st in zip(rows, ops["step"].to_numpy()[rows], strict=True):
        per_step.setdefault(int(st), Counter())[f"{names[r]}{dims[r]!s}"] += 1
    sigs = [per_step[s] for s in sorted(per_step) if s >= 0]
    if len(sigs) < 2:
        return None, len(sigs)
    return all(s == sigs[0] for s in sigs[1:]), len(sigs)


@dataclass(frozen=True)
class _Convs:
    """The steps' convolutions: the outermost forward ops, whether their shapes repeat, and
    their kernels (layout conversions left out)."""

    roots: np.ndarray  # cpu_ops rows
    static: bool | None  # None: fewer than two steps, or no shapes, to compare
    n_conv_steps: int
    kernels: pd.DataFrame
    steps: int

    @property
    def conv_ms(self) -> float:
        return float(self.kernels["dur_ns"].sum()) / 1e6 / self.steps


@detector(ID, TITLE, needs=("run", "cpu_ops"), gpu_only=True)
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    flag = ctx.live.backends.cudnn_benchmark
    if flag is None:
        raise Skip("run.json has no backends.cudnn_benchmark")
    if flag is not False or ctx.live.backends.cudnn_deterministic is True:
        return []
    found = _measure(trace)
    if found is None:
        return []
    fields, how = _value(ctx, found)
    static, n_conv_steps = found.static, found.n_conv_steps
    shapes = (
        f"the same {len(found.roots) // max(1, n_conv_steps)} convolution shapes in each of "
        f"{n_conv_steps} steps"
        if static
        else "shapes that could not be compared across steps"
    )
    return [
        Draft(
            id=ID,
            title=TITLE,
            **fields,
            confidence="low",
            summary=(
                f"torch.backends.cudnn.benchmark is off while convolutions take "
                f"{found.conv_ms:.2f} ms of GPU time {per_step_words(trace)} with {shapes}."
            ),
            recommendation=RECOMMENDATION,
            snippet=SNIPPET,
            evidence=_evidence(trace, found.kernels),
            locations=aggregate(ctx.locator.for_ops(found.roots[:2000])),
            assumptions=(
                how,
                "static shapes: identical conv Input Dims in every profiled step"
                if static
                else "shapes could not be compared (one step or no record_shapes): lower confidence",
                f"the one-off tuning on the first step is not counted; divided over {found.steps} "
                "step(s)",
            ),
        )
    ]


def _measure(trace: Trace) -> _Convs | None:
    """The steps' convolutions, unless their shapes change between steps or they launched no
    kernel (None)."""
    ops = trace.cpu_ops
    parent = ops["parent_idx"].to_numpy()
    is_conv = name_in(ops["name"], CONV_FWD)
    roots = np.flatnonzero(is_conv & ~parent_has(is_conv, parent))
    roots = roots[ops["step"].to_numpy()[roots] >= 0]
    if not len(roots):
        return None
    static, n_conv_steps = _static(trace, roots) if trace.has_shapes else (None, 0)
    if static is False:
        return None  # shapes change between steps: benchmarking would re-run for each new shape
    k = rows_in_steps(trace.kernels, trace)
    conv_mask = ancestor_match(trace, lambda n: bool(CONV_RE.search(n)))
    ck = k[gpu_rows_from(trace, k, conv_mask)] if len(k) else k
    layout = ck["name"].str.contains(LAYOUT_KERNEL_RE).to_numpy() if len(ck) else []
    ck = ck[~np.asarray(layout, dtype=bool)] if len(ck) else ck
    if not len(ck):
        return None
    return _Convs(roots, static, n_conv_steps, ck, n_steps(trace))


def _value(ctx: Context, found: _Convs) -> tuple[dict[str, Any], str]:
    """The convolution kernels sped up by the published range, replayed; without a replayable
    step, their time saved at that speed-up. The draft's fields, and how."""
    conv_ms = found.conv_ms
    lo_x, hi_x = ctx.t("cudnn_benchmark.speedup_low"), ctx.t("cudnn_benchmark.speedup_high")
    low = conv_ms * (1 - 1 / lo_x)
    high = conv_ms * (1 - 1 / hi_x)
    rep = ctx.whatif(
        ScaleGpu(
            kernels=found.kernels.index.to_numpy(),
            speedup=lo_x,
            low=lo_x,
            high=hi_x,
            label="cudnn.benchmark",
        )
    )
    if rep.replayed:
        return rep.draft_fields(), (
            f"The convolution kernels run {lo_x:g}x faster (up to {hi_x:g}x: the published "
            "1.27-1.70x for static shapes, not measured on this model). " + rep.assumption
        )
    return {"est_savings_ms": low, "est_savings_range_ms": (round(low, 3), round(high, 3))}, (
        f"saving = conv GPU time x (1 - 1/{lo_x:g}); range up to x (1 - 1/{hi_x:g}): the "
        "published 1.27-1.70x for static shapes, not measured on this model"
    )


def _evidence(trace: Trace, ck: pd.DataFrame) -> tuple[Evidence, ...]:
    """The four kernels (by name) with the most time."""
    top = ck.groupby(ck["name"].astype(str).map(lambda n: n.split("(")[0][:120]), sort=False)
    ev = sorted(
        ((int(g["dur_ns"].sum()), str(n), len(g), int(g["ts_ns"].min())) for n, g in top),
        reverse=True,
    )[:4]
    return tuple(Evidence(f"conv kernel {n}", c, ms(d), trace.to_trace_us(t)) for d, n, c, t in ev)
