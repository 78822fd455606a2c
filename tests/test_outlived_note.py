"""The trace-quality note about host events that outlive the recording is said only when it
changes a figure: a step reaching the recording's end, or a trace without step markers; the
optimizer step that the window's stop falls in (after the last recorded step) changes none."""

from __future__ import annotations

from advisor.derive.quality import trace_quality
from tests.test_window import _span
from tests.tracebuilder import TraceBuilder


def _steps(last_step_us: float) -> TraceBuilder:
    """Two CPU steps of 1 ms, the recording ending at 2.5 ms, and an optimizer step that opens
    at 2.2 ms and closes 300 ms later (where the advisor's stop fell); the second step lasts
    ``last_step_us``."""
    b = TraceBuilder(cc=None)
    _span(b, 2500)
    b.step(1, 0, 1000)
    b.step(2, 1000, last_step_us)
    for t in (10, 1010):
        b.op("aten::addmm", t, 900, seq=1)
    b.annotation("Optimizer.step#AdamW.step", 2200, 300_000)
    return b


def _window_notes(b: TraceBuilder) -> list[str]:
    return [i.what for i in trace_quality(b.load()) if i.kind == "window"]


def test_a_range_past_the_last_step_changes_no_figure() -> None:
    assert _window_notes(_steps(1000)) == []


def test_a_step_cut_by_the_recording_is_said() -> None:
    notes = _window_notes(_steps(400_000))
    assert notes and "outlive the recording window" in notes[0]
