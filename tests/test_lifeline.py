"""advisor.lifeline: a helper started under ``helpers_die_with_me`` (multiprocessing's fork
server) dies with the process that started it, and nothing else acts on the request."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from advisor import lifeline
from tests.conftest import HANG_S, REPO
from tests.procs import running

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG")


def test_the_variable_is_set_only_while_the_helper_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(lifeline.STARTER, raising=False)
    with lifeline.helpers_die_with_me():
        assert os.environ[lifeline.STARTER] == str(os.getpid())
    assert lifeline.STARTER not in os.environ
    monkeypatch.setenv(lifeline.STARTER, "123")  # the advisor's own environment had one
    with lifeline.helpers_die_with_me():
        assert os.environ[lifeline.STARTER] == str(os.getpid())
    assert os.environ[lifeline.STARTER] == "123"


def test_only_a_child_of_the_named_process_acts(monkeypatch: pytest.MonkeyPatch) -> None:
    # this process is not the child of the pid named (its own): no request, the variable is gone
    monkeypatch.setenv(lifeline.STARTER, str(os.getpid()))
    assert lifeline.die_with_starter() is False
    assert lifeline.STARTER not in os.environ
    for junk in ("", "abc", "-1"):
        monkeypatch.setenv(lifeline.STARTER, junk)
        assert lifeline.die_with_starter() is False


@linux
def test_a_helper_dies_with_its_killed_starter(tmp_path: Path) -> None:
    """The starter is killed with SIGKILL (no clean-up runs); its helper, which would otherwise
    sleep on, is ended by the kernel; the helper's own child never saw the variable."""
    pidfile = tmp_path / "pids"
    helper = (
        "import os, subprocess, sys, time\n"
        "from advisor.multirank import serverlife\n"  # the fork server's first preload
        "child = subprocess.Popen([sys.executable, '-c', "
        '\'import os, sys; sys.stdout.write(os.environ.get("ADVISOR_DIE_WITH", "none"))\'],'
        " stdout=subprocess.PIPE, text=True)\n"
        f"open({str(pidfile)!r}, 'w').write(f'{{os.getpid()}} {{child.communicate()[0]}}')\n"
        "time.sleep(10**6)\n"
    )
    starter = (
        "import subprocess, sys, time\n"
        "from advisor.lifeline import helpers_die_with_me\n"
        "with helpers_die_with_me():\n"
        f"    subprocess.Popen([sys.executable, '-c', {helper!r}])\n"
        "time.sleep(10**6)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop(lifeline.STARTER, None)
    p = subprocess.Popen([sys.executable, "-c", starter], env=env)
    try:
        deadline = time.monotonic() + HANG_S
        while not (pidfile.exists() and " " in pidfile.read_text()):
            assert time.monotonic() < deadline and p.poll() is None
            time.sleep(0.05)
        pid, seen = pidfile.read_text().split()
        assert seen == "none"  # the helper removed the variable before its children ran
        os.kill(int(pid), signal.SIGSTOP)  # it cannot exit by itself now: only a signal ends it
        p.kill()
        p.wait(timeout=HANG_S)
        deadline = time.monotonic() + HANG_S
        while running(int(pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not running(int(pid))
    finally:
        if p.poll() is None:
            p.kill()
