"""Turn detector drafts into ranked findings: severity from the share of the step.

A finding's saving is its mean per steady step (a cause in k of n steps: its mean over all n,
:mod:`advisor.replay.whatif`), so the step it is a share of is the mean step (``step_ms``; the
pipeline passes :meth:`~advisor.trace.model.Trace.mean_step_ms`): one statistic for every
per-step figure of a finding.

- ``est_savings_ms`` is capped at the step (a fix cannot save more than the step).
- ``est_savings_pct`` = saving / step.
- ``est_savings_range_ms`` always contains the estimate (an end the detector gave on the other
  side of it is moved to it) and is capped at the step too.
- severity: ``high`` at >= rank.high_pct, ``medium`` at >= rank.medium_pct, else ``low``;
  ``info`` for latent drafts (a pattern with no measured cost here, e.g. on a CPU-only run).
- a draft whose cause may happen once (``Draft.steps_seen``: the steady steps it was seen
  in) and was seen in fewer than ``MIN_STEPS_SEEN`` of them claims nothing per step: ``info``,
  0 ms, and the summary says it cannot tell whether it recurs.
- evidence rows and the summary carry no memory addresses (``object at 0x7f...``: they
  differ from run to run and name nothing a user can find; :func:`advisor.findings.without_addresses`).
- order: saving descending, then severity, then id and first location (deterministic);
  findings in ``READ_FIRST`` (about how to read the others, with no per-step saving: e.g.
  ``one-time-init``) come before all.
Savings overlap (removing a sync also removes part of the idle time), so the total shown
(:func:`headline_bound_ms`) replays every reported finding's fix at once (its draft's
``saving.fix``), plus the savings of the findings without one, never above the step; where
the replay cannot place the trace, ``min(sum, step)``: :func:`advisor.findings.savings_bound_ms`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from advisor.detect.draft import Draft
from advisor.detect.thresholds import Thresholds
from advisor.findings import (
    MIN_STEPS_SEEN,
    SEVERITIES,
    Finding,
    savings_bound_ms,
    without_addresses,
)
from advisor.replay.whatif import combined_bound_ms
from advisor.trace.model import Trace


def finalize(draft: Draft, step_ms: float, th: Thresholds) -> Finding:
    saving = max(0.0, float(draft.est_savings_ms))
    seen = draft.steps_seen
    once = seen is not None and seen < MIN_STEPS_SEEN
    summary, assumptions = draft.summary, draft.assumptions
    if once:
        summary += (
            f" Seen in {seen} steady step{'' if seen == 1 else 's'}: cannot tell whether it "
            "recurs, so no per-step saving is claimed."
        )
        assumptions += (
            f"A per-step claim needs its cause in at least {MIN_STEPS_SEEN} steady steps "
            f"(here {seen}): one iteration cannot tell a one-time cost from a recurring one.",
        )
    if draft.latent or once:
        saving = 0.0
    if step_ms > 0:
        saving = min(saving, step_ms)
    pct = 100.0 * saving / step_ms if step_ms > 0 else 0.0
    if draft.severity is not None and not once:
        sev = draft.severity
    elif draft.latent or once or saving <= 0:
        sev = "info"
    elif pct >= th["rank.high_pct"]:
        sev = "high"
    elif pct >= th["rank.medium_pct"]:
        sev = "medium"
    else:
        sev = "low"
    rng = None if once else draft.est_savings_range_ms
    if rng is not None:  # a range always contains its estimate
        lo, hi = min(rng[0], rng[1], saving), max(rng[0], rng[1], saving)
        if step_ms > 0:
            lo, hi = min(lo, step_ms), min(hi, step_ms)
        rng = (round(lo, 3), round(hi, 3))
    return Finding(
        id=draft.id,
        title=draft.title,
        severity=sev,
        est_savings_ms=round(saving, 3),
        est_savings_pct=round(pct, 2),
        confidence=draft.confidence,
        summary=without_addresses(summary),
        recommendation=draft.recommendation,
        snippet=draft.snippet,
        evidence=tuple(
            e if "0x" not in e.what else replace(e, what=without_addresses(e.what))
            for e in draft.evidence
        ),
        locations=draft.locations,
        assumptions=assumptions,
        est_savings_range_ms=rng,
        related=tuple(draft.related),
    )


READ_FIRST = ("one-time-init",)


def _key(f: Finding) -> tuple[Any, ...]:
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


def headline_bound_ms(
    trace: Trace, drafts: Sequence[Draft], findings: Sequence[Finding], step_ms: float
) -> tuple[float, bool]:
    """The headline "together at most X ms" (see the module doc); second value: True when a
    combined replay was made (else the capped sum)."""
    shown = {f.id for f in findings if f.est_savings_ms > 0}
    fixes = [f for d in drafts if d.id in shown and not d.latent and (f := d.fix) is not None]
    with_fix = {d.id for d in drafts if d.fix is not None}
    rest = sum(f.est_savings_ms for f in findings if f.id not in with_fix)
    both = combined_bound_ms(trace, fixes, rest, step_ms)
    if both is None:
        return savings_bound_ms(list(findings), step_ms), False
    return both, True
