"""What a first run says: a script that crashes before its first step gets no advice on steps and
no "No problems found"; the progress line names a step inside the window; "1 host event"; the
misaligned-dims snippet calls a row count (batch x sequence length) what it is; the DataLoader
snippet adds no ``shuffle=True`` (an evaluation loader must not start shuffling)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from tests.conftest import HANG_S, REPO, SAMPLES


def test_progress_line_names_a_step_inside_the_window() -> None:
    from advisor.profile.session import ProfileSession

    def text(seen: int) -> str:
        s = SimpleNamespace(
            cfg=SimpleNamespace(active_first=5, active_last=9), cap=SimpleNamespace(steps_seen=seen)
        )
        return ProfileSession._progress_text(s)  # type: ignore[arg-type]

    assert text(3) == "warming up before steps 5-9 (step 4)"
    assert text(6) == "recording step 7 of steps 5-9"
    assert text(9) == text(12) == "steps 5-9 recorded; writing the trace"


def test_one_host_event_is_singular() -> None:
    from advisor.derive.quality import _outlived

    w = SimpleNamespace(
        clipped=1, dropped=0, end_ns=10**9, overruns=[], source="the last step", latest_ns=2 * 10**9
    )
    # a trace without step markers: its one step ends with the recording, so the note is said
    trace = SimpleNamespace(
        meta=SimpleNamespace(window=w, synthetic_steps=True),
        steps=pd.DataFrame({"end_ns": [10**9]}),
    )
    issue = _outlived(trace)  # type: ignore[arg-type]
    assert issue is not None
    assert issue.what.startswith("1 host event outlives the recording window")
    assert "1 ran past it and was cut there" in issue.what and "events" not in issue.what


def test_misaligned_rows_are_not_called_a_vocabulary() -> None:
    from advisor.detectors.misaligned_dims import _snippet, _snippet_dim

    rows = pd.DataFrame({"bad": [{"M": 700}], "mult": [8]})
    role, v, mult = _snippet_dim(rows)
    assert (role, v) == ("M", 700)
    text = _snippet(role, v, mult)
    assert "vocabulary" not in text and "batch size x sequence length" in text
    both = pd.DataFrame({"bad": [{"M": 700}, {"M": 700, "N": 2001}], "mult": [8, 8]})
    assert _snippet_dim(both)[:2] == ("N", 2001)
    assert "vocabulary size of 2001" in _snippet(*_snippet_dim(both))


def test_dataloader_snippet_adds_no_shuffle() -> None:
    from advisor.analysis.pipeline import Options, analyze_trace
    from advisor.trace import load_trace

    rep = analyze_trace(
        load_trace(SAMPLES / "dataloader_stall.cpu.json.gz"),
        None,
        Options(only=frozenset({"dataloader-stall"})),
    )
    (f,) = rep.findings
    assert "DataLoader(" in f.snippet and "shuffle" not in f.snippet


@pytest.mark.slow
def test_a_crash_before_the_first_step(tmp_path: Path) -> None:
    (tmp_path / "crash.py").write_text("import torch\nimport no_such_module_xyz\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    p = subprocess.run(
        [sys.executable, "-m", "advisor", "profile", "--out", str(tmp_path / "o"), "crash.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=HANG_S,
    )
    assert p.returncode == 1, p.stderr
    said = p.stdout + p.stderr
    assert "before its first step: nothing was profiled. Fix that, then run again." in said
    assert "advisor.step()" not in said and "No problems found" not in said
    assert "median step" not in said and "inference" not in said
    run = json.loads((tmp_path / "o" / "findings.json").read_text())["run"]
    assert run["before_first_step"] is True
    html = (tmp_path / "o" / "report.html").read_text()
    assert "No problems found" not in html and "ended before its first step" in html
