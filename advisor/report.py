"""The Report: everything a renderer needs, computed once. Renderers never compute.

:meth:`Report.dump` writes findings.json (schema v1, DESIGN section 3: sorted keys, stable
order, so golden files diff cleanly) and :meth:`Report.load` reads one back, from this version
or an earlier one (missing keys read as defaults, a value of another type is an error naming
the key: :mod:`advisor.record`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from advisor import __version__, record
from advisor.findings import Finding
from advisor.runfacts import RunFacts
from advisor.viewdata import NO_VIEWS, Views

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
    run: RunFacts
    findings: tuple[Finding, ...]
    skipped: tuple[Skipped, ...] = ()
    errored: tuple[Errored, ...] = ()
    thresholds: Mapping[str, float] = field(default_factory=dict)
    advisor_version: str = __version__
    # view data for the renderers (advisor/analysis/views.py: per-step breakdown, utilization,
    # detector docs, source snippets); saved in findings.json under "views" (additive) so that
    # ``advisor report`` re-renders without the trace
    views: Views = NO_VIEWS

    def to_dict(self, debug: bool = False) -> dict[str, Any]:
        """findings.json as a dict (``debug``: with the detectors' tracebacks)."""
        errored = []
        for e in self.errored:
            row: dict[str, Any] = {"id": e.id, "error": e.error}
            if debug and e.traceback:
                row["traceback"] = e.traceback
            errored.append(row)
        return {
            "schema_version": SCHEMA_VERSION,
            "advisor_version": self.advisor_version,
            "run": record.dump(self.run),
            "findings": [f.to_dict() for f in self.findings],
            "skipped": [{"id": s.id, "reason": s.reason} for s in self.skipped],
            "errored": errored,
            "thresholds": dict(sorted(self.thresholds.items())),
            "views": record.dump(self.views),
        }

    def dump(self, debug: bool = False) -> bytes:
        """findings.json's bytes."""
        return (
            orjson.dumps(
                self.to_dict(debug),
                option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY,
            )
            + b"\n"
        )

    to_json = dump  # the name callers used before dump/load

    @staticmethod
    def load(d: Mapping[str, Any]) -> Report:
        """The Report of a parsed findings.json (of this version or an earlier one); raises
        (:class:`advisor.record.RecordError`, or on a damaged finding) when it does not fit:
        the callers say which file."""
        return Report(
            run=record.load(RunFacts, d.get("run", {}), "run"),
            findings=tuple(Finding.from_dict(f) for f in d.get("findings", ())),
            skipped=tuple(Skipped(s["id"], s.get("reason", "")) for s in d.get("skipped", ())),
            errored=tuple(Errored(e["id"], e.get("error", "")) for e in d.get("errored", ())),
            thresholds={
                str(k): v
                for k, v in (d.get("thresholds") or {}).items()
                if isinstance(v, (int, float))
            },
            advisor_version=str(d.get("advisor_version", __version__)),
            views=record.load(Views, d.get("views", {}), "views"),
        )

    from_dict = load  # the name callers used before dump/load
