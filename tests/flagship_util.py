"""Helpers for the flagship detector tests: run one detector on a trace, pick its finding."""

from __future__ import annotations

from typing import Any

from advisor.analysis.pipeline import Options, analyze_trace
from advisor.findings import Finding
from advisor.report import Report
from advisor.trace.model import Trace


def run(
    trace: Trace, det: str, run_ctx: dict[str, Any] | None = None, **overrides: float
) -> Report:
    """Analyze ``trace`` with only detector ``det``; thresholds as ``name=value`` (dots as __)."""
    over = {k.replace("__", "."): float(v) for k, v in overrides.items()}
    return analyze_trace(trace, run_ctx, Options(only=frozenset([det]), overrides=over))


def finding(rep: Report, det: str) -> Finding | None:
    found = [f for f in rep.findings if f.id == det]
    assert len(found) <= 1, found
    assert not rep.errored, rep.errored
    return found[0] if found else None


def skipped(rep: Report, det: str) -> str | None:
    return next((s.reason for s in rep.skipped if s.id == det), None)
