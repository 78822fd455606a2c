"""``advisor diff A B``: did the fix help, and what is left? (pure computation; no printing)

Each side is a trace, a run folder or a folder of per-rank traces; both are analysed with the
same detectors and thresholds. The result compares the median step time, the time per category
per step (the mean of the report's step breakdown, :mod:`advisor.derive.breakdown`), the kernels and ops whose time per step changed most, and the findings (matched by
id and location: resolved, new, changed, unchanged). Stable keys of the JSON: ``a``, ``b``,
``step_ms_median`` {a, b, delta_ms, delta_pct}, ``categories_ms``, ``kernels``, ``ops``,
``findings`` {resolved, new, changed, unchanged}, ``verdict``, and ``explain`` (why the step
changed: kernels paired across the runs through renames, grouped by family and launching op, and
a net attribution whose lines add up to the change; :mod:`advisor.multirank.explain`; null on
runs without GPU kernels).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from advisor.analysis.options import Options
from advisor.derive.breakdown import CATEGORIES
from advisor.digest import Digest
from advisor.errors import AdvisorError
from advisor.findings import SEVERITIES, Finding
from advisor.multirank.explain import explain
from advisor.report import Report
from advisor.trace.kernelnames import name_key, pair_renamed

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
    """Analyse one side (a trace, a run folder, a folder of per-rank traces, or the output
    folder of an earlier analysis: :func:`advisor.trace.discover.traces_at`), its
    digests with their kernels in order (:mod:`advisor.multirank.explain`)."""
    import dataclasses

    from advisor.analysis.digest import digest_file
    from advisor.multirank.analyze import analyze_files
    from advisor.trace.discover import traces_at

    p = Path(path)
    files = traces_at(p)
    options = dataclasses.replace(options, kernel_sequence=True)
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


def _changes(
    a: Side,
    b: Side,
    attr: str,
    top: int,
    kernel_renames: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The names whose time per step changed most, renamed names paired.

    Kernels (``kernel_renames``: B key -> A key, from the explanation's pairing) compare by
    :func:`~advisor.trace.kernelnames.name_key`; CPU ops and ranges by name, a name found on one
    side only paired with one on the other side only that runs as many times and shares more
    than half its words (a compiled graph's new hash). Ops and ranges found on one side only
    come after the others: ranges nest, so such a range (an annotation one run added) repeats
    time the ops both runs have already show."""
    pa, pb = _per_step(a, attr), _per_step(b, attr)
    if kernel_renames is not None:
        ka = _merge(pa, name_key)
        kb = _merge(pb, lambda n: kernel_renames.get(name_key(n), name_key(n)))
    else:
        only_a = {n: (round(v[0], 3), "") for n, v in pa.items() if n not in pb}
        only_b = {n: (round(v[0], 3), "") for n, v in pb.items() if n not in pa}
        back = {y: x for x, y in pair_renamed(only_a, only_b, 0.5)}
        ka = {n: (n, v) for n, v in pa.items()}
        kb = _merge(pb, lambda n: back.get(n, n))
    rows: list[dict[str, Any]] = []
    for key in set(ka) | set(kb):
        name_a, (ca, ma) = ka.get(key, ("", (0.0, 0.0)))
        name_b, (cb, mb) = kb.get(key, ("", (0.0, 0.0)))
        row: dict[str, Any] = {
            "name": name_b or name_a,
            "a_ms": _r(ma),
            "b_ms": _r(mb),
            "delta_ms": _r(mb - ma),
            "a_count": _r(ca, 2),
            "b_count": _r(cb, 2),
        }
        if name_a and name_b and name_a != name_b:
            row["a_name"] = name_a
        rows.append(row)
    one_side_last = kernel_renames is None
    rows.sort(
        key=lambda r: (
            one_side_last and (r["a_count"] == 0 or r["b_count"] == 0),
            -abs(r["delta_ms"]),
            r["name"],
        )
    )
    return [r for r in rows if r["delta_ms"] != 0][:top]


def _merge(
    per_step: dict[str, tuple[float, float]], key: Callable[[str], str]
) -> dict[str, tuple[str, tuple[float, float]]]:
    """Per-step (count, ms) summed per ``key(name)``, with the name of the largest."""
    acc: dict[str, tuple[str, tuple[float, float]]] = {}
    for name, (c, ms) in sorted(per_step.items(), key=lambda kv: -kv[1][1]):
        k = key(name)
        if k in acc:
            n0, (c0, m0) = acc[k]
            acc[k] = (n0, (c0 + c, m0 + ms))
        else:
            acc[k] = (name, (c, ms))
    return acc


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
    why = explain(a.digests, b.digests, ca, cb, mb - ma, top)
    renames = {name_key(r["b"]): name_key(r["a"]) for r in (why or {}).get("renamed", [])}
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
        "kernels": _changes(a, b, "kernels", top, renames),
        "ops": _changes(a, b, "ops", top),
        "findings": fd,
        "verdict": _verdict(ma, mb, fd),
        "explain": why,
    }
