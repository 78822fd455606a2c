"""``advisor try``'s figures: per fix, the step before and after, the measured saving beside the
advisor's estimate, the numerics check and what the patch did (pure computation; no printing).

Step times are the steady steps of each run's profiled window (the same steps the advisor's
estimates are made on), pooled over the repeats. The spread is the interquartile range; a
saving smaller than two standard errors of the difference of the two medians (estimated from
those ranges, :func:`noise_ms`) is called "within noise".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from advisor.findings import Finding

DEFAULT_LOSS_RTOL = 1e-3


@dataclass
class RunData:
    """One configuration (before, after, or one fix alone), over its repeats."""

    label: str
    fixes: tuple[str, ...]
    folders: list[str] = field(default_factory=list)
    step_ms: list[float] = field(default_factory=list)
    losses: list[list[float | None]] = field(default_factory=list)
    outputs: list[list[float | None]] = field(default_factory=list)  # forward fingerprints
    trial: dict[str, Any] = field(default_factory=dict)  # run.json "try" of its first run
    findings: list[Finding] = field(default_factory=list)  # of its first run
    step_ms_median_report: float = 0.0
    failed: str | None = None


def step_stats(step_ms: list[float]) -> dict[str, Any]:
    if not step_ms:
        return {
            "steps": 0,
            "median_ms": None,
            "p25_ms": None,
            "p75_ms": None,
            "min_ms": None,
            "max_ms": None,
        }
    v = np.asarray(step_ms, dtype=float)
    p25, med, p75 = np.percentile(v, [25, 50, 75])
    return {
        "steps": len(v),
        "median_ms": _r(med),
        "p25_ms": _r(p25),
        "p75_ms": _r(p75),
        "min_ms": _r(v.min()),
        "max_ms": _r(v.max()),
    }


def _r(x: float, nd: int = 3) -> float:
    return round(float(x), nd)


def estimate(
    findings: list[Finding], finding_ids: set[str], step_ms: float
) -> tuple[float, list[str]]:
    """The advisor's estimated saving for fixes answering ``finding_ids``: the sum over the
    before run's findings with those ids, never above the step (savings overlap)."""
    hits = [f for f in findings if f.id in finding_ids]
    total = sum(max(0.0, f.est_savings_ms) for f in hits)
    if step_ms > 0:
        total = min(total, step_ms)
    return _r(total), sorted({f.id for f in hits})


def _first(runs: list[list[float | None]], i: int = 0) -> list[float]:
    return [x for x in (runs[i] if len(runs) > i else []) if x is not None]


def numerics(before: RunData, after: RunData, rtol: float) -> dict[str, Any]:
    """Compare the first losses (the scalars ``.backward()`` was called on) of the first before
    and after runs; without any, the first outputs of the outermost module calls (sum |x|)."""
    what, a, b, key = "losses", _first(before.losses), _first(after.losses), "losses"
    if not a or not b:
        what, a, b, key = (
            "forward outputs",
            _first(before.outputs),
            _first(after.outputs),
            "outputs",
        )
    n = min(len(a), len(b))
    out: dict[str, Any] = {
        "observed": what,
        "before": a,
        "after": b,
        "rtol": rtol,
        "max_rel_diff": None,
    }
    if n == 0:
        out.update(
            status="not-observed",
            text="not observed: no scalar .backward() call and no "
            "floating-point module output in the first steps of both runs",
        )
        return out
    diff = _max_rel(a[:n], b[:n])
    out["max_rel_diff"] = diff
    base = _first(getattr(before, key), 1)
    noise = _max_rel(a, base) if base else 0.0
    if diff <= rtol:
        out.update(
            status="same", text=f"first {n} {what} agree (max relative difference {diff:.2g})"
        )
    elif noise > rtol:
        out.update(
            status="inconclusive",
            text=f"first {what} differ by {diff:.2g}, but two "
            f"unchanged runs already differ by {noise:.2g}: the script is not "
            "deterministic under a fixed seed",
        )
    else:
        out.update(
            status="changed",
            text=f"numerics changed: the first {n} {what} differ by up "
            f"to {diff:.2g} (relative), above the tolerance {rtol:g}",
        )
    return out


def _max_rel(a: list[float], b: list[float]) -> float:
    n = min(len(a), len(b))
    worst = 0.0
    for x, y in zip(a[:n], b[:n], strict=True):
        if math.isnan(x) or math.isnan(y):
            return math.inf
        worst = max(worst, abs(x - y) / max(abs(x), abs(y), 1e-12))
    return _r(worst, 9)


def noise_ms(before: dict[str, Any], after: dict[str, Any]) -> float:
    """Two standard errors of the difference of the medians, each median's standard error
    taken from its interquartile range (sigma ~ IQR / 1.349, se(median) ~ 1.253 sigma / sqrt n)."""

    def se(s: dict[str, Any]) -> float:
        return 1.253 * (s["p75_ms"] - s["p25_ms"]) / 1.349 / math.sqrt(max(s["steps"], 1))

    return _r(2 * math.hypot(se(before), se(after)))


def verdict(saving_ms: float, noise: float) -> str:
    if abs(saving_ms) <= noise:
        return "within noise"
    return "faster" if saving_ms > 0 else "slower"


def compare(before: RunData, after: RunData, est_ids: set[str], rtol: float) -> dict[str, Any]:
    """One row of try.json: ``after`` (one fix alone, or all together) against ``before``."""
    sb, sa = step_stats(before.step_ms), step_stats(after.step_ms)
    t = after.trial
    row: dict[str, Any] = {
        "label": after.label,
        "fixes": list(after.fixes),
        "folders": after.folders,
        "before": sb,
        "after": sa,
        "applied": t.get("applied", []),
        "notes": t.get("notes", {}),
        "counts": t.get("counts", {}),
        "errors": t.get("errors", {}),
        "failed": after.failed,
        "measured_saving_ms": None,
        "measured_saving_pct": None,
        "ratio": None,
        "verdict": None,
        "numerics": None,
    }
    base = before.step_ms_median_report or (sb["median_ms"] or 0.0)
    est, used = estimate(before.findings, est_ids, base)
    row["estimated_saving_ms"] = est if used else None
    row["estimated_from"] = used
    row["estimated_saving_pct"] = _r(100 * est / base, 1) if used and base > 0 else None
    row["acted"] = any(n > 0 for c in row["counts"].values() for n in c.values())
    after_ids = {f.id for f in after.findings}
    row["findings_after"] = {i: ("still reported" if i in after_ids else "gone") for i in used}
    if after.failed or sa["median_ms"] is None or sb["median_ms"] is None:
        row["failed"] = after.failed or "no steady steps were captured"
        return row
    saving = sb["median_ms"] - sa["median_ms"]
    row["measured_saving_ms"] = _r(saving)
    row["measured_saving_pct"] = _r(100 * saving / sb["median_ms"], 1) if sb["median_ms"] else None
    if used and est > 0:
        row["ratio"] = _r(saving / est, 2)
    row["noise_ms"] = noise_ms(sb, sa)
    row["verdict"] = verdict(saving, row["noise_ms"])
    row["numerics"] = numerics(before, after, rtol)
    return row
