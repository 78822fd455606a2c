"""The report's top kernels and top operators tables: ``views.kernels`` / ``views.ops``
(:mod:`advisor.analysis.toptables`) formatted for the template. Names stay verbatim (the template
escapes them); nothing is measured here."""

from __future__ import annotations

from typing import Any

from advisor.output.charts import fmt_ms


def _us(v: Any) -> str:
    v = float(v or 0.0)
    return f"{v / 1000:.2f} ms" if v >= 1000 else f"{v:.1f} µs"


def _row(r: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": str(r.get("name", "")),
        "count": f"{int(r.get('count') or 0):,}",
        "total": fmt_ms(float(r.get("total_ms") or 0.0)),
        "total_sort": float(r.get("total_ms") or 0.0),
        "mean": _us(r.get("mean_us")),
        "mean_sort": float(r.get("mean_us") or 0.0),
        "share": f"{float(r.get('share_pct') or 0.0):.1f}%",
        "share_sort": float(r.get("share_pct") or 0.0),
        "source": r.get("source") or "",
    }


def _limit(r: dict[str, Any]) -> dict[str, Any]:
    """The share of the device's limit (and which limit) and the cause, where known."""
    pct = r.get("limit_pct")
    bound = r.get("bound")
    ok = isinstance(pct, int | float)
    value = float(pct) if isinstance(pct, int | float) else -1.0
    return {
        "limit": (f"{value:.0f}%" + (f" {bound}" if bound else "")) if ok else "",
        "limit_sort": value,
        "cause": str(r.get("cause") or ""),
    }


def kernel_rows(views: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        _row(r) | {"op": str(r.get("op") or "")} | _limit(r)
        for r in views.get("kernels") or ()
        if isinstance(r, dict)
    ]


def kernel_limits_known(views: dict[str, Any]) -> bool:
    """Whether any top kernel has an efficiency figure (the columns are shown then)."""
    return any(
        isinstance(r, dict) and isinstance(r.get("limit_pct"), int | float)
        for r in views.get("kernels") or ()
    )


def compiled_rows(views: dict[str, Any]) -> dict[str, Any] | None:
    """``views.compiled`` for the template: regions with their time by kind, and GEMMs."""
    c = views.get("compiled")
    if not isinstance(c, dict):
        return None
    regions = []
    for r in c.get("regions") or ():
        if not isinstance(r, dict):
            continue
        kinds = [k for k in r.get("by_kind") or () if isinstance(k, dict)]
        regions.append(
            {
                "region": str(r.get("region", "")),
                "calls": f"{int(r['calls']):,}" if isinstance(r.get("calls"), int) else "",
                "gpu": fmt_ms(float(r.get("gpu_ms") or 0.0)),
                "gpu_sort": float(r.get("gpu_ms") or 0.0),
                "share": f"{float(r.get('share_pct') or 0.0):.1f}%",
                "kinds": ", ".join(
                    f"{k.get('kind')} {fmt_ms(float(k.get('ms') or 0.0))}" for k in kinds[:6]
                ),
            }
        )
    gemms = [
        {
            "region": str(g.get("region", "")),
            "kernel": str(g.get("kernel", "")),
            "family": str(g.get("family") or ""),
            "tile": str(g.get("tile") or ""),
            "count": f"{int(g.get('count') or 0):,}",
            "total": fmt_ms(float(g.get("ms") or 0.0)),
            "limit": f"{float(g['limit_pct']):.0f}%"
            if isinstance(g.get("limit_pct"), int | float)
            else "unknown (no shapes)",
        }
        for g in c.get("gemms") or ()
        if isinstance(g, dict)
    ]
    return {
        "regions": regions,
        "gemms": gemms,
        "compiled": f"{float(c.get('compiled_pct') or 0.0):.0f}%",
    }


def op_rows(views: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for r in views.get("ops") or ():
        if isinstance(r, dict):
            gpu = r.get("gpu_ms")
            out.append(
                _row(r)
                | {
                    "self": fmt_ms(float(r.get("self_ms") or 0.0)),
                    "gpu": fmt_ms(float(gpu)) if gpu else "",
                }
            )
    return out
