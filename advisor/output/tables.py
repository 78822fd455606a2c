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


def kernel_rows(views: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        _row(r) | {"op": str(r.get("op") or "")}
        for r in views.get("kernels") or ()
        if isinstance(r, dict)
    ]


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
