"""Issue 20 case 4: a user's files are never overwritten, whatever the flags and however the
output folder changes during a run. Real ``advisor`` processes on a sample trace and a tiny
CPU script."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import HANG_S
from tests.test_profile import FAST, _env, _loop, _write, advisor

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "sample_traces" / "sync_point.cpu.json.gz"
USERS = "<html><body>my notes on torch-advisor: keep this</body></html>\n"


def cli(cwd: Path, *args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "advisor", *map(str, args)],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _one_line_error(p: subprocess.CompletedProcess[str], words: str) -> None:
    assert p.returncode == 1, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("advisor: error:") and words in lines[0], (
        p.stderr
    )


def test_analyze_force_keeps_the_users_report(tmp_path: Path) -> None:
    out = tmp_path / "o"
    out.mkdir()
    (out / "report.html").write_text(USERS)
    p = cli(tmp_path, "analyze", SAMPLE, "--out", out, "--force")
    _one_line_error(p, "report.html, which advisor did not write")
    assert (out / "report.html").read_text() == USERS
    assert sorted(os.listdir(out)) == ["report.html"]
    # an earlier analysis of ours is replaced with --force
    (out / "report.html").unlink()
    assert cli(tmp_path, "analyze", SAMPLE, "--out", out).returncode == 0
    p = cli(tmp_path, "analyze", SAMPLE, "--out", out, "--force")
    assert p.returncode == 0, p.stderr


def test_report_out_never_overwrites_without_force(tmp_path: Path) -> None:
    assert cli(tmp_path, "analyze", SAMPLE, "--out", "run").returncode == 0
    mine = tmp_path / "mine.html"
    mine.write_text(USERS)
    for extra in ([], ["--force"]):  # a file advisor did not write: never
        p = cli(tmp_path, "report", "run", "--out", mine, *extra)
        _one_line_error(p, "not a report advisor wrote")
        assert mine.read_text() == USERS
    other = tmp_path / "other.html"
    assert cli(tmp_path, "report", "run", "--out", other).returncode == 0
    p = cli(tmp_path, "report", "run", "--out", other)  # ours, but --out needs --force
    _one_line_error(p, "--force")
    assert cli(tmp_path, "report", "run", "--out", other, "--force").returncode == 0
    # beside findings.json the report advisor wrote is re-rendered; a user's file is not
    assert cli(tmp_path, "report", "run").returncode == 0
    (tmp_path / "run" / "report.html").write_text(USERS)
    _one_line_error(cli(tmp_path, "report", "run"), "not a report advisor wrote")
    assert (tmp_path / "run" / "report.html").read_text() == USERS


@pytest.mark.slow
def test_profile_force_checks_more_than_a_mention(tmp_path: Path) -> None:
    _loop(tmp_path)
    out = tmp_path / "o"
    out.mkdir()
    page = "<!DOCTYPE html>\n<html><head><title>torch-advisor notes</title></head>" + USERS
    (out / "report.html").write_text(page)
    p = advisor(tmp_path, *FAST, "--force", "--out", "o", "loop.py")
    _one_line_error(p, "report.html, which advisor did not write")
    assert (out / "report.html").read_text() == page


CONCURRENT = """
import os, sys, time, torch
print("READY", flush=True)
model = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
i = 0
# steps until the test releases the run (a file named "release"), at least STEPS of them: the
# first run is still writing into its folder however long the second one takes to start
while i < STEPS or (HOLD and not os.path.exists("release") and i < 100_000):
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    time.sleep(SLEEP)
    i += 1
"""


@pytest.mark.slow
def test_two_runs_into_one_out(tmp_path: Path) -> None:
    _write(tmp_path, "slow.py", CONCURRENT, STEPS=20, SLEEP=0.01, HOLD=True)
    _write(tmp_path, "quick.py", CONCURRENT, STEPS=6, SLEEP=0, HOLD=False)
    cmd = [sys.executable, "-m", "advisor", "profile", "--run-to-end", "--out", "o"]
    first = subprocess.Popen(
        [*cmd, "slow.py"],
        cwd=tmp_path,
        env=_env(),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert first.stdout is not None and first.stdout.readline().strip() == "READY"
        for extra in ([], ["--force"]):
            second = advisor(tmp_path, *extra, "--run-to-end", "--out", "o", "quick.py")
            _one_line_error(second, "another advisor run is writing into this folder")
        (tmp_path / "release").touch()
        rest, err = first.communicate(timeout=HANG_S)
    finally:
        first.kill()
    assert first.returncode == 0, err
    assert (tmp_path / "o" / "report.html").is_file()
    assert "slow.py" in (tmp_path / "o" / "run.json").read_text()


SWAP = """
import os, sys, torch
out, elsewhere = sys.argv[1], sys.argv[2]
os.rename(out, out + ".moved")
os.symlink(elsewhere, out)  # the --out of this run is now a symlink to another folder
model = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(8):
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
"""


@pytest.mark.slow
def test_out_swapped_for_a_symlink_during_the_run(tmp_path: Path) -> None:
    _write(tmp_path, "swap.py", SWAP)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("mine")
    p = advisor(tmp_path, *FAST, "--out", "o", "swap.py", tmp_path / "o", elsewhere)
    assert p.returncode == 0, p.stderr  # the script's own exit code
    assert "moved, removed or replaced during the run" in p.stderr
    assert sorted(os.listdir(elsewhere)) == ["keep.txt"]  # nothing written through the link
