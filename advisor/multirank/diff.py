"""``advisor diff A B``: did the fix help, and what is left? (pure computation; no printing)

Each side is a trace, a run folder or a folder of per-rank traces; both are analysed with the
same detectors and thresholds. The result compares the median step time, the time per category
per step (the mean of the report's step breakdown, :mod:`advisor.derive.breakdown`), the kernels and ops whose time per step changed most, and the findings (matched by
id and location: resolved, new, changed, unchanged). Stable keys of the JSON: ``a``, ``b``,
``step_ms_median`` {a, b, delta_ms, delta_pct}, ``categories_ms``, ``kernels``, ``ops``,
``findings`` {resolved, new, changed, unchanged}, ``verdict``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from advisor.analysis.options import Options
from advisor.derive.breakdown import CATEGORIES
from advisor.digest import Digest
from advisor.errors import AdvisorError
from advisor.findings import SEVERITIES, Finding
from advisor.report import Report

DIFF_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Side:
    path: str
    report: Report
    digests: tuple[Digest, ...]

    @property
    def steps(self) -> int:
        return sum(d.steps for d in self.digests)


def load_side(
    path: str | Path, options: Options, jobs: int | None = None, scheduler: str | None = None
) -> Side:
    """Analyse one side (a trace, a run folder or a folder of per-rank traces)."""
    from advisor.analysis.digest import digest_file
    from advisor.multirank.analyze import analyze_files
    from advisor.trace import find_traces

    p = Path(path)
    files = find_traces(p)
    if len(files) == 1:
        d = digest_file(files[0], options)
        if d.error is not None:
            raise AdvisorError(d.error)
        return Side(str(p), d.report, (d,))
    report, digests = analyze_files(files, options, p, jobs, scheduler=scheduler)
    return Side(str(p), report, tuple(d for d in digests if d.error is None))


def _r(x: float, nd: int = 3) -> float:
    return round(float(x), nd)


def _per_step(side: Side, attr: str) -> dict[str, tuple[float, float]]:
    """name -> (count per step, ms per step), summed over the side's traces."""
    tot: dict[str, list[float]] = {}
    for d in side.digests:
        for name, (count, ms) in getattr(d, attr).items():
            acc = tot.setdefault(name, [0.0, 0.0])
            acc[0] += count
            acc[1] += ms
    n = max(side.steps, 1)
    return {k: (v[0] / n, v[1] / n) for k, v in tot.items()}


def _changes(a: Side, b: Side, attr: str, top: int) -> list[dict[str, Any]]:
    pa, pb = _per_step(a, attr), _per_step(b, attr)
    rows: list[dict[str, Any]] = []
    for name in set(pa) | set(pb):
        ca, ma = pa.get(name, (0.0, 0.0))
        cb, mb = pb.get(name, (0.0, 0.0))
        rows.append(
            {
                "name": name,
                "a_ms": _r(ma),
                "b_ms": _r(mb),
                "delta_ms": _r(mb - ma),
                "a_count": _r(ca, 2),
                "b_count": _r(cb, 2),
            }
        )
    rows.sort(key=lambda r: (-abs(r["delta_ms"]), r["name"]))
    return [r for r in rows[:top] if r["delta_ms"] != 0]


def _categories(side: Side) -> dict[str, float]:
    n = max(side.steps, 1)
    return {
        c: sum(d.categories_ms.get(c, 0.0) * d.steps for d in side.digests) / n for c in CATEGORIES
    }


def _step_median(side: Side) -> float:
    v = np.concatenate([d.step_ms for d in side.digests]) if side.digests else np.zeros(0)
    return float(np.median(v)) if len(v) else 0.0


# ---- findings ------------------------------------------------------------------------------


def _loc(f: Finding) -> tuple[str, int, str] | None:
    if not f.locations:
        return None
    loc = f.locations[0]
    return (Path(loc.file).name, loc.line, loc.function)


def match_findings(
    a: Sequence[Finding], b: Sequence[Finding]
) -> tuple[list[tuple[Finding, Finding]], list[Finding], list[Finding]]:
    """Pairs (same id and place), resolved (only in a), new (only in b).

    Same place: the same file name and line; else the same file name and function (the fix
    moved the line); findings without a location pair by id in ranking order. Only findings
    of the same phase (``Finding.phase``) pair."""
    left, right = list(a), list(b)
    pairs: list[tuple[Finding, Finding]] = []
    keys = (  # a finding pairs only within its phase (training, or the evaluation window)
        lambda f: (f.phase, f.id, _loc(f)[0], _loc(f)[1]) if _loc(f) else None,  # type: ignore[index]
        lambda f: (f.phase, f.id, _loc(f)[0], _loc(f)[2]) if _loc(f) else None,  # type: ignore[index]
        lambda f: (f.phase, f.id) if _loc(f) is None else None,
    )
    for key in keys:
        for fa in list(left):
            ka = key(fa)
            if ka is None:
                continue
            for fb in right:
                if key(fb) == ka:
                    pairs.append((fa, fb))
                    left.remove(fa)
                    right.remove(fb)
                    break
    return pairs, left, right


