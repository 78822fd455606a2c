"""The report's top kernels and top operators tables: ``views.kernels`` / ``views.ops``
(:mod:`advisor.analysis.toptables`) formatted for the template. Names stay verbatim (the template
escapes them); nothing is measured here."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from advisor.units import fmt_ms
from advisor.viewdata import KernelRow, OpRow


def _us(v: float | None) -> str:
    v = float(v or 0.0)
    return f"{v / 1000:.2f} ms" if v >= 1000 else f"{v:.1f} µs"


def _row(r: KernelRow | OpRow) -> dict[str, Any]:
    return {
        "name": str(r.name),
        "count": f"{int(r.count or 0):,}",
        "total": fmt_ms(float(r.total_ms or 0.0)),
        "total_sort": float(r.total_ms or 0.0),
        "mean": _us(r.mean_us),
        "mean_sort": float(r.mean_us or 0.0),
        "share": f"{float(r.share_pct or 0.0):.1f}%",
        "share_sort": float(r.share_pct or 0.0),
        "source": r.source or "",
    }


def kernel_rows(rows: Iterable[KernelRow]) -> list[dict[str, Any]]:
    return [_row(r) | {"op": str(r.op or "")} for r in rows]


def _ms(v: object) -> float | None:
    return float(v) if isinstance(v, int | float) else None


def op_rows(rows: Iterable[OpRow]) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        gpu = _ms(r.gpu_ms)
        out.append(
            _row(r)
            | {"self": fmt_ms(_ms(r.self_ms) or 0.0), "gpu": fmt_ms(float(gpu)) if gpu else ""}
        )
    return out
