"""Issue 31 item 5: ``advisor try`` under SIGTERM and Ctrl-C (SIGINT). The signal reaches the
try process while its second run (the fix) goes on: the run's whole process group ends (no
orphan), try.json and try.html are written with the before run that finished and the
interrupted run marked, and try exits 143 / 130."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import HANG_S
from tests.test_try import FEW, _env

SCRIPT = """
import os, sys, time, torch
print("PID", os.getpid(), flush=True)
m = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(4)])
opt = torch.optim.SGD(m.parameters(), lr=0.01)
for i in range(100000):
    m(torch.randn(8, 64)).pow(2).mean().backward()
    opt.step()
    opt.zero_grad(set_to_none=False)
    print("STEP", i, flush=True)
    time.sleep(0.1)
"""


def _wait_for(path: Path, text: str, proc: subprocess.Popen[str], limit_s: float) -> str:
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        assert proc.poll() is None, proc.communicate()
        if path.is_file():
            got = path.read_text(encoding="utf-8", errors="replace")
            if text in got:
                return got
        time.sleep(0.2)
    raise AssertionError(f"{text!r} not in {path} after {limit_s} s")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
def test_a_signal_ends_the_run_and_writes_try_json(tmp_path: Path, sig: signal.Signals) -> None:
    (tmp_path / "loop.py").write_text(SCRIPT, encoding="utf-8")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "advisor", "try", "--fix", "zero-grad-not-none"]
    proc = subprocess.Popen(
        [*cmd, "--out", str(out), *FEW, "loop.py"],
        cwd=tmp_path,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        log = _wait_for(out / "after" / "try-profile.log", "STEP 2\n", proc, HANG_S)
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=HANG_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + sig, (proc.returncode, stderr[-2000:])
    assert "Traceback" not in stderr
    doc = json.loads((out / "try.json").read_text(encoding="utf-8"))
    assert doc["interrupted"] == sig.name
    assert doc["before"]["failed"] is None and doc["before"]["steps"]["median_ms"] is not None
    (row,) = doc["results"]
    assert row["interrupted"] is True and row["verdict"] == "interrupted"
    assert (out / "try.html").is_file()
    # the script of the interrupted run is gone, not an orphan
    pid = int(log.split("PID ", 1)[1].split()[0])
    deadline = time.monotonic() + HANG_S  # (ending a process group takes a moment under load)
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid)


def test_sigkill_to_try_ends_its_run(tmp_path: Path) -> None:
    """A try killed outright (SIGKILL: no handler runs) leaves no run going: its child run gets
    SIGTERM from the kernel (the parent-death signal) and ends, the script with it."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the kernel's parent-death signal is Linux's")
    (tmp_path / "loop.py").write_text(SCRIPT, encoding="utf-8")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "advisor", "try", "--fix", "zero-grad-not-none"]
    proc = subprocess.Popen(
        # a window that never comes: the run goes on until something ends it
        [*cmd, "--out", str(out), "--wait", "100000", "--max-seconds", "0", "loop.py"],
        cwd=tmp_path,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        log = _wait_for(out / "before" / "try-profile.log", "STEP 2\n", proc, HANG_S)
        proc.kill()
        proc.wait(timeout=HANG_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    pid = int(log.split("PID ", 1)[1].split()[0])
    end = time.monotonic() + HANG_S  # the run writes what it captured, then ends
    while _alive(pid) and time.monotonic() < end:
        time.sleep(0.2)
    assert not _alive(pid), "the script of the killed try is still running"
