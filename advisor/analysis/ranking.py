"""Turn detector drafts into ranked findings: severity from the share of the median step.

- ``est_savings_ms`` is capped at the median step (a fix cannot save more than the step).
- ``est_savings_pct`` = saving / median step.
- severity: ``high`` at >= rank.high_pct, ``medium`` at >= rank.medium_pct, else ``low``;
  ``info`` for latent drafts (a pattern with no measured cost here, e.g. on a CPU-only run).
- order: saving descending, then severity, then id and first location (deterministic);
  findings in ``READ_FIRST`` (about how to read the others, with no per-step saving: e.g.
  ``one-time-init``) come before all.
Savings overlap (removing a sync also removes part of the idle time), so the total shown is
``min(sum, median step)``: :func:`advisor.findings.savings_bound_ms`.
"""

from __future__ import annotations

from advisor.detect.draft import Draft
from advisor.detect.thresholds import Thresholds
from advisor.findings import SEVERITIES, Finding


def finalize(draft: Draft, step_ms: float, th: Thresholds) -> Finding:
    saving = max(0.0, float(draft.est_savings_ms))
    if draft.latent:
        saving = 0.0
    if step_ms > 0:
        saving = min(saving, step_ms)
    pct = 100.0 * saving / step_ms if step_ms > 0 else 0.0
    if draft.severity is not None:
        sev = draft.severity
    elif draft.latent or saving <= 0:
        sev = "info"
    elif pct >= th["rank.high_pct"]:
        sev = "high"
    elif pct >= th["rank.medium_pct"]:
        sev = "medium"
    else:
        sev = "low"
    rng = draft.est_savings_range_ms
    if rng is not None and step_ms > 0:
        rng = (round(min(rng[0], step_ms), 3), round(min(rng[1], step_ms), 3))
    return Finding(
        id=draft.id,
        title=draft.title,
        severity=sev,
        est_savings_ms=round(saving, 3),
        est_savings_pct=round(pct, 2),
        confidence=draft.confidence,
        summary=draft.summary,
        recommendation=draft.recommendation,
        snippet=draft.snippet,
        evidence=draft.evidence,
        locations=draft.locations,
        assumptions=draft.assumptions,
        est_savings_range_ms=rng,
    )


READ_FIRST = ("one-time-init",)


def _key(f: Finding) -> tuple:
    loc = f.locations[0] if f.locations else None
    return (
        f.id not in READ_FIRST,
        -f.est_savings_ms,
        SEVERITIES.index(f.severity),
        f.id,
        loc.file if loc else "",
        loc.line if loc else 0,
        f.summary,
    )


def rank(drafts: list[Draft], step_ms: float, th: Thresholds) -> list[Finding]:
    out = [finalize(d, step_ms, th) for d in drafts]
    floor = th["rank.min_savings_ms"]
    out = [f for f in out if f.severity == "info" or f.est_savings_ms >= floor]
    return sorted(out, key=_key)
