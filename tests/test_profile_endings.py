"""How an ``advisor profile`` run ends, as ``--help`` says it: ``--json`` keeps stdout for the
findings alone when the script prints (its output, and its children's, goes to stderr); a
script that exits 3 after a complete window under ``--run-to-end`` returns 3 and is not called
"ended early"; the default stop after the window returns 0, as the help says."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import HANG_S
from tests.test_profile import _env

pytestmark = pytest.mark.slow

SCRIPT = """
import os, sys, torch
print("{'loss': 0.69}")                       # a framework's log line on stdout
os.system("echo from-a-child")                 # and a child process's
model = torch.nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(int(sys.argv[1])):
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    opt.zero_grad()
    print("step", step, flush=True)
sys.exit(int(sys.argv[2]))
"""


def _profile(tmp: Path, *args: str, steps: int = 12, code: int = 0) -> subprocess.CompletedProcess:
    (tmp / "train.py").write_text(SCRIPT)
    return subprocess.run(
        [sys.executable, "-m", "advisor", "profile", "--wait", "1", "--warmup", "1"]
        + ["--active", "2", "--phases", "train", *args, "train.py", str(steps), str(code)],
        cwd=tmp,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )


def test_json_is_alone_on_stdout_while_the_script_prints(tmp_path: Path) -> None:
    p = _profile(tmp_path, "--json", "--out", "o")
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(p.stdout)  # nothing else on stdout
    assert doc["schema_version"] == 1
    assert "{'loss': 0.69}" in p.stderr and "from-a-child" in p.stderr


def test_an_exit_code_after_a_complete_window_is_passed_on_not_called_early(
    tmp_path: Path,
) -> None:
    p = _profile(tmp_path, "--run-to-end", "--out", "o", code=3)
    assert p.returncode == 3, p.stderr[-2000:]
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    assert run["ended_early"] is False and run["exit_code"] == 3
    assert "ended early" not in p.stdout
    assert "after the profiling window was captured (exit code 3" in p.stdout


def test_the_default_stop_after_the_window_returns_0_as_the_help_says(tmp_path: Path) -> None:
    p = _profile(tmp_path, "--out", "o", steps=50, code=3)
    assert p.returncode == 0, p.stderr[-2000:]
    h = subprocess.run(
        [sys.executable, "-m", "advisor", "profile", "--help"],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert "0 when the advisor stopped it after its windows" in " ".join(h.stdout.split())
