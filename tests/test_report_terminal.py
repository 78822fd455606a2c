"""The terminal summary after analyze/profile, and progress shown only on a TTY."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import pytest

from advisor.output.terminal import print_summary, progress
from tests.conftest import HANG_S, REPO
from tests.report_samples import gpu_builder, sample_report, with_run

WRITTEN = {
    "report": Path("out/report.html"),
    "findings": Path("out/findings.json"),
    "annotated": Path("out/trace.annotated.json.gz"),
}


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _report():
    r = sample_report(gpu_builder().load())
    return with_run(r, device="NVIDIA A100-SXM4-80GB")


def test_plain_text_when_not_a_tty(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    buf = io.StringIO()
    print_summary(_report(), WRITTEN, file=buf)
    out = buf.getvalue()
    assert "\x1b[" not in out  # no escape codes in a pipe or a CI log
    lines = out.splitlines()
    assert lines[0] == "torch-advisor · train_example.py --epochs 1"
    assert lines[1] == (
        "NVIDIA A100-SXM4-80GB · inference · 3 steps · median step 1.00 ms · GPU busy 58.0% · "
        "peak memory 3.0 GiB"
    )
    assert "HIGH" in out and "0.30 ms" in out and "Steps wait on the DataLoader" in out
    assert "train_example.py:6" in out
    assert "<script>alert(1)</script>" in out  # names print verbatim, never as markup
    # (a share of the mean step, 0.83 ms: savings are means per step)
    assert "together at most 0.52 ms per step (62% of the step)" in out
    assert "1 check(s) failed: gpu-idle" in out
    assert "   report  out/report.html" in out
    assert "timeline  out/trace.annotated.json.gz  (open in ui.perfetto.dev)" in out
    assert max(len(ln) for ln in lines) <= 120


def test_markup_like_names_are_printed_literally():
    r = _report()
    f = r.findings[0].with_(title="kernel [bold]x[/bold] [red]")
    buf = io.StringIO()
    print_summary(dataclasses.replace(r, findings=(f,)), {}, file=buf)
    assert "kernel [bold]x[/bold] [red]" in buf.getvalue()


def test_colour_on_a_tty_and_no_color_honoured(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    tty = Tty()
    print_summary(_report(), WRITTEN, file=tty)
    assert "\x1b[" in tty.getvalue()
    monkeypatch.setenv("NO_COLOR", "1")
    tty = Tty()
    print_summary(_report(), WRITTEN, file=tty)
    assert "\x1b[3" not in tty.getvalue()  # no colour codes (bold may remain)


def test_no_findings_cpu_only_and_ended_early():
    r = dataclasses.replace(_report(), findings=(), errored=())
    r = with_run(r, device=None, gpu_busy_pct=None, ended_early=True, end_reason="Ctrl-C")
    buf = io.StringIO()
    print_summary(r, {}, file=buf)
    out = buf.getvalue()
    assert "no GPU activity (CPU-only trace)" in out and "No problems found." in out
    assert "note: the run ended early (Ctrl-C)" in out


def test_top_n_and_more_line():
    r = _report()
    buf = io.StringIO()
    print_summary(r, {}, top=2, file=buf)
    assert "... and 2 more in the report" in buf.getvalue()


def test_progress_silent_off_tty_and_spins_on_tty():
    buf = io.StringIO()
    with progress("Loading", file=buf) as p:
        p.update("Analyzing")
    assert buf.getvalue() == ""
    tty = Tty()
    with progress("Loading trace", file=tty) as p:
        p.update("Analyzing")
    assert "Loading trace" in tty.getvalue() or "Analyzing" in tty.getvalue()


def test_many_traces_get_a_progress_line_per_tenth_off_tty():
    """From 100 traces on, a log (stderr that is no terminal) says how far the analysis is,
    once per tenth; fewer traces stay silent."""
    buf = io.StringIO()
    with progress("Analyzing", file=buf) as p:
        for done in range(1, 1001):
            p.count(done, 1000)
    lines = buf.getvalue().splitlines()
    assert len(lines) == 10 and lines[0] == "advisor: analyzed 100 of 1,000 traces"
    assert lines[-1] == "advisor: analyzed 1,000 of 1,000 traces"
    small = io.StringIO()
    with progress("Analyzing", file=small) as p:
        for done in range(1, 33):
            p.count(done, 32)
    assert small.getvalue() == ""


@pytest.mark.slow
def test_analyze_command_prints_the_summary_and_no_progress_when_piped(tmp_path):
    import os
    import subprocess
    import sys

    src = gpu_builder().write(tmp_path / "trace.json.gz")
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "advisor", "analyze", str(src), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=HANG_S,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # no spinner on a non-TTY
    assert "median step 1.00 ms" in proc.stdout and "report.html" in proc.stdout
    assert (out / "trace.annotated.json.gz").is_file()
