"""The Report: everything a renderer needs, computed once. Renderers never compute.

:meth:`Report.dump` writes findings.json (schema v1, DESIGN section 3: sorted keys, stable
order, so golden files diff cleanly) and :meth:`Report.load` reads one back, from this version
or an earlier one (missing keys read as defaults, a value of another type is an error naming
the key: :mod:`advisor.record`); :func:`read` reads a findings.json file, the one place any
code does (its bytes are written by :mod:`advisor.jsontext`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

from advisor import __version__, jsontext, record
from advisor.errors import AdvisorError
from advisor.findings import Finding
from advisor.record import omit_empty
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
    traceback: str = omit_empty("")  # in findings.json with --debug only


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
        errored = [e if debug else replace(e, traceback="") for e in self.errored]
        return {
            "schema_version": SCHEMA_VERSION,
            "advisor_version": self.advisor_version,
            "run": record.dump(self.run),
            "findings": record.dump(self.findings),
            "skipped": record.dump(self.skipped),
            "errored": record.dump(errored),
            "thresholds": dict(sorted(self.thresholds.items())),
            "views": record.dump(self.views),
        }

    def dump(self, debug: bool = False) -> bytes:
        """findings.json's bytes."""
        return jsontext.document(self.to_dict(debug))

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


def read(path: Path) -> Report:
    """The Report of the findings.json file at ``path``: the one reader of findings.json
    (``advisor report``, ``analyze`` and ``diff`` given an earlier analysis's folder,
    ``advisor try``, the TensorBoard scalars). Raises :class:`~advisor.errors.AdvisorError`
    naming the file: it cannot be read, is not valid JSON, is not a torch-advisor
    findings.json (an object with ``run`` and ``findings``), or is damaged (a value of another
    type: :class:`~advisor.record.RecordError`, or a finding that does not fit)."""
    try:
        data = orjson.loads(path.read_bytes())
    except OSError as err:
        raise AdvisorError(f"cannot read: {err.strerror or err}", path) from None
    except orjson.JSONDecodeError as err:
        raise AdvisorError(f"not valid JSON ({err})", path) from None
    if not isinstance(data, dict) or "findings" not in data or "run" not in data:
        raise AdvisorError("not a torch-advisor findings.json", path)
    try:
        return Report.load(data)
    except Exception as err:  # noqa: BLE001 (any shape a hand-edited file can take)
        raise AdvisorError(f"damaged findings.json ({type(err).__name__}: {err})", path) from None
