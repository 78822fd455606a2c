"""``advisor try``'s figures: per fix, the step before and after, the measured saving beside the
advisor's estimate, the numerics check and what the patch did (pure computation; no printing).

Step times are the steady steps of each run's profiled window (the same steps the advisor's
estimates are made on), pooled over the rounds. The spread is the interquartile range; the noise
is two standard errors of the difference of the two medians (estimated from those ranges,
:func:`noise_ms`); the drift is the largest change of one configuration's median between
rounds (the machine's load changing over time, which the pooled spread does not see). A verdict
needs at least two rounds: with one, a changed load between the two runs cannot be told from
the fix (``one round: no verdict``). With two or more, a saving within the noise or the drift is
"within noise", savings of different signs in different rounds are "inconsistent between
rounds", else "faster" or "slower".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from advisor.findings import Finding
from advisor.runcapture import Try
from advisor.tryresult import (
    FASTER,
    INCONSISTENT,
    INTERRUPTED,
    MACHINE_CHANGED,
    ONE_ROUND,
    SLOWER,
    WITHIN_NOISE,
    Numerics,
    Round,
    StepStats,
    TryRow,
)

DEFAULT_LOSS_RTOL = 1e-3


@dataclass
class RunData:
    """One configuration (before, after, or one fix alone), over its repeats."""

    label: str
    fixes: tuple[str, ...]
    folders: list[str] = field(default_factory=list)
    step_ms: list[float] = field(default_factory=list)
    rounds: dict[int, list[float]] = field(default_factory=dict)  # round -> its step times
    losses: list[list[float | None]] = field(default_factory=list)
    outputs: list[list[float | None]] = field(default_factory=list)  # forward fingerprints
    trial: Try = field(default_factory=Try)  # run.json "try" of its first run
    findings: list[Finding] = field(default_factory=list)  # of its first run
    step_ms_median_report: float = 0.0
    failed: str | None = None
    interrupted: bool = False  # a signal ended the try before this configuration was measured

    def add_steps(self, rnd: int, step_ms: list[float]) -> None:
        self.step_ms.extend(step_ms)
        self.rounds.setdefault(rnd, []).extend(step_ms)


def step_stats(step_ms: list[float]) -> StepStats:
    if not step_ms:
        return StepStats()
    v = np.asarray(step_ms, dtype=float)
    p25, med, p75 = np.percentile(v, [25, 50, 75])
    return StepStats(
        steps=len(v),
        median_ms=_r(med),
        p25_ms=_r(p25),
        p75_ms=_r(p75),
        min_ms=_r(v.min()),
        max_ms=_r(v.max()),
    )


def _r(x: float, nd: int = 3) -> float:
    return round(float(x), nd)


def estimate(
    findings: list[Finding], finding_ids: set[str], step_ms: float
) -> tuple[float, list[str]]:
    """The advisor's estimated saving for fixes answering ``finding_ids``: the sum over the
    before run's findings with those ids, never above the step (savings overlap)."""
    hits = [f for f in findings if f.id in finding_ids]
    total = sum(max(0.0, f.est_savings_ms) for f in hits)
    if step_ms > 0:
        total = min(total, step_ms)
    return _r(total), sorted({f.id for f in hits})


def cause_ms(findings: list[Finding], finding_ids: set[str], step_ms: float) -> float | None:
    """The most the fixes answering ``finding_ids`` can save: per finding the high end of its
    saving's range (its cause removed entirely, replayed), else its estimate; summed, never above
    the step. None without such a finding (nothing bounds the change)."""
    hits = [f for f in findings if f.id in finding_ids]
    if not hits:
        return None
    total = sum(max(0.0, f.est_savings_ms, *(f.est_savings_range_ms or (0.0, 0.0))) for f in hits)
    return _r(min(total, step_ms) if step_ms > 0 else total)


def _first(runs: list[list[float | None]], i: int = 0) -> list[float]:
    return [x for x in (runs[i] if len(runs) > i else []) if x is not None]


def numerics(before: RunData, after: RunData, rtol: float) -> Numerics:
    """Compare the first losses (the scalars ``.backward()`` was called on) of the first before
    and after runs; without any, the first outputs of the outermost module calls (sum |x|)."""
    what, a, b, key = "losses", _first(before.losses), _first(after.losses), "losses"
    if not a or not b:
        what, a, b, key = (
            "forward outputs",
            _first(before.outputs),
            _first(after.outputs),
            "outputs",
        )
    n = min(len(a), len(b))
    seen = Numerics(observed=what, before=tuple(a), after=tuple(b), rtol=rtol)
    if n == 0:
        return replace(
            seen,
            status="not-observed",
            text="not observed: no scalar .backward() call and no "
            "floating-point module output in the first steps of both runs",
        )
    diff = _max_rel(a[:n], b[:n])
    seen = replace(seen, max_rel_diff=diff)
    base = _first(getattr(before, key), 1)
    noise = _max_rel(a, base) if base else 0.0
    if diff <= rtol:
        return replace(
            seen,
            status="same",
            text=f"first {n} {what} agree (max relative difference {diff:.2g})",
        )
    if noise > rtol:
        return replace(
            seen,
            status="inconclusive",
            text=f"first {what} differ by {diff:.2g}, but two unchanged runs already differ "
            f"by {noise:.2g}: the script is not deterministic under a fixed seed",
        )
    return replace(
        seen,
        status="changed",
        text=f"numerics changed: the first {n} {what} differ by up to {diff:.2g} (relative), "
        f"above the tolerance {rtol:g}",
    )


