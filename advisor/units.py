"""Milliseconds, percentages and bytes: the figures findings.json holds (rounded numbers) and how
the report, the terminal and the detectors' sentences write them (strings). One home, so a
figure reads the same wherever it appears.

Numbers: :func:`ms_of_ns` (ns -> ms, to the microsecond), :func:`pct_of` (a share in %).
Strings: :func:`fmt_ms` (tables, facts and charts: 2 decimals from 1 ms, 3 below, thousands
separated from 100 ms), :func:`fmt_ms_text` (sentences: 3 significant figures, microseconds
below 1 ms), :func:`fmt_pct` (one decimal, ``n/a`` when unknown), :func:`fmt_bytes` (binary units).
"""

from __future__ import annotations


def ms_of_ns(ns: float) -> float:
    """Nanoseconds as milliseconds, rounded to the microsecond."""
    return round(float(ns) / 1e6, 3)


def pct_of(part: float, whole: float) -> float:
    """``part`` as a share of ``whole`` in %, to two decimals (0 when ``whole`` is not positive)."""
    return round(100.0 * part / whole, 2) if whole > 0 else 0.0


def fmt_ms(ms: float) -> str:
    """Milliseconds for tables and charts: ``1,234.5 ms``, ``12.34 ms``, ``0.123 ms``; a few
    microseconds as ``4.20 µs`` (never ``0.000 ms``)."""
    if ms >= 100:
        return f"{ms:,.1f} ms"
    if ms >= 1:
        return f"{ms:.2f} ms"
    if 0 < ms < 0.01:
        return f"{ms * 1000:.2f} µs"
    return f"{ms:.3f} ms"


def shorter_text(ms: float) -> str:
    """How much shorter a replayed step is, for a sentence: ``1.20 ms shorter``, or ``no
    shorter`` when the replay gains nothing (never ``0.00 us shorter``)."""
    return "no shorter" if ms < 0.0005 else f"{fmt_ms_text(ms)} shorter"


def fmt_ms_text(ms: float) -> str:
    """Milliseconds for sentences: 3 significant figures, never scientific."""
    if ms >= 100:
        return f"{ms:.0f} ms"
    if ms >= 10:
        return f"{ms:.1f} ms"
    if ms >= 1:
        return f"{ms:.2f} ms"
    return f"{ms * 1000:.0f} us" if ms >= 0.001 else f"{ms * 1000:.2f} us"


def fmt_pct(pct: float | None) -> str:
    """A share in % with one decimal, ``n/a`` when unknown."""
    return "n/a" if pct is None else f"{pct:.1f}%"


def fmt_bytes(n: float | None) -> str | None:
    """Bytes in binary units (``512 B``, ``1.5 GiB``); None when unknown."""
    if n is None:
        return None
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return None
