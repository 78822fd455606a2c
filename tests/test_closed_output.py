"""``advisor analyze`` (and ``inspect``) with stdout closed (``>&-``) or read by a reader that
left (``| head -1``) do what Unix tools do: no traceback, EPIPE quiet; the outputs are written,
and the summary being only a courtesy, the exit code stays what it would have been. ``--json``
(stdout is its product) to a closed stdout is one line naming where findings.json is, exit 1.
And ``advisor analyze`` of an ``analyze --out`` folder analyses the trace that analysis read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import HANG_S, REPO, SAMPLES

TRACE = SAMPLES / "activation_checkpoint.cpu.json.gz"  # one HIGH finding


def _run(args: list[str], stdout: str) -> subprocess.CompletedProcess[str]:
    """``advisor ARGS`` with stdout ``closed`` (fd 1 not open) or ``gone`` (a pipe whose reader
    has already left: every write fails with EPIPE, whatever the timing)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "advisor", *args]
    if stdout == "closed":
        return subprocess.run(
            ["bash", "-c", 'exec "$@" >&-', "bash", *cmd],
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            timeout=HANG_S,
        )
    r, w = os.pipe()
    os.close(r)  # the reader is gone before the first write
    try:
        return subprocess.run(
            cmd, stdout=w, stderr=subprocess.PIPE, text=True, env=env, timeout=HANG_S
        )
    finally:
        os.close(w)


@pytest.mark.parametrize("stdout", ["closed", "gone"])
def test_analyze_summary_to_a_closed_or_cut_stdout(tmp_path: Path, stdout: str) -> None:
    out = tmp_path / "o"
    p = _run(["analyze", str(TRACE), "--out", str(out)], stdout)
    assert p.returncode == 0, p.stderr
    assert p.stderr.strip() == "", p.stderr  # no traceback, no message
    assert {f.name for f in out.iterdir()} >= {"findings.json", "report.html"}
    # --fail-on keeps its exit code too: the summary never changes it
    p = _run(["analyze", str(TRACE), "--out", str(tmp_path / "f"), "--fail-on", "high"], stdout)
    assert p.returncode == 3 and p.stderr.strip() == "", p.stderr


def test_json_to_a_closed_stdout_is_one_line(tmp_path: Path) -> None:
    out = tmp_path / "o"
    p = _run(["analyze", str(TRACE), "--out", str(out), "--json"], "closed")
    assert p.returncode == 1
    assert p.stderr.strip().splitlines() == [
        f"advisor: error: cannot write the findings to standard output: it is closed "
        f"(findings.json is in {out})"
    ], p.stderr
    assert (out / "findings.json").is_file()


@pytest.mark.parametrize("args", [["inspect"], ["analyze", "--json"]])
def test_a_reader_that_left_is_quiet(tmp_path: Path, args: list[str]) -> None:
    extra = ["--out", str(tmp_path / "o")] if args[0] == "analyze" else []
    p = _run([args[0], str(TRACE), *args[1:], *extra], "gone")
    assert p.returncode == 0 and p.stderr.strip() == "", p.stderr


def test_analyze_of_an_analyze_output_folder(tmp_path: Path) -> None:
    first = tmp_path / "first"
    p = _run(["analyze", str(TRACE), "--out", str(first)], "gone")
    assert p.returncode == 0, p.stderr
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "advisor",
            "analyze",
            str(first),
            "--out",
            str(tmp_path / "b"),
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=HANG_S,
    )
    assert again.returncode == 0, again.stderr
    a = json.loads((first / "findings.json").read_text())
    b = json.loads(again.stdout)
    assert [f["id"] for f in b["findings"]] == [f["id"] for f in a["findings"]]
