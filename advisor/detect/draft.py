"""What a detector returns: :class:`Draft`, a finding before the analysis ranks it.

It lives in the detector API layer, above the replay, so that it can carry the replay's own
records (the saving of the draft's fix) as typed fields; it is below every stage that builds
(the detectors) or reads it (the analysis, the multi-rank merge).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from advisor.findings import Confidence, Evidence, Location, Severity


@dataclass(frozen=True)
class Draft:
    """What a detector returns: a finding before the engine sets severity and percentages.

    Detectors give ``est_savings_ms`` (per step) and the text; the engine derives
    ``est_savings_pct`` from the median step and ``severity`` from that share (or ``info``
    when ``latent`` is set: a pattern with no measured cost in this trace, e.g. on a CPU run).
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
    extra: dict[str, Any] = field(default_factory=dict)
