"""The findings of a run captured in two phases (``advisor profile``: the training window, then
the evaluation window; findings.json ``phase``), phase by phase.

A finding's saving is per step of its own phase (a training step, an evaluation step), so the
phases are never ranked together: each group keeps its own order (by saving), its own bar scale
(its own phase's median step) and its own heading, and every row says its phase. A report of
one phase is one group without a heading.
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor.findings import Finding
from advisor.report import Report

PHASE_NAMES = {"train": "Training", "eval": "Evaluation"}
STEP_NAMES = {"train": "training step", "eval": "evaluation step"}


@dataclass(frozen=True)
class PhaseGroup:
    phase: str | None  # None: the run has one phase
    step_ms: float  # the phase's median step (the scale of its savings)
    findings: tuple[tuple[int, Finding], ...]  # (its number in the report, the finding)

    @property
    def heading(self) -> str:
        """``Training phase``; empty for a single phase."""
        if self.phase is None:
            return ""
        return f"{PHASE_NAMES.get(self.phase, self.phase.capitalize())} phase"

    @property
    def per(self) -> str:
        """What a saving is counted per: ``training step``, ``evaluation step``, ``step``."""
        return STEP_NAMES.get(self.phase or "", "step")


def phase_groups(report: Report) -> list[PhaseGroup]:
    """The report's findings, one group per captured phase in the order the phases ran (a
    phase without findings too)."""
    numbered = list(enumerate(report.findings, 1))
    step_ms = float(report.run.step_ms_median or 0.0)
    if not any(f.phase for f in report.findings):
        return [PhaseGroup(None, step_ms, tuple(numbered))]
    medians = {
        p.phase: float(p.window.step_ms_median or 0.0)
        for p in report.run.phases or ()
        if p.window is not None
    }
    order = list(dict.fromkeys([*medians, *(f.phase or "" for f in report.findings)]))
    return [
        PhaseGroup(
            phase or None,
            medians.get(phase, step_ms),
            tuple((i, f) for i, f in numbered if (f.phase or "") == phase),
        )
        for phase in order
    ]
