"""Chart geometry (no chart library, no JavaScript): plain dicts of rectangles, ticks and labels
in a fixed viewBox for the inline-SVG charts, and the bar lengths (% of the scale) of the savings
chart, which the browser lays out as HTML. The template only draws what is here.

Inputs are the Report's view data (advisor/analysis/views.py) and findings; nothing is measured here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from advisor.findings import Finding
from advisor.units import fmt_ms
from advisor.viewdata import StepRow, Utilization

WIDTH = 760
# (key in views.steps, label, css class): drawn bottom to top in this order
SEGMENTS = (
    ("compute", "GPU compute", "c-compute"),
    ("communication", "Communication", "c-comm"),
    ("memcpy", "Memory copies", "c-memcpy"),
    ("dataloader", "Data loading", "c-data"),
    ("idle", "GPU idle", "c-idle"),
    ("host_only", "Host only (no GPU)", "c-host"),
)
MAX_SAVING_BARS = 15


def nice_axis(v: float, intervals: int = 5) -> tuple[float, float]:
    """(top, step) of an axis from 0 that holds ``v`` in at most ~``intervals`` round steps."""
    if v <= 0:
        return 1.0, 0.25
    raw = v / intervals
    exp = 10 ** math.floor(math.log10(raw))
    step = next(m * exp for m in (1, 2, 2.5, 5, 10) if m * exp >= raw - 1e-12)
    top = math.ceil(v / step - 1e-9) * step
    return round(float(top), 12), round(float(step), 12)


def nice_max(v: float) -> float:
    return nice_axis(v)[0]


def _tick(v: float) -> str:
    return f"{v:g}"


def _part(s: StepRow, key: str) -> float:
    return float(getattr(s, f"{key}_ms"))


def steps_chart(steps: list[StepRow]) -> dict[str, Any] | None:
    """Stacked bars per step: where each step's wall time went."""
    if not steps:
        return None
    h, top, left, bottom = 220, 12, 56, 28
    plot_w, plot_h = WIDTH - left - 8, h - top - bottom
    ymax, ystep = nice_axis(max(s.total_ms for s in steps))
    n = len(steps)
    slot = plot_w / n
    bw = max(1.0, min(48.0, slot * 0.72))
    every = max(1, math.ceil(n / 16))  # at most ~16 step labels
    bars = []
    for i, s in enumerate(steps):
        x = left + i * slot + (slot - bw) / 2
        y = float(top + plot_h)
        segs = []
        for key, label, cls in SEGMENTS:
            v = _part(s, key)
            if v <= 0:
                continue
            hh = plot_h * v / ymax
            y -= hh
            pct = 100.0 * v / s.total_ms if s.total_ms else 0.0
            segs.append(
                {
                    "x": round(x, 2),
                    "y": round(y, 2),
                    "w": round(bw, 2),
                    "h": round(hh, 2),
                    "cls": cls,
                    "title": f"step {s.step}: {label} {fmt_ms(v)} ({pct:.1f}%)",
                }
            )
        bars.append(
            {
                "step": s.step,
                "segments": segs,
                "label": str(s.step) if i % every == 0 else "",
                "label_x": round(x + bw / 2, 2),
            }
        )
    totals = {key: sum(_part(s, key) for s in steps) for key, _, _ in SEGMENTS}
    whole = sum(s.total_ms for s in steps)
    legend = [
        {
            "label": label,
            "cls": cls,
            "mean": fmt_ms(totals[key] / n),
            "pct": f"{100.0 * totals[key] / whole:.1f}%" if whole else "0.0%",
        }
        for key, label, cls in SEGMENTS
        if totals[key] > 0
    ]
    yticks = [
        {
            "y": round(top + plot_h - plot_h * (i * ystep) / ymax, 2),
            "label": _tick(round(i * ystep, 10)),
        }
        for i in range(int(round(ymax / ystep)) + 1)
    ]
    table = [
        {
            "step": s.step,
            "total": f"{s.total_ms:.2f}",
            "values": [f"{_part(s, k):.2f}" for k, _, _ in SEGMENTS],
        }
        for s in steps
    ]
    return {
        "width": WIDTH,
        "height": h,
        "left": left,
        "top": top,
        "plot_w": round(plot_w, 2),
        "plot_h": plot_h,
        "bars": bars,
        "legend": legend,
        "yticks": yticks,
        "y_unit": "ms",
        "columns": [label for _, label, _ in SEGMENTS],
        "table": table,
    }


