"""Which ranks stand out in a multi-rank run: ``run["ranks_summary"]`` of findings.json.

For each metric of ``run["ranks"]`` (median step time, communication share, lag per step) the
ranks far from the others are *outliers*: a robust z-score (distance from the median in units
of 1.4826 x the median absolute deviation) of at least ``OUTLIER_Z``, and a difference from the
median of at least ``MIN_REL`` of it (``MIN_ABS`` for shares and lags, which sit near zero), so a
job whose ranks differ by a hair names none. The *straggler* is the rank the others wait for
most (largest lag per step, when the ``straggler`` check found one), else none.

The report draws a heatmap of these metrics instead of one row per rank above
``advisor.output.rankmap.HEATMAP_ABOVE`` ranks.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from advisor.runfacts import MetricSummary, Outlier, RankRow, RanksSummary, Straggler

OUTLIER_Z = 3.5
MAX_OUTLIERS = 20  # per metric, the farthest first
# metric key in run.ranks -> (label, unit, smallest difference from the median that counts,
# relative to the median (None: absolute, in the unit))
METRICS: dict[str, tuple[str, str, float, bool]] = {
    "step_ms_median": ("Step time", "ms", 0.03, True),
    "comm_pct": ("Communication share", "%", 2.0, False),
    "lag_ms_per_step": ("Lag per step", "ms", 0.5, False),
}


def _values(ranks: Sequence[RankRow], key: str) -> tuple[np.ndarray, np.ndarray]:
    rows: list[tuple[int, float]] = []
    for r in ranks:
        v = getattr(r, key)
        if r.rank is not None and isinstance(v, int | float):
            rows.append((int(r.rank), float(v)))
    ids = np.array([r for r, _ in rows], dtype=np.int64)
    vals = np.array([v for _, v in rows], dtype=np.float64)
    return ids, vals


def outliers(
    ids: np.ndarray, vals: np.ndarray, min_diff: float, relative: bool
) -> tuple[Outlier, ...]:
    """Ranks far from the median of ``vals`` (see the module doc), farthest first."""
    if len(vals) < 4:
        return ()
    med = float(np.median(vals))
    mad = float(np.median(np.abs(vals - med))) * 1.4826
    floor = min_diff * abs(med) if relative else min_diff
    diff = vals - med
    scale = max(mad, floor / OUTLIER_Z, 1e-12)  # identical ranks: only a real gap counts
    z = diff / scale
    hit = (np.abs(z) >= OUTLIER_Z) & (np.abs(diff) >= floor)
    order = np.argsort(-np.abs(z[hit]), kind="stable")
    return tuple(
        Outlier(rank=int(r), value=round(float(v), 3), median=round(med, 3), z=round(float(zz), 1))
        for r, v, zz in zip(ids[hit][order], vals[hit][order], z[hit][order], strict=True)
    )[:MAX_OUTLIERS]


def ranks_summary(ranks: Sequence[RankRow], straggler_found: bool) -> RanksSummary:
    """The ``ranks_summary`` block: per metric the median, min, max (with their ranks) and
    the outliers; the straggler."""
    metrics: dict[str, MetricSummary] = {}
    for key, (label, unit, min_diff, relative) in METRICS.items():
        ids, vals = _values(ranks, key)
        if not len(vals):
            continue
        lo, hi = int(np.argmin(vals)), int(np.argmax(vals))
        metrics[key] = MetricSummary(
            label=label,
            unit=unit,
            median=round(float(np.median(vals)), 3),
            min_value=round(float(vals[lo]), 3),
            min_rank=int(ids[lo]),
            max_value=round(float(vals[hi]), 3),
            max_rank=int(ids[hi]),
            outliers=outliers(ids, vals, min_diff, relative),
        )
    lag = metrics.get("lag_ms_per_step")
    straggler = None
    if straggler_found and lag and lag.max_value > 0:
        straggler = Straggler(rank=lag.max_rank, lag_ms_per_step=lag.max_value)
    return RanksSummary(metrics=metrics, straggler=straggler)