def _where(f: Finding) -> str | None:
    loc = _loc(f)
    return f"{loc[0]}:{loc[1]}" if loc else None


def _entry(fa: Finding | None, fb: Finding | None) -> dict[str, Any]:
    f = fb or fa
    assert f is not None
    return {
        "id": f.id,
        "title": f.title,
        "location": _where(f),
        "severity": {"a": fa.severity if fa else None, "b": fb.severity if fb else None},
        "est_savings_ms": {
            "a": fa.est_savings_ms if fa else None,
            "b": fb.est_savings_ms if fb else None,
        },
        "summary": f.summary,
    }


def _changed(fa: Finding, fb: Finding) -> bool:
    d = abs(fb.est_savings_ms - fa.est_savings_ms)
    return fa.severity != fb.severity or d >= max(0.05, 0.1 * fa.est_savings_ms)


def _listed(fs: Sequence[Finding]) -> set[tuple[str | None, str]]:
    """(phase, id) of the findings listed under another one's row (``Finding.related``)."""
    return {(f.phase, r.id) for f in fs for r in f.related}


def findings_diff(a: Sequence[Finding], b: Sequence[Finding]) -> dict[str, list[dict[str, Any]]]:
    pairs, resolved, new = match_findings(a, b)
    # a finding that moved under another row of the same cause is neither resolved nor new
    resolved = [f for f in resolved if (f.phase, f.id) not in _listed(b)]
    new = [f for f in new if (f.phase, f.id) not in _listed(a)]
    sev = SEVERITIES.index
    out: dict[str, list[dict[str, Any]]] = {
        "resolved": [_entry(f, None) for f in resolved],
        "new": [_entry(None, f) for f in new],
        "changed": [_entry(x, y) for x, y in pairs if _changed(x, y)],
        "unchanged": [_entry(x, y) for x, y in pairs if not _changed(x, y)],
    }
    for k in out:
        out[k].sort(
            key=lambda e: (
                sev(e["severity"]["b"] or e["severity"]["a"]),
                e["id"],
                e["location"] or "",
            )
        )
    return out


# ---- the whole diff ------------------------------------------------------------------------


def _side_info(s: Side, step_ms: float) -> dict[str, Any]:
    busy = [d.gpu_busy_pct for d in s.digests if d.gpu_busy_pct is not None]
    return {
        "path": s.path,
        "traces": len(s.digests),
        "ranks": sorted({d.rank for d in s.digests if d.rank is not None}),
        "steps": s.steps,
        "step_ms_median": _r(step_ms),
        "gpu_busy_pct": _r(float(np.mean(busy)), 2) if busy else None,
        "device": next((d.device for d in s.digests if d.device), None),
        "findings": len(s.report.findings),
    }


def _verdict(ma: float, mb: float, fd: dict[str, list[Any]]) -> str:
    if ma <= 0:
        change = "no step time on side A to compare"
    elif abs(mb - ma) < 0.01 * ma:
        change = f"step time unchanged ({ma:.2f} -> {mb:.2f} ms)"
    else:
        word = "faster" if mb < ma else "slower"
        change = f"B is {abs(mb - ma) / ma:.1%} {word} per step ({ma:.2f} -> {mb:.2f} ms)"
    left = [e for e in fd["new"] + fd["changed"] + fd["unchanged"] if e["severity"]["b"] != "info"]
    return (
        f"{change}; {len(fd['resolved'])} finding(s) resolved, {len(fd['new'])} new, "
        f"{len(left)} still to fix"
    )


def diff_sides(a: Side, b: Side, top: int = 10) -> dict[str, Any]:
    ma, mb = _step_median(a), _step_median(b)
    ca, cb = _categories(a), _categories(b)
    fd = findings_diff(a.report.findings, b.report.findings)
    return {
        "schema_version": DIFF_SCHEMA_VERSION,
        "a": _side_info(a, ma),
        "b": _side_info(b, mb),
        "step_ms_median": {
            "a": _r(ma),
            "b": _r(mb),
            "delta_ms": _r(mb - ma),
            "delta_pct": _r(100.0 * (mb - ma) / ma, 2) if ma > 0 else None,
        },
        "categories_ms": {
            c: {"a": _r(ca[c]), "b": _r(cb[c]), "delta_ms": _r(cb[c] - ca[c])} for c in CATEGORIES
        },
        "kernels": _changes(a, b, "kernels", top),
        "ops": _changes(a, b, "ops", top),
        "findings": fd,
        "verdict": _verdict(ma, mb, fd),
    }
