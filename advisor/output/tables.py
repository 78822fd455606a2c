"""The report's tables: top kernels and top operators (``views.kernels`` / ``views.ops``,
:mod:`advisor.analysis.toptables`), compiled regions and collectives (``views.compiled``,
``views.collectives``), formatted for the template; nothing is measured here.

Kernel names are shown short (:func:`short_kernel_name`: mangled names demangled, template
arguments and parameter lists elided), the full name kept for the hover title and the sort key;
operator names stay verbatim (the template escapes both)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from advisor.output.kernelname import short_kernel_name
from advisor.units import fmt_bytes, fmt_ms
from advisor.viewdata import CollectiveRow, CompiledView, KernelRow, OpRow


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


def _limit(r: KernelRow) -> dict[str, Any]:
    """The share of the device's limit (and which limit) and the cause, where known."""
    pct, bound = r.limit_pct, r.bound
    value = float(pct) if pct is not None else -1.0
    return {
        "limit": (f"{value:.0f}%" + (f" {bound}" if bound else "")) if pct is not None else "",
        "limit_sort": value,
        "cause": r.cause or "",
    }


def kernel_limits_known(rows: Iterable[KernelRow]) -> bool:
    """Whether any top kernel has an efficiency figure (the columns are shown then)."""
    return any(r.limit_pct is not None for r in rows)


def compiled_rows(c: CompiledView | None) -> dict[str, Any] | None:
    """``views.compiled`` for the template: regions with their time by kind, and GEMMs."""
    if c is None:
        return None
    regions = [
        {
            "region": r.region,
            "calls": f"{r.calls:,}" if r.calls is not None else "",
            "gpu": fmt_ms(r.gpu_ms),
            "gpu_sort": r.gpu_ms,
            "share": f"{r.share_pct:.1f}%",
            "kinds": ", ".join(f"{k.kind} {fmt_ms(k.ms)}" for k in r.by_kind[:6]),
        }
        for r in c.regions
    ]
    gemms = [
        {
            "region": g.region,
            "kernel": g.kernel,
            "family": g.family or "",
            "tile": g.tile or "",
            "count": f"{g.count:,}",
            "total": fmt_ms(g.ms),
            "limit": f"{g.limit_pct:.0f}%" if g.limit_pct is not None else "unknown (no shapes)",
        }
        for g in c.gemms
    ]
    return {"regions": regions, "gemms": gemms, "compiled": f"{c.compiled_pct:.0f}%"}


def collective_rows(rows: Iterable[CollectiveRow]) -> list[dict[str, Any]]:
    """``views.collectives`` for the template: one row per collective kind and group size."""

    def gbs(v: float | None) -> str:
        return f"{v:.1f} GB/s" if v is not None else ""

    out = []
    for r in rows:
        link = f"{r.link} {r.link_gbs:g} GB/s" if r.link and r.link_gbs else (r.link or "")
        out.append(
            {
                "collective": r.collective.replace("_", "-"),
                "ranks": str(r.ranks) if r.ranks is not None else "",
                "calls": f"{r.calls:,}",
                "size": " ".join(x for x in (fmt_bytes(r.bytes_per_call), r.dtype) if x),
                "time": fmt_ms(r.time_ms) if r.time_ms is not None else "",
                "time_sort": r.time_ms if r.time_ms is not None else -1.0,
                "wait": fmt_ms(r.wait_ms) if r.wait_ms is not None else "",
                "algbw": gbs(r.algbw_gbs),
                "busbw": gbs(r.busbw_gbs),
                "link": link,
                "pct": f"{r.link_pct:.0f}%" if r.link_pct is not None else "",
                "pct_sort": r.link_pct if r.link_pct is not None else -1.0,
                "note": r.note or "",
            }
        )
    return out


def kernel_rows(rows: Iterable[KernelRow]) -> list[dict[str, Any]]:
    """Kernel rows: ``name`` short, ``full`` the name as the trace has it."""
    out = []
    for r in rows:
        row = _row(r)
        out.append(
            row
            | {"op": str(r.op or ""), "full": row["name"]}
            | {"name": short_kernel_name(row["name"])}
            | _limit(r)
        )
    return out


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
