"""try.json: what ``advisor try`` measured, as frozen dataclasses (the try result's schema,
``try_schema_version`` 1; keys are only ever added).

:mod:`advisor.profile.trial.driver` builds a :class:`TryResult`, :meth:`TryResult.dump` writes
it (:func:`advisor.record.dump`, then :func:`advisor.jsontext.document`: sorted keys) and :meth:`TryResult.load` reads one back, checking every field's type (a file
that does not match is one :class:`~advisor.errors.AdvisorError`); the terminal and try.html
(:mod:`advisor.output.try_view`) read its attributes. Every field has a default, so a try.json
written before a field existed still loads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from advisor import jsontext, record
from advisor.errors import AdvisorError

TRY_SCHEMA_VERSION = 1

# the verdicts a row can have; a faster/slower verdict needs two rounds or more
FASTER, SLOWER, WITHIN_NOISE = "faster", "slower", "within noise"
INCONSISTENT = "inconsistent between rounds"
MACHINE_CHANGED = "larger than its cause: the machine changed"
ONE_ROUND = "one round: no verdict"
INTERRUPTED = "interrupted"


@dataclass(frozen=True)
class StepStats:
    """Step times of one configuration (ms): the steady steps of its windows, pooled."""

    steps: int = 0
    median_ms: float | None = None
    p25_ms: float | None = None
    p75_ms: float | None = None
    min_ms: float | None = None
    max_ms: float | None = None


@dataclass(frozen=True)
class Numerics:
    """The first losses (or forward outputs) of the first before and after runs, compared."""

    observed: str = "losses"
    before: tuple[float, ...] = ()
    after: tuple[float, ...] = ()
    rtol: float = 1e-3
    max_rel_diff: float | None = None
    status: str = "not-observed"  # same | changed | inconclusive | not-observed
    text: str = ""


@dataclass(frozen=True)
class Round:
    """One round's medians: how much the configurations drifted between rounds."""

    round: int = 1
    before_ms: float | None = None
    after_ms: float | None = None
    saving_ms: float | None = None


@dataclass(frozen=True)
class TryRow:
    """One fix (or all together) against the unchanged runs."""

    label: str = "after"  # the run folder: after, after-<fix>
    fixes: tuple[str, ...] = ()
    folders: tuple[str, ...] = ()
    before: StepStats = field(default_factory=StepStats)
    after: StepStats = field(default_factory=StepStats)
    applied: tuple[str, ...] = ()
    notes: dict[str, list[str]] = field(default_factory=dict)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    failed: str | None = None
    interrupted: bool = False  # a signal ended the try before this row's runs were done
    measured_saving_ms: float | None = None
    measured_saving_pct: float | None = None
    ratio: float | None = None
    verdict: str | None = None
    verdict_why: str | None = None
    noise_ms: float | None = None
    drift_ms: float | None = None  # the largest change of one configuration between rounds
    rounds: tuple[Round, ...] = ()
    numerics: Numerics | None = None
    estimated_saving_ms: float | None = None
    estimated_from: tuple[str, ...] = ()
    estimated_saving_pct: float | None = None
    acted: bool = False
    findings_after: dict[str, str] = field(default_factory=dict)
    numerics_changing: bool = False


@dataclass(frozen=True)
class Estimate:
    id: str = ""
    est_savings_ms: float = 0.0


@dataclass(frozen=True)
class Before:
    folders: tuple[str, ...] = ()
    failed: str | None = None
    steps: StepStats = field(default_factory=StepStats)
    findings: tuple[Estimate, ...] = ()


@dataclass(frozen=True)
class Reason:
    id: str = ""
    reason: str = ""


@dataclass(frozen=True)
class Settings:
    wait: int = 2
    warmup: int = 2
    active: int = 5
    repeat: int = 2
    seed: int | None = 0
    loss_steps: int = 3
    loss_rtol: float = 1e-3
    max_seconds: float = 60.0


@dataclass(frozen=True)
class TryResult:
    try_schema_version: int = TRY_SCHEMA_VERSION
    advisor_version: str = ""
    script: str = ""
    argv: tuple[str, ...] = ()
    fix: str = ""
    started_at: str = ""
    settings: Settings = field(default_factory=Settings)
    before: Before = field(default_factory=Before)
    results: tuple[TryRow, ...] = ()
    skipped: tuple[Reason, ...] = ()
    not_applicable: tuple[Reason, ...] = ()
    diff_command: str | None = None
    interrupted: str | None = None  # the signal that ended the try early (SIGTERM, SIGINT)

    @property
    def failed(self) -> bool:
        """The unchanged run or a fixed run failed (the command then exits 1)."""
        return bool(self.before.failed) or any(r.failed for r in self.results)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = record.dump(self)
        return out

    @staticmethod
    def from_dict(data: Any) -> TryResult:
        """A try result from decoded JSON; raises AdvisorError when a field has the wrong type."""
        try:
            return msgspec.convert(data, TryResult)
        except msgspec.ValidationError as err:
            raise AdvisorError(f"not a try.json: {err}") from None

    def dump(self) -> bytes:
        """try.json's bytes: sorted keys, indented, a final newline."""
        return jsontext.document(self.to_dict())

    @staticmethod
    def load(path: Path) -> TryResult:
        try:
            raw = msgspec.json.decode(path.read_bytes())
        except msgspec.DecodeError as err:
            raise AdvisorError(f"not valid JSON: {err}", path) from None
        try:
            return TryResult.from_dict(raw)
        except AdvisorError as err:
            raise AdvisorError(str(err), path) from None
