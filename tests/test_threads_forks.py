"""Issue 20 cases 2 and 3: training in a thread other than the main one, and training in
forked worker processes (Hogwild-style ``torch.multiprocessing`` with fork, and a raw
``os.fork`` child), under a real ``advisor profile``.

The advisor profiles the process that started it (forked children run untouched, with the exit
codes they have under plain Python) and never raises into a thread of the script's own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import HANG_S
from tests.test_profile import FAST, _env, _write, advisor

pytestmark = pytest.mark.slow

THREAD = """
import threading, torch
def train():
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(12):
        model(torch.randn(8, 16)).sum().backward()
        opt.step()
        opt.zero_grad()
    print("THREAD DONE", flush=True)
t = threading.Thread(target=train)
t.start()
t.join()
print("MAIN DONE", flush=True)
"""

HOGWILD = """
import os, sys, torch, torch.multiprocessing as mp

def train(rank, model, steps, opt=None):
    opt = opt or torch.optim.SGD(model.parameters(), lr=0.01)
    for i in range(steps):
        opt.zero_grad()
        model(torch.randn(8, 16)).sum().backward()
        opt.step()
    print("WORKER", rank, "DONE", flush=True)

if __name__ == "__main__":
    model = torch.nn.Linear(16, 4)
    model.share_memory()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)  # the parent's own, stepped last
    ps = [mp.get_context("fork").Process(target=train, args=(r, model, 12)) for r in range(2)]
    for p in ps: p.start()
    for p in ps: p.join()
    print("CODES", [p.exitcode for p in ps], flush=True)
    pid = os.fork()
    if pid == 0:  # a raw fork child that steps an optimizer
        train(9, model, 12)
        os._exit(0)
    _, st = os.waitpid(pid, 0)
    print("RAW", os.waitstatus_to_exitcode(st), flush=True)
    train(-2, model, 12, opt)
"""


def test_training_in_a_thread(tmp_path: Path) -> None:
    _write(tmp_path, "thr.py", THREAD)
    p = advisor(tmp_path, *FAST, "--phases", "train", "--out", "o", "thr.py")
    assert p.returncode == 0, p.stderr
    assert "THREAD DONE" in p.stdout and "MAIN DONE" in p.stdout
    assert "Traceback" not in p.stderr
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    assert run["end_reason"] == "completed" and run["window_steps"] == [3, 4]
    assert run["steps_seen"] == 12
    assert any("thread other than the main one" in n for n in run["notes"])


def test_forked_workers_run_untouched(tmp_path: Path) -> None:
    script = _write(tmp_path, "hog.py", HOGWILD)
    plain = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert plain.returncode == 0 and "CODES [0, 0]" in plain.stdout and "RAW 0" in plain.stdout
    p = advisor(tmp_path, *FAST, "--phases", "train", "--out", "o", "hog.py")
    assert p.returncode == 0, p.stderr
    assert "CODES [0, 0]" in p.stdout and "RAW 0" in p.stdout, p.stdout + p.stderr
    assert "WindowCaptured" not in p.stderr and "Traceback" not in p.stderr
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    assert run["end_reason"] == "window-captured" and run["window_steps"] == [3, 4]
    assert run["steps_seen"] == 5  # the parent's own steps only


RAW_FORK = """
import os, sys, torch
m = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
at, child = int(sys.argv[1]), None
for i in range(12):
    m(torch.randn(2, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
    if i == at:
        for how in ("exit", "raise", "end"):  # one child after the other, each waited for
            pid = os.fork()
            if pid == 0:  # the child leaves the way `how` says, never by os._exit
                child = how
                if how == "exit":
                    sys.exit(7)
                if how == "raise":
                    raise RuntimeError("child failed")
                break  # falls off the end of the script
            _, st = os.waitpid(pid, 0)
            print("CHILD EXIT", how, os.waitstatus_to_exitcode(st), flush=True)
    if child:
        break
print("END", flush=True)
"""


@pytest.mark.parametrize("at", [2, 10], ids=["inside-window", "after-window"])
def test_raw_fork_children_end_as_under_plain_python(tmp_path: Path, at: int) -> None:
    """Issue 31 item 2: raw ``os.fork()`` children of the script, inside the window (steps 2-3)
    or after it, that end by ``sys.exit``, an exception or the end of the script (three children
    in one run, one after the other): each exits with its own code, none runs the advisor's end
    of run (no second summary, no writes into the parent's folder, no abort), and the parent
    finishes with its own exit code."""
    _write(tmp_path, "fk.py", RAW_FORK)
    p = advisor(
        tmp_path, *FAST, "--run-to-end", "--phases", "train", "--out", "o", "fk.py", str(at)
    )
    assert p.returncode == 0, p.stderr
    for how, want in {"exit": 7, "raise": 1, "end": 0}.items():
        assert f"CHILD EXIT {how} {want}" in p.stdout, (p.stdout, p.stderr)
    assert p.stdout.count("torch-advisor ·") == 1, p.stdout  # the parent's summary only
    assert p.stdout.count("END") == 2  # the parent and the child that ran off the end
    assert "terminate called" not in p.stderr
    assert p.stderr.count("RuntimeError: child failed") == 1
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    assert run["end_reason"] == "completed" and run["pid"] != 0
    assert run["forks"]["while_recording"] == (3 if at == 2 else 0)
    assert run["forks"]["total"] == 3
