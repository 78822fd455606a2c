"""``advisor diff A B``: did the fix help, why, and what is left? (pure computation; no
printing)

Each side is a trace, a run folder or a folder of per-rank traces; both are analysed with the
same detectors and thresholds. The result says first whether the runs computed the same thing
(``workload``), then compares the median step time, measured and in the steady state (one-time
work inside the steps kept out: ``steady_step_ms``, ``one_time``), what limits each step
(``bound``), the time per category per step (the mean of the report's step breakdown,
:mod:`advisor.derive.breakdown`), the runtime calls per step (``runtime``), the kernels and ops
whose time per step changed most, why the step changed (``explain``: kernels paired across the
runs, grouped by family and launching op, and a net attribution whose lines add up to the
change; :mod:`advisor.multirank.explain`; null on runs without GPU kernels) and the findings
(matched by what they are: :mod:`advisor.multirank.diff_findings`). The modules
:mod:`advisor.multirank.diff_context` and :mod:`advisor.multirank.diff_findings` hold the rules.
Stable keys of the JSON: docs/diff.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from advisor.analysis.options import Options
from advisor.derive.breakdown import CATEGORIES
from advisor.digest import Digest
from advisor.errors import AdvisorError
from advisor.findings import Finding
from advisor.multirank.diff_context import (
    bound_diff,
    one_time_side,
    steady_steps_ms,
    workload_diff,
)
from advisor.multirank.diff_findings import Near, findings_diff, match_findings
from advisor.multirank.diff_names import top_changes
from advisor.multirank.diff_runtime import runtime_diff
from advisor.multirank.explain import explain
from advisor.output.header import BOUND_LABELS
from advisor.report import Report
from advisor.trace.kernelnames import name_key

DIFF_SCHEMA_VERSION = 1
# one-time work that held a run's steps this share of its median step is named in the verdict,
# which then gives the steady-state change (the JSON always has both)
ONE_TIME_SHOWN = 0.01
__all__ = ["Side", "diff_sides", "findings_diff", "load_side", "match_findings", "near_pass"]


@dataclass(frozen=True)
class Side:
    path: str
    report: Report
    digests: tuple[Digest, ...]

    @property
    def steps(self) -> int:
        return sum(d.steps for d in self.digests)


def load_side(
    path: str | Path,
    options: Options,
    jobs: int | None = None,
    scheduler: str | None = None,
    with_kernels: bool = True,
) -> Side:
    """Analyse one side (a trace, a run folder, a folder of per-rank traces, or the output
    folder of an earlier analysis: :func:`advisor.trace.discover.traces_at`), its
    digests with their kernels in order (:mod:`advisor.multirank.explain`) and the other facts
    the diff compares (:mod:`advisor.analysis.diffdigest`) unless ``with_kernels`` is off."""
    import dataclasses

    from advisor.analysis.digest import digest_file
    from advisor.multirank.analyze import analyze_files
    from advisor.trace.discover import traces_at

    p = Path(path)
    files = traces_at(p)
    options = dataclasses.replace(options, kernel_sequence=with_kernels)
    if len(files) == 1:
        d = digest_file(files[0], options)
        if d.error is not None:
            raise AdvisorError(d.error)
        return Side(str(p), d.report, (d,))
    report, digests = analyze_files(files, options, p, jobs, scheduler=scheduler)
    return Side(str(p), report, tuple(d for d in digests if d.error is None))


def _r(x: float, nd: int = 3) -> float:
    return round(float(x), nd)


def _categories(side: Side) -> dict[str, float]:
    n = max(side.steps, 1)
    return {
        c: sum(d.categories_ms.get(c, 0.0) * d.steps for d in side.digests) / n for c in CATEGORIES
    }


def _step_median(side: Side) -> float:
    v = np.concatenate([d.step_ms for d in side.digests]) if side.digests else np.zeros(0)
    return float(np.median(v)) if len(v) else 0.0


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


def _change(ma: float, mb: float, steady: bool) -> str:
    if ma <= 0:
        return "no step time on side A to compare"
    where = " in the steady state" if steady else ""
    if abs(mb - ma) < 0.01 * ma:
        return f"step time unchanged{where} ({ma:.2f} -> {mb:.2f} ms)"
    word = "faster" if mb < ma else "slower"
    return f"B is {abs(mb - ma) / ma:.1%} {word} per step{where} ({ma:.2f} -> {mb:.2f} ms)"


def _verdict(d: dict[str, Any]) -> str:
    """One line: the workload when it differs, the change of the steady step (one-time work
    kept out, when a run had some), a flipped bound, and the findings."""
    parts = []
    if d["workload"]["differs"]:
        parts.append(d["workload"]["text"])
    st, sm = d["steady_step_ms"], d["step_ms_median"]
    once = [s for s in ("a", "b") if d["one_time"][s]["held_ms_per_step"]]
    kept = d["one_time"]["kept_out"]
    change = _change(st["a"], st["b"], True) if kept else _change(sm["a"], sm["b"], False)
    if kept:
        held = ", ".join(f"{s.upper()} {d['one_time'][s]['held_ms_per_step']:.2f} ms" for s in once)
        change += f"; one-time work per step kept out ({held}; measured {sm['a']:.2f} -> "
        change += f"{sm['b']:.2f} ms)"
    parts.append(change)
    b = d["bound"]
    if b and b["flipped"]:
        la, lb = (BOUND_LABELS.get(b[s], b[s]) for s in ("a", "b"))
        parts.append(f"the step was bound by {la} in A, by {lb} in B")
    fd = d["findings"]
    parts.append(
        f"{len(fd['resolved'])} finding(s) resolved, {len(fd['new'])} new, "
        f"{len(fd['still_to_fix'])} still to fix"
    )
    return "; ".join(parts)


def _bound_report(s: Side) -> Report:
    """The report whose ``run.bound`` stands for the side (the first trace's for several)."""
    if s.report.run.bound is None and s.digests:
        return s.digests[0].report
    return s.report


def _median(v: np.ndarray) -> float:
    return float(np.median(v)) if len(v) else 0.0


def diff_sides(a: Side, b: Side, top: int = 10, near: Near | None = None) -> dict[str, Any]:
    """The comparison (module doc); ``near``: measures one side again for some finding ids with
    their value floors off (:func:`near_pass`; None: findings only one run reports are new or
    resolved as they are)."""
    ma, mb = _step_median(a), _step_median(b)
    sa, sb = _median(steady_steps_ms(a.digests)), _median(steady_steps_ms(b.digests))
    ca, cb = _categories(a), _categories(b)
    scripts = (a.report.run.script, b.report.run.script)
    fd = findings_diff(a.report.findings, b.report.findings, near, scripts)
    why = explain(a.digests, b.digests, ca, cb, mb - ma, top)
    renames = {name_key(r["b"]): name_key(r["a"]) for r in (why or {}).get("renamed", [])}
    d: dict[str, Any] = {
        "schema_version": DIFF_SCHEMA_VERSION,
        "a": _side_info(a, ma),
        "b": _side_info(b, mb),
        "workload": workload_diff(a.digests, b.digests, sa, sb),
        "step_ms_median": {
            "a": _r(ma),
            "b": _r(mb),
            "delta_ms": _r(mb - ma),
            "delta_pct": _r(100.0 * (mb - ma) / ma, 2) if ma > 0 else None,
        },
        "steady_step_ms": {
            "a": _r(sa),
            "b": _r(sb),
            "delta_ms": _r(sb - sa),
            "delta_pct": _r(100.0 * (sb - sa) / sa, 2) if sa > 0 else None,
        },
        "one_time": {
            "a": one_time_side(a.digests, a.report),
            "b": one_time_side(b.digests, b.report),
            "kept_out": False,
        },
        "bound": bound_diff(_bound_report(a), _bound_report(b)),
        "categories_ms": {
            c: {"a": _r(ca[c]), "b": _r(cb[c]), "delta_ms": _r(cb[c] - ca[c])} for c in CATEGORIES
        },
        "runtime": runtime_diff(a.digests, b.digests),
        "kernels": top_changes(a.digests, b.digests, "kernels", top, renames),
        "ops": top_changes(a.digests, b.digests, "ops", top),
        "findings": fd,
        "explain": why,
    }
    d["one_time"]["kept_out"] = any(
        d["one_time"][s]["held_ms_per_step"] >= ONE_TIME_SHOWN * max(d["step_ms_median"][s], 1e-9)
        for s in ("a", "b")
    )
    d["verdict"] = _verdict(d)
    return d


def near_pass(
    path_a: str | Path,
    path_b: str | Path,
    options: Options,
    jobs: int | None = None,
    scheduler: str | None = None,
) -> Near:
    """``near(side, ids)``: side ``"a"`` or ``"b"`` analysed again with only these detectors
    and their value floors at 0 (:func:`advisor.detect.thresholds.value_gates`): the findings
    the other run lacks, measured where they stayed under the floor."""
    import dataclasses

    from advisor.detect.thresholds import value_gates

    def near(side: str, ids: frozenset[str]) -> tuple[Finding, ...]:
        floors = {k: 0.0 for k in value_gates(ids)}
        opts = dataclasses.replace(
            options, only=ids, skip=frozenset(), overrides={**options.overrides, **floors}
        )
        path = path_a if side == "a" else path_b
        return load_side(path, opts, jobs, scheduler, with_kernels=False).report.findings

    return near
