"""Every detector threshold in one place, with its default and meaning.

Override any of them with ``--set key=value`` (e.g. ``--set tiny_kernels.max_kernel_us=5``).
Keys are ``<detector>.<name>``; values are floats unless noted. ``advisor analyze --list-thresholds``
prints this table.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from advisor.errors import AdvisorError


@dataclass(frozen=True)
class Threshold:
    default: float
    doc: str


THRESHOLDS: dict[str, Threshold] = {
    # ranking
    "rank.high_pct": Threshold(10.0, "severity high at or above this % of the median step"),
    "rank.medium_pct": Threshold(3.0, "severity medium at or above this % of the median step"),
    "rank.min_savings_ms": Threshold(0.0, "drop non-info findings saving less than this per step"),
    # one cause, one row (advisor/analysis/merge.py)
    "rank.fold_pct": Threshold(
        50.0,
        "a finding whose claimed evidence lies this % inside more specific findings' is listed "
        "under them",
    ),
    "rank.min_shared_pct": Threshold(
        1.0, "a shared part below this % of a finding's claimed evidence is left with it"
    ),
}


def register(key: str, default: float, doc: str) -> None:
    """Detectors declare their thresholds here at import time (kept in this one table)."""
    if key in THRESHOLDS and THRESHOLDS[key].default != default:
        raise ValueError(f"threshold {key} declared twice with different defaults")
    THRESHOLDS[key] = Threshold(default, doc)


# the thresholds that are floors on a finding's own figure (its time per step, or its share of
# the step or of the GPU time): below one, the detector leaves the finding out (or makes it
# information). By name: ``<detector>.min_pct``, ``.min_share_pct``, ``.min_ms`` and the
# other ``min_`` floors of a time or share; not the thresholds that decide what counts (a
# kernel's length, calls per step, bytes, a chain's length).
_VALUE_GATE_RE = re.compile(
    r"\.min_(?:pct|share_pct|ms|exposed_ms|exposed_pct|idle_pct|savings_pct|lag_ms|lag_pct|"
    r"wait_ms|idle_ms)$"
)


def value_gates(ids: Iterable[str]) -> list[str]:
    """The value floors (see ``_VALUE_GATE_RE``) of the detectors with these finding ids (a
    detector's thresholds are keyed by its id with ``_`` for ``-``)."""
    prefixes = tuple(i.replace("-", "_") + "." for i in ids)
    return sorted(k for k in THRESHOLDS if k.startswith(prefixes) and _VALUE_GATE_RE.search(k))


class Thresholds:
    """Resolved threshold values: defaults plus the user's ``--set`` overrides."""

    def __init__(self, overrides: dict[str, float] | None = None) -> None:
        self._over = dict(overrides or {})

    def __getitem__(self, key: str) -> float:
        if key in self._over:
            return self._over[key]
        return THRESHOLDS[key].default

    def get(self, key: str, default: float) -> float:
        if key in self._over:
            return self._over[key]
        t = THRESHOLDS.get(key)
        return t.default if t else default

    def used(self) -> dict[str, float]:
        return {k: self[k] for k in sorted(THRESHOLDS)}

    def overrides(self) -> dict[str, float]:
        return dict(sorted(self._over.items()))

    def validate(self) -> None:
        unknown = sorted(k for k in self._over if k not in THRESHOLDS)
        if unknown:
            raise AdvisorError(f"unknown threshold {unknown[0]!r} in --set (see --list-thresholds)")


def parse_overrides(items: list[str] | None) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise AdvisorError(f"--set expects key=value, got {item!r}")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            raise AdvisorError(f"--set {key.strip()}: {value!r} is not a number") from None
    return out
