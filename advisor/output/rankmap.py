"""Rank heatmap geometry (many ranks): one grid per metric of ``run.ranks_summary``, a cell
per rank in rank order, shaded from the metric's minimum (light) to its maximum (dark);
outliers are outlined, the straggler more heavily. Nothing is measured here
(:mod:`advisor.multirank.rankstats` decides who stands out)."""

from __future__ import annotations

import math
from typing import Any

from advisor.output.charts import WIDTH
from advisor.runfacts import Ranks

HEATMAP_ABOVE = 16  # more ranks than this: a heatmap instead of a row per rank
LEVELS = 8  # css classes hm0..hm7
LABEL_H = 18
GAP = 12


def _fmt(v: float, unit: str) -> str:
    return f"{v:.1f}%" if unit == "%" else f"{v:,.2f} ms"


def _title(rank: int, label: str, v: float, unit: str, med: float) -> str:
    rel = ""
    if unit != "%" and med:
        rel = f" ({100.0 * (v - med) / med:+.1f}% vs median)"
    elif unit == "%":
        rel = f" ({v - med:+.1f} points vs median)"
    return f"rank {rank}: {label.lower()} {_fmt(v, unit)}{rel}"


def rank_heatmap(group: Ranks) -> dict[str, Any] | None:
    ranks = [r for r in group.ranks if r.rank is not None]
    summary = group.ranks_summary
    metrics = summary.metrics if summary is not None else {}
    if not ranks or not metrics or summary is None:
        return None
    ranks = sorted(ranks, key=lambda r: int(r.rank or 0))
    n = len(ranks)
    cols = min(n, 32 if n <= 256 else 64)
    rows = math.ceil(n / cols)
    cell = (WIDTH - 8) / cols
    ch = max(8.0, min(18.0, cell * 0.8))
    straggler = summary.straggler.rank if summary.straggler is not None else None
    grids = []
    y = 0.0
    for key, m in metrics.items():
        lo, hi, med, unit = float(m.min_value), float(m.max_value), float(m.median), m.unit
        flat = hi - lo <= max(abs(med) * 0.005, 1e-9)
        out = {o.rank for o in m.outliers}
        cells = []
        for i, r in enumerate(ranks):
            v = getattr(r, key, None)
            if not isinstance(v, int | float):
                level = "hm-na"
            else:
                frac = 0.0 if flat else (float(v) - lo) / (hi - lo)
                level = f"hm{min(LEVELS - 1, int(frac * LEVELS))}"
            rk = int(r.rank or 0)
            cls = (
                level
                + (" hm-strag" if rk == straggler and key == "lag_ms_per_step" else "")
                + (" hm-out" if rk in out else "")
            )
            cells.append(
                {
                    "x": round(4 + (i % cols) * cell, 2),
                    "y": round(y + LABEL_H + (i // cols) * ch, 2),
                    "w": round(cell - 1, 2),
                    "h": round(ch - 1, 2),
                    "cls": cls,
                    "title": _title(rk, m.label, float(v), unit, med)
                    if isinstance(v, int | float)
                    else f"rank {rk}: no value",
                }
            )
        outs = ", ".join(f"rank {o.rank} ({_fmt(float(o.value), unit)})" for o in m.outliers[:5])
        grids.append(
            {
                "label": m.label,
                "label_y": round(y + 13, 2),
                "range": f"min {_fmt(lo, unit)} (rank {m.min_rank}), median "
                f"{_fmt(med, unit)}, max {_fmt(hi, unit)} (rank {m.max_rank})",
                "outliers": outs,
                "cells": cells,
            }
        )
        y += LABEL_H + rows * ch + GAP
    return {
        "width": WIDTH,
        "height": round(y, 2),
        "grids": grids,
        "ranks": n,
        "cols": cols,
        "straggler": straggler,
    }


def notable_ranks(group: Ranks, slowest: int = 5) -> set[int]:
    """The ranks the short table lists: the straggler, every outlier, the slowest steps."""
    summary = group.ranks_summary
    keep: set[int] = set()
    if summary is not None and summary.straggler is not None:
        keep.add(int(summary.straggler.rank))
    for m in summary.metrics.values() if summary is not None else ():
        keep |= {int(o.rank) for o in m.outliers}
    ranks = [r for r in group.ranks if r.rank is not None]
    by_step = sorted(ranks, key=lambda r: -float(r.step_ms_median or 0.0))
    keep |= {int(r.rank) for r in by_step[:slowest] if r.rank is not None}
    keep |= {int(r.rank) for r in ranks if r.error and r.rank is not None}
    return keep
