"""What a detector returns: :class:`Draft`, a finding before the analysis ranks it.

It lives in the detector API layer, above the replay, because it carries the replay's own
record: ``saving``, the :class:`~advisor.replay.whatif.Saving` of the draft's fix (what
``ctx.whatif(fix)`` returned), which the analysis reads to replay every finding's fix at once
(the headline bound), to tell which evidence a finding claims and to value a finding on the
evidence another one does not hold (:mod:`advisor.analysis.merge`). Detectors set it with
``Draft(**saving.draft_fields(), ...)``; a draft with no fix the replay can express leaves it
``None`` and states its own ``est_savings_ms``.

Beside it, typed, what the analysis reads of a draft besides its text and figures:
``claims`` (the evidence it claims, when its detector says so rather than its fix:
:mod:`advisor.analysis.merge`), ``steps_seen`` (a cause that may happen once: the steady steps it
was seen in, :mod:`advisor.analysis.ranking`) and ``related`` (the findings folded into its row:
one cause, one row). Earlier versions carried these three in ``extra``; a plugin's draft that
still does has them read once, in :func:`advisor.analysis.isolation.check_drafts` (deprecated).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from advisor.findings import Confidence, Evidence, Location, Related, Severity
from advisor.replay.claims import Claims
from advisor.replay.fixes import Fix
from advisor.replay.whatif import Saving


@dataclass(frozen=True)
class Draft:
    """What a detector returns: a finding before the engine sets severity and percentages.

    Detectors give ``est_savings_ms`` (per step) and the text; the engine derives
    ``est_savings_pct`` from the median step and ``severity`` from that share (or ``info``
    when ``latent`` is set: a pattern with no measured cost in this trace, e.g. on a CPU run).
    ``saving``: the replayed saving of the draft's fix (None: no fix the replay can express).
    ``claims``: the evidence the draft claims (None: what its fix changes). ``steps_seen``: the
    steady steps a cause that may happen once was seen in (None: a cause of every step; fewer
    than :data:`~advisor.findings.MIN_STEPS_SEEN` claims nothing per step). ``related``: the
    findings listed under this one (set by :mod:`advisor.analysis.merge`).
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
    claims: Claims | None = None
    steps_seen: int | None = None
    related: tuple[Related, ...] = ()

    @property
    def fix(self) -> Fix | None:
        """The fix of :attr:`saving` (None: no saving, or one without a fix)."""
        return None if self.saving is None else self.saving.fix
