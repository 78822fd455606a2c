"""The Report: everything a renderer needs, computed once. Renderers never compute."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from advisor import __version__
from advisor.findings import Finding

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Skipped:
    id: str
    reason: str


@dataclass(frozen=True)
class Errored:
    id: str
    error: str
    traceback: str = ""


@dataclass(frozen=True)
class Report:
    run: dict[str, Any]
    findings: tuple[Finding, ...]
    skipped: tuple[Skipped, ...] = ()
    errored: tuple[Errored, ...] = ()
    thresholds: dict[str, float] = field(default_factory=dict)
    advisor_version: str = __version__
    # view data for the renderers (advisor/analysis/views.py: per-step breakdown, utilization, detector
    # docs, source snippets); saved in findings.json under "views" (additive) so that
    # ``advisor report`` re-renders without the trace
    views: dict[str, Any] = field(default_factory=dict)

    def to_dict(self, debug: bool = False) -> dict[str, Any]:
        errored = []
        for e in self.errored:
            row: dict[str, Any] = {"id": e.id, "error": e.error}
            if debug and e.traceback:
                row["traceback"] = e.traceback
            errored.append(row)
        return {
            "schema_version": SCHEMA_VERSION,
            "advisor_version": self.advisor_version,
            "run": self.run,
            "findings": [f.to_dict() for f in self.findings],
            "skipped": [{"id": s.id, "reason": s.reason} for s in self.skipped],
            "errored": errored,
            "thresholds": dict(sorted(self.thresholds.items())),
            "views": self.views,
        }

    def to_json(self, debug: bool = False) -> bytes:
        return (
            orjson.dumps(
                self.to_dict(debug),
                option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY,
            )
            + b"\n"
        )

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Report:
        return Report(
            run=dict(d.get("run", {})),
            findings=tuple(Finding.from_dict(f) for f in d.get("findings", ())),
            skipped=tuple(Skipped(s["id"], s.get("reason", "")) for s in d.get("skipped", ())),
            errored=tuple(Errored(e["id"], e.get("error", "")) for e in d.get("errored", ())),
            thresholds=dict(d.get("thresholds", {})),
            advisor_version=str(d.get("advisor_version", __version__)),
            views=dict(d["views"]) if isinstance(d.get("views"), dict) else {},
        )
