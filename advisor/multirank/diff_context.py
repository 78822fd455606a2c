"""What ``advisor diff`` says before the kernel attribution: whether the two runs computed the
same thing (``workload``), the one-time work kept out of the headline (``one_time``,
``steady_step_ms``) and what limits each run's step (``bound``); what they asked of the runtime
is :mod:`advisor.multirank.diff_runtime`'s. Pure computation over the sides' digests.

- **Workload**: the top ops of each run (:mod:`advisor.derive.workload`) compared by name; an
  op both runs rank among their top ops whose most frequent input signature (shapes and
  dtypes) is not among the other run's signatures of that op is a change of workload. When
  every such change scales the op's first input by one factor (within 1%), B's step does that
  many times A's work, and the steps are also compared per unit of A's work; when both runs
  know their samples per step (run.json's DataLoader batch size) and they differ, per sample.
- **One-time work**: the part of each steady step the one-time work inside it held with the
  GPU idle (:func:`advisor.analysis.diffdigest.one_time`) is taken out of that step for the
  steady-state median (``steady_step_ms``), which the verdict uses; the steps the analysis
  left out as warm-up are listed beside it.
- **Bound**: ``run.bound`` of each run (:mod:`advisor.replay.bound`) and whether it flipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from advisor.digest import Digest, OpShapes
from advisor.report import Report


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(float(x), nd)


# ---- workload ------------------------------------------------------------------------------


def _elements(sig: str) -> int | None:
    """Elements of the first tensor of a signature (``4x128x1024 float; ...`` -> 524288)."""
    first = sig.split(";")[0].split(" ")[0] if sig else ""
    try:
        dims = [int(x) for x in first.split("x")]
    except ValueError:
        return None
    return int(np.prod(dims)) if dims else None


def _ops(ds: Sequence[Digest]) -> dict[str, OpShapes]:
    w = next((d.workload for d in ds if d.workload is not None), None)
    return {o.name: o for o in w.ops} if w else {}


def _samples(ds: Sequence[Digest]) -> tuple[float | None, str | None]:
    w = next((d.workload for d in ds if d.workload is not None), None)
    return (w.samples_per_step, w.samples_how) if w else (None, None)


def workload_diff(a: Sequence[Digest], b: Sequence[Digest], ma: float, mb: float) -> dict[str, Any]:
    """The ``workload`` block (module doc); ``ma``/``mb``: the steps compared (ms)."""
    oa, ob = _ops(a), _ops(b)
    changes: list[dict[str, Any]] = []
    ratios: list[float] = []
    for name in [n for n in oa if n in ob]:
        sa, sb = oa[name].signatures, ob[name].signatures
        if not sa or not sb:
            continue
        top_a, top_b = sa[0][0], sb[0][0]
        if top_a in {s for s, _ in sb} and top_b in {s for s, _ in sa}:
            continue
        ea, eb = _elements(top_a), _elements(top_b)
        ratio = eb / ea if ea and eb else None
        if ratio is not None:
            ratios.append(ratio)
        changes.append(
            {
                "op": name,
                "a": top_a,
                "b": top_b,
                "a_calls": _r(sa[0][1], 2),
                "b_calls": _r(sb[0][1], 2),
                "ratio": _r(ratio, 4),
            }
        )
    scale = None
    if changes and len(ratios) == len(changes) and max(ratios) <= 1.01 * min(ratios):
        scale = float(np.median(ratios))
    na, how_a = _samples(a)
    nb, how_b = _samples(b)
    normalised: dict[str, Any] | None = None
    per: tuple[str, float, float] | None = None
    if na and nb and na != nb:
        per = ("sample", ma / na, mb / nb)
    elif scale and abs(scale - 1.0) > 0.01:
        per = ("unit of A's work", ma, mb / scale)
    if per is not None:
        unit, x, y = per
        normalised = {
            "unit": unit,
            "a_ms": _r(x, 4),
            "b_ms": _r(y, 4),
            "delta_pct": _r(100.0 * (y - x) / x, 2) if x else None,
        }
    text = None
    if changes:
        c = changes[0]
        text = f"a different workload: {c['op']} [{c['a']}] -> [{c['b']}]"
        if len(changes) > 1:
            text += f" (and {len(changes) - 1} more op(s))"
        if scale:
            text += f"; B's top ops take {scale:g}x the elements"
    elif na and nb and na != nb:
        text = f"a different workload: {na:g} -> {nb:g} samples per step"
    return {
        "differs": text is not None,
        "text": text,
        "ops": changes,
        "scale": _r(scale, 4),
        "samples_per_step": {"a": na, "b": nb, "a_how": how_a, "b_how": how_b},
        "normalised": normalised,
    }


# ---- one-time work and the bound -----------------------------------------------------------


def steady_steps_ms(ds: Sequence[Digest]) -> np.ndarray:
    """The side's steps less the one-time work each held (ms)."""
    parts = []
    for d in ds:
        once = d.one_time.per_step_ms if d.one_time is not None else np.zeros(len(d.step_ms))
        parts.append(np.maximum(d.step_ms - once, 0.0))
    return np.concatenate(parts) if parts else np.zeros(0)


def one_time_side(ds: Sequence[Digest], report: Report) -> dict[str, Any]:
    steps = sum(d.steps for d in ds) or 1
    by_kind: dict[str, float] = {}
    held = 0.0
    for d in ds:
        if d.one_time is None:
            continue
        held += float(d.one_time.per_step_ms.sum())
        for k, v in d.one_time.by_kind_ms.items():
            by_kind[k] = by_kind.get(k, 0.0) + v
    steady = report.run.steady
    excluded = [
        {"step": x.step, "ms": _r(x.ms), "reason": x.reason}
        for x in (steady.steps_excluded if steady else ())
    ]
    return {
        "held_ms_per_step": _r(held / steps),
        "by_kind_ms": {k: _r(v) for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
        "excluded": excluded,
    }


def bound_diff(a: Report, b: Report) -> dict[str, Any] | None:
    ba, bb = a.run.bound, b.run.bound
    if ba is None and bb is None:
        return None
    return {
        "a": ba.by if ba else None,
        "b": bb.by if bb else None,
        "a_shares_pct": dict(ba.shares_pct) if ba else None,
        "b_shares_pct": dict(bb.shares_pct) if bb else None,
        "flipped": bool(ba and bb and ba.by != bb.by),
    }
