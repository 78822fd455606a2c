"""What a detector returns: :class:`Draft`, a finding before ranking, with the fix it stands for.

A draft carries the figures and the text of one finding; the engine (:mod:`advisor.analysis`)
sets its severity and percentage and ranks it. ``fix`` is what the recommendation would change
in the step, as a fix of :mod:`advisor.replay.fixes` (``ScaleGpu``, ``ShrinkHost``,
``DropSyncs``, ...): the detector values it with ``ctx.whatif(fix)`` (its ``est_savings_ms``),
and the headline "together at most X ms" replays the fixes of every finding shown at once.
A draft without a fix (a pattern the replay cannot express, or a trace it cannot place) adds
its own saving to that headline instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor.findings import Confidence, Evidence, Location, Severity
from advisor.replay.fixes import Fix


@dataclass(frozen=True)
class Draft:
    """A finding before the engine sets severity and percentages.

    Detectors give ``est_savings_ms`` (per step) and the text; the engine derives
    ``est_savings_pct`` from the median step and ``severity`` from that share (or ``info``
    when ``latent`` is set: a pattern with no measured cost in this trace, e.g. on a CPU run).
    ``fix``: the change the recommendation makes, as the replay understands it (None: none).
    """

    id: str
    title: str
    est_savings_ms: float
    confidence: Confidence
    summary: str
    recommendation: str
    snippet: str
    evidence: tuple[Evidence, ...] = ()
    locations: tuple[Location, ...] = ()
    assumptions: tuple[str, ...] = ()
    est_savings_range_ms: tuple[float, float] | None = None
    latent: bool = False
    severity: Severity | None = None  # force a severity (rarely needed)
    fix: Fix | None = None
