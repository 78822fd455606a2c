"""Finding records (DESIGN section 2). Frozen dataclasses; ``to_dict`` gives the stable JSON
(:func:`advisor.record.dump`, from the declarations: ``phase`` left out while None, ``related``
while empty)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any, Literal

from advisor import record
from advisor.record import omit_empty, omit_none

Severity = Literal["high", "medium", "low", "info"]
Confidence = Literal["high", "medium", "low"]
SEVERITIES: tuple[Severity, ...] = ("high", "medium", "low", "info")
# a per-step claim whose cause may happen once needs that cause in at least this many steady
# steps (a draft says in how many with ``Draft.steps_seen``; see advisor.analysis.ranking)
MIN_STEPS_SEEN = 2


@dataclass(frozen=True)
class Evidence:
    """One row of evidence: what was seen, how often, how long, and where to find an example."""

    what: str
    count: int
    total_ms: float
    example_ts_us: float | None = None  # in the trace file's own clock, to search in Perfetto


@dataclass(frozen=True)
class Location:
    """A line of the user's own code (never torch internals).

    ``line_is`` says how the line is known: ``call`` (the line that was running: the call site
    recorded by ``advisor profile``, or a legacy ``Call stack``), ``last-call`` (the work ran
    without a Python call, as ``if tensor:``, ``float(t)`` or an operator do: the line of the
    frame's last call before it, usually the same line or the one before), ``frame-start``
    (only the frame's own line is known: where it stood when the trace began, or its ``def``
    line, in a trace without call sites).
    """

    file: str
    line: int
    function: str
    count: int = 1
    line_is: str = "call"


@dataclass(frozen=True)
class Related:
    """A finding listed under another one because most of what it claims (the same events,
    the same kernel time) the leading finding claims too: one cause, one row. Its own figure and
    summary are kept; ``shared_pct`` is the share of its claim the row's lead covers."""

    id: str
    title: str
    est_savings_ms: float
    summary: str
    shared_pct: float


@dataclass(frozen=True)
class Finding:
    id: str
    title: str
    severity: Severity
    est_savings_ms: float
    est_savings_pct: float
    confidence: Confidence
    summary: str
    recommendation: str
    snippet: str
    evidence: tuple[Evidence, ...] = ()
    locations: tuple[Location, ...] = ()
    assumptions: tuple[str, ...] = ()
    est_savings_range_ms: tuple[float, float] | None = None
    # the phase of an ``advisor profile`` run captured in two phases it was found in (``train``:
    # the training window, ``eval``: the evaluation window; each ranked apart, per step of its
    # phase); None for a run of one phase and traces from elsewhere
    phase: str | None = omit_none()
    # findings claiming the same evidence, listed under this one (absent from findings.json
    # when empty)
    related: tuple[Related, ...] = omit_empty()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = record.dump(self)
        return out

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Finding:
        r = d.get("est_savings_range_ms")
        return Finding(
            id=str(d["id"]),
            title=str(d.get("title", "")),
            severity=d.get("severity", "info"),
            est_savings_ms=float(d.get("est_savings_ms", 0.0)),
            est_savings_pct=float(d.get("est_savings_pct", 0.0)),
            confidence=d.get("confidence", "low"),
            summary=str(d.get("summary", "")),
            recommendation=str(d.get("recommendation", "")),
            snippet=str(d.get("snippet", "")),
            evidence=tuple(Evidence(**e) for e in d.get("evidence", ())),
            locations=tuple(Location(**loc) for loc in d.get("locations", ())),
            assumptions=tuple(d.get("assumptions", ())),
            est_savings_range_ms=None if r is None else (float(r[0]), float(r[1])),
            phase=str(d["phase"]) if isinstance(d.get("phase"), str) else None,
            related=tuple(Related(**r) for r in d.get("related", ()) if isinstance(r, dict)),
        )

    def with_(self, **changes: Any) -> Finding:
        return replace(self, **changes)


_ADDRESS = re.compile(r" (?:object )?at 0x[0-9a-fA-F]{4,}\b")


def without_addresses(text: str) -> str:
    """``text`` without the memory addresses Python writes into the names of objects
    (``<built-in method round of numpy.ndarray object at 0x7f3a...>`` ->
    ``<built-in method round of numpy.ndarray>``, ``<function f at 0x...>`` -> ``<function f>``):
    they differ from run to run and name nothing a user can find."""
    return _ADDRESS.sub("", text) if "0x" in text else text


def check_fail_on(level: str | None) -> str | None:
    """A ``--fail-on`` level as given (None: not set); a one-line error for anything else."""
    if level is not None and level not in SEVERITIES[:3]:  # "info" never fails a run
        from advisor.errors import AdvisorError

        raise AdvisorError(f"--fail-on expects high, medium or low, got {level!r}")
    return level


def fails_at(findings: Iterable[Finding], level: str | None) -> bool:
    """Whether a finding at or above severity ``level`` exists (``--fail-on``)."""
    if level is None:
        return False
    limit = SEVERITIES.index(level)
    return any(SEVERITIES.index(f.severity) <= limit for f in findings)


def savings_bound_ms(findings: list[Finding], step_ms: float) -> float:
    """An upper bound on the combined saving: the sum, never above the measured step."""
    total = sum(f.est_savings_ms for f in findings)
    return round(min(total, step_ms) if step_ms > 0 else total, 3)