def util_chart(util: Utilization | None, steps: list[StepRow]) -> dict[str, Any] | None:
    """GPU busy % over the captured window, one bar per bucket, step starts as rules."""
    if util is None or not util.busy_pct:
        return None
    h, top, left, bottom = 150, 10, 56, 26
    plot_w, plot_h = WIDTH - left - 8, h - top - bottom
    busy = util.busy_pct
    comp = util.compute_pct or (0.0,) * len(busy)
    n = len(busy)
    bw = plot_w / n
    cols = []
    for i, (b, c) in enumerate(zip(busy, comp, strict=False)):
        x = left + i * bw
        hb = plot_h * min(b, 100.0) / 100.0
        hc = plot_h * min(c, b, 100.0) / 100.0
        title = f"{i * util.bucket_ms:.1f}-{(i + 1) * util.bucket_ms:.1f} ms: GPU busy {b:.1f}%"
        cols.append(
            {
                "x": round(x, 2),
                "w": round(bw + 0.02, 2),
                "title": title,
                "busy_y": round(top + plot_h - hb, 2),
                "busy_h": round(hb, 2),
                "comp_y": round(top + plot_h - hc, 2),
                "comp_h": round(hc, 2),
            }
        )
    span = util.end_us - util.start_us
    rules = []
    if span > 0 and len(steps) <= 60:
        for s in steps[1:]:
            f = (s.ts_us - util.start_us) / span
            if 0 < f < 1:
                rules.append({"x": round(left + plot_w * f, 2), "step": s.step})
    yticks = [
        {"y": round(top + plot_h - plot_h * f, 2), "label": f"{int(100 * f)}%"}
        for f in (0.0, 0.5, 1.0)
    ]
    return {
        "width": WIDTH,
        "height": h,
        "left": left,
        "top": top,
        "plot_w": round(plot_w, 2),
        "plot_h": plot_h,
        "cols": cols,
        "rules": rules,
        "yticks": yticks,
        "x_end": fmt_ms(span / 1000.0),
        "bucket": fmt_ms(util.bucket_ms),
        "buckets": n,
    }


def savings_chart(
    findings: tuple[Finding, ...] | list[Finding],
    step_ms: float,
    numbers: Sequence[int] | None = None,
) -> dict[str, Any] | None:
    """Horizontal bars: estimated saving per finding (ms/step), with the range as a whisker;
    ``numbers``: the findings' numbers in the report (default 1, 2, ...), ``step_ms`` the step
    their savings are counted per (the scale never passes it). Laid out by the browser (HTML,
    not SVG): the label wraps in its column at any width, the value always shows beside its bar,
    so nothing is cut at 390 px or left unused at 1400 px; lengths are % of the scale."""
    nums = list(numbers) if numbers is not None else list(range(1, len(findings) + 1))
    rows = [(i, f) for i, f in zip(nums, findings, strict=True) if f.est_savings_ms > 0]
    rows = rows[:MAX_SAVING_BARS]
    if not rows:
        return None
    vmax = max(max(f.est_savings_ms, (f.est_savings_range_ms or (0, 0))[1]) for _, f in rows)
    vmax = nice_max(min(vmax, step_ms) if step_ms > 0 else vmax)

    def pct(v: float) -> float:
        return round(100.0 * min(max(v, 0.0), vmax) / vmax, 2)

    bars = []
    for rank, f in rows:
        rng = f.est_savings_range_ms
        whisker = None
        if rng is not None and rng[1] > rng[0]:
            whisker = {"left_pct": pct(rng[0]), "width_pct": round(pct(rng[1]) - pct(rng[0]), 2)}
        title = f"#{rank} {f.title}"
        bars.append(
            {
                "cls": f"sev-fill-{f.severity}",
                "anchor": f"f{rank}",
                "label": title,
                "title": f"{title}: {fmt_ms(f.est_savings_ms)} per step",
                "value": f"{fmt_ms(f.est_savings_ms)} ({f.est_savings_pct:.1f}%)",
                "w_pct": max(pct(f.est_savings_ms), 0.5),
                "whisker": whisker,
            }
        )
    return {
        "bars": bars,
        "more": max(0, sum(1 for f in findings if f.est_savings_ms > 0) - len(rows)),
        "has_range": any(b["whisker"] for b in bars),
        "axis_max": fmt_ms(vmax),
    }
