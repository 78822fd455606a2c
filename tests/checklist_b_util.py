"""Shared helpers for the checklist-B detector tests (not a test module)."""

from __future__ import annotations

from typing import Any

from advisor.analysis.detection import all_detectors
from advisor.analysis.pipeline import Options, analyze_trace
from advisor.findings import Finding
from advisor.report import Report
from advisor.trace.model import Trace


def analyze(
    trace: Trace, det: str, run: dict[str, Any] | None = None, **overrides: float
) -> Report:
    """Run one detector through the whole engine (thresholds, ranking) on ``trace``."""
    all_detectors()  # detector modules declare their thresholds at import
    rep = analyze_trace(trace, run, Options(only=frozenset({det}), overrides=dict(overrides)))
    assert not rep.errored, rep.errored
    return rep


def finding(rep: Report, det: str) -> Finding | None:
    hits = [f for f in rep.findings if f.id == det]
    assert len(hits) <= 1
    return hits[0] if hits else None


def skip_reason(rep: Report, det: str) -> str | None:
    hits = [s.reason for s in rep.skipped if s.id == det]
    return hits[0] if hits else None
