"""The exit codes of docs/errors.md that no other test holds: a usage error is 2 with the usage
line, ``--fail-on`` is 3 with the outputs written, and a bug in torch-advisor is one line with
exit code 1 (its traceback only with ``ADVISOR_DEBUG=1``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from advisor.cli.guard import guarded
from tests.conftest import HANG_S, SAMPLES
from tests.test_profile import _env

SAMPLE = SAMPLES / "sync_point.cpu.json.gz"


def _advisor(tmp: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "advisor", *map(str, args)],
        cwd=tmp,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )


def test_usage_error_is_2(tmp_path: Path) -> None:
    p = _advisor(tmp_path, "analyze", SAMPLE, "--no-such-option")
    assert p.returncode == 2 and "Usage" in p.stderr and "--no-such-option" in p.stderr


def test_fail_on_is_3_with_the_outputs_written(tmp_path: Path) -> None:
    gpu = SAMPLES / "resnet50_v100.kineto.json.gz"  # findings at low and above
    p = _advisor(tmp_path, "analyze", gpu, "--out", "o", "--fail-on", "low")
    assert p.returncode == 3, p.stderr
    assert (tmp_path / "o" / "findings.json").is_file() and (
        tmp_path / "o" / "report.html"
    ).is_file()


def test_a_bug_is_one_line_exit_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def bug() -> None:
        raise ValueError("a bug\nover two lines")

    monkeypatch.delenv("ADVISOR_DEBUG", raising=False)
    with pytest.raises(SystemExit) as ei:
        guarded(bug)
    err = capsys.readouterr().err
    assert ei.value.code == 1 and err.count("\n") == 1
    assert err.startswith("advisor: internal error: ValueError: a bug over two lines")
    monkeypatch.setenv("ADVISOR_DEBUG", "1")
    with pytest.raises(SystemExit):
        guarded(bug)
    assert "Traceback" in capsys.readouterr().err