def _max_rel(a: list[float], b: list[float]) -> float:
    n = min(len(a), len(b))
    worst = 0.0
    for x, y in zip(a[:n], b[:n], strict=True):
        if math.isnan(x) or math.isnan(y):
            return math.inf
        worst = max(worst, abs(x - y) / max(abs(x), abs(y), 1e-12))
    return _r(worst, 9)


def noise_ms(before: StepStats, after: StepStats) -> float:
    """Two standard errors of the difference of the medians, each median's standard error
    taken from its interquartile range (sigma ~ IQR / 1.349, se(median) ~ 1.253 sigma / sqrt n)."""

    def se(s: StepStats) -> float:
        iqr = (s.p75_ms or 0.0) - (s.p25_ms or 0.0)
        return 1.253 * iqr / 1.349 / math.sqrt(max(s.steps, 1))

    return _r(2 * math.hypot(se(before), se(after)))


def rounds(before: RunData, after: RunData) -> tuple[Round, ...]:
    """Per round both configurations ran in: their medians and the saving."""
    out = []
    for rnd in sorted(set(before.rounds) & set(after.rounds)):
        b, a = before.rounds[rnd], after.rounds[rnd]
        if not b or not a:
            continue
        mb, ma = float(np.median(b)), float(np.median(a))
        out.append(Round(round=rnd, before_ms=_r(mb), after_ms=_r(ma), saving_ms=_r(mb - ma)))
    return tuple(out)


def drift_ms(per_round: tuple[Round, ...]) -> float:
    """The largest change of one configuration's median between rounds (0 with one round)."""
    worst = 0.0
    for key in ("before_ms", "after_ms"):
        v = [getattr(r, key) for r in per_round if getattr(r, key) is not None]
        if len(v) > 1:
            worst = max(worst, max(v) - min(v))
    return _r(worst)


def verdict(
    saving_ms: float,
    noise: float,
    per_round: tuple[Round, ...] = (),
    cause: float | None = None,
) -> tuple[str, str]:
    """The verdict on a measured saving and why (see the module doc); ``cause``: the most the
    fix can save (:func:`cause_ms`), None when nothing bounds it."""
    if len(per_round) < 2:
        return ONE_ROUND, (
            "a single round cannot tell the fix from a change of the machine's load between "
            "the two runs: use --repeat 2 or more"
        )
    drift = drift_ms(per_round)
    bound = max(noise, drift)
    if abs(saving_ms) <= bound:
        what = "the drift between rounds" if drift > noise else "the noise"
        return WITHIN_NOISE, f"the saving is within {what} (±{bound:.2f} ms)"
    if cause is not None and saving_ms - bound > cause:
        return MACHINE_CHANGED, (
            f"{saving_ms:.2f} ms saved, but the whole cause the fix removes takes at most "
            f"{cause:.2f} ms per step (replayed without it): the rest is the machine's speed "
            f"changing between the runs (its load, its clock), not the fix; rerun on a quiet "
            f"machine or with more --repeat rounds"
        )
    signs = {(r.saving_ms or 0.0) > 0 for r in per_round}
    if len(signs) > 1:
        return INCONSISTENT, "the rounds disagree on whether the fix saves time"
    return (FASTER if saving_ms > 0 else SLOWER), (
        f"every round agrees and the saving exceeds the noise and drift (±{bound:.2f} ms)"
    )


def compare(before: RunData, after: RunData, est_ids: set[str], rtol: float) -> TryRow:
    """One row of try.json: ``after`` (one fix alone, or all together) against ``before``."""
    sb, sa = step_stats(before.step_ms), step_stats(after.step_ms)
    t = after.trial
    base = before.step_ms_median_report or (sb.median_ms or 0.0)
    est, used = estimate(before.findings, est_ids, base)
    after_ids = {f.id for f in after.findings}
    counts = {k: dict(v) for k, v in t.counts.items()}
    row = TryRow(
        label=after.label,
        fixes=tuple(after.fixes),
        folders=tuple(after.folders),
        before=sb,
        after=sa,
        applied=t.applied,
        notes={k: list(v) for k, v in t.notes.items()},
        counts=counts,
        errors=dict(t.errors),
        failed=after.failed,
        interrupted=after.interrupted,
        estimated_saving_ms=est if used else None,
        estimated_from=tuple(used),
        estimated_saving_pct=_r(100 * est / base, 1) if used and base > 0 else None,
        acted=any(n > 0 for c in counts.values() for n in c.values()),
        findings_after={i: ("still reported" if i in after_ids else "gone") for i in used},
    )
    if after.interrupted and sa.median_ms is None:
        return replace(row, verdict=INTERRUPTED, verdict_why="the try was interrupted first")
    if after.failed or sa.median_ms is None or sb.median_ms is None:
        return replace(row, failed=after.failed or "no steady steps were captured")
    saving = sb.median_ms - sa.median_ms
    per_round = rounds(before, after)
    noise = noise_ms(sb, sa)
    word, why = verdict(saving, noise, per_round, cause_ms(before.findings, est_ids, base))
    return replace(
        row,
        measured_saving_ms=_r(saving),
        measured_saving_pct=_r(100 * saving / sb.median_ms, 1) if sb.median_ms else None,
        ratio=_r(saving / est, 2) if used and est > 0 else None,
        noise_ms=noise,
        rounds=per_round,
        drift_ms=drift_ms(per_round) if len(per_round) > 1 else None,
        verdict=word,
        verdict_why=why,
        numerics=numerics(before, after, rtol),
    )
