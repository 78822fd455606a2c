"""What a detector returns: :class:`Draft`, a finding before the analysis ranks it.

It lives in the detector API layer, above the replay, because it carries the replay's own
record: ``saving``, the :class:`~advisor.replay.whatif.Saving` of the draft's fix (what
``ctx.whatif(fix)`` returned), which the analysis reads to replay every finding's fix at once
(the headline bound), to tell which evidence a finding claims and to value a finding on the
evidence another one does not hold (:mod:`advisor.analysis.merge`). Detectors set it with
``Draft(**saving.draft_fields(), ...)``; a draft with no fix the replay can express leaves it
``None`` and states its own ``est_savings_ms``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from advisor.findings import Confidence, Evidence, Location, Severity
from advisor.replay.fixes import Fix
from advisor.replay.whatif import Saving


@dataclass(frozen=True)
class Draft:
    """What a detector returns: a finding before the engine sets severity and percentages.

    Detectors give ``est_savings_ms`` (per step) and the text; the engine derives
    ``est_savings_pct`` from the median step and ``severity`` from that share (or ``info``
    when ``latent`` is set: a pattern with no measured cost in this trace, e.g. on a CPU run).
    ``saving``: the replayed saving of the draft's fix (None: no fix the replay can express).
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
    saving: Saving | None = None

    @property
    def fix(self) -> Fix | None:
        """The fix of :attr:`saving` (None: no saving, or one without a fix)."""
        return None if self.saving is None else self.saving.fix
