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

from advisor import lifeline, settings
from tests.conftest import HANG_S, REPO
from tests.procs import running, wait_for

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG")


def test_the_variable_is_set_only_while_the_helper_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(settings.STARTER_VAR, raising=False)
    with lifeline.helpers_die_with_me():
        assert os.environ[settings.STARTER_VAR] == str(os.getpid())
    assert settings.STARTER_VAR not in os.environ
    monkeypatch.setenv(settings.STARTER_VAR, "123")  # the advisor's own environment had one
    with lifeline.helpers_die_with_me():
        assert os.environ[settings.STARTER_VAR] == str(os.getpid())
    assert os.environ[settings.STARTER_VAR] == "123"


def test_only_a_child_of_the_named_process_acts(monkeypatch: pytest.MonkeyPatch) -> None:
    # this process is not the child of the pid named (its own): no request, the variable is gone
    monkeypatch.setenv(settings.STARTER_VAR, str(os.getpid()))
    assert lifeline.die_with_starter() is False
    assert settings.STARTER_VAR not in os.environ
    for junk in ("", "abc", "-1"):
        monkeypatch.setenv(settings.STARTER_VAR, junk)
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
    env.pop(settings.STARTER_VAR, None)
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
        assert wait_for(lambda: not running(int(pid)), HANG_S, step_s=0.05)
    finally:
        if p.poll() is None:
            p.kill()


@linux
def test_a_worker_whose_fork_server_is_gone_ends_at_once() -> None:
    """A worker forked just as the fork server died already has another parent when it asks
    for the death signal: named by ``ADVISOR_FORKSERVER``, the fork server is seen to be gone
    and the worker is killed at once, instead of working on for nobody."""
    code = "from advisor.multirank.workers import die_with_parent\ndie_with_parent()\nprint('on')\n"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    gone = dict(env, **{settings.FORKSERVER_VAR: "1"})  # init: never this test's child's parent
    p = subprocess.run([sys.executable, "-c", code], env=gone, capture_output=True, text=True)
    assert p.returncode == -signal.SIGKILL and "on" not in p.stdout, (p.returncode, p.stderr)
    env.pop(settings.FORKSERVER_VAR, None)  # no fork server named: the parent is asked for
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.strip() == "on", (p.returncode, p.stderr)


def test_held_sigint_records_ctrl_c_and_gives_the_handler_back() -> None:
    before = signal.getsignal(signal.SIGINT)
    with lifeline.held_sigint() as got:
        os.kill(os.getpid(), signal.SIGINT)  # delivered here, between two bytecodes: held
        time.sleep(0)
        assert got == [signal.SIGINT]
    assert signal.getsignal(signal.SIGINT) is before
    with lifeline.held_sigint() as got:
        pass
    assert got == []


def test_an_ignored_sigint_stays_ignored() -> None:
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with lifeline.held_sigint() as got:
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGINT)
        assert got == [] and signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, old)


# Ctrl-C while the command starts: the early decoder is where it strikes, by construction
CTRL_C_AT_START = """
import os, signal, sys
from advisor.cli import entry
def struck(args, max_bytes=None):
    os.kill(os.getpid(), signal.SIGINT)
    return None
entry.early_prefetch = struck
if sys.argv[1] == "ignored":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
entry.main(["analyze", "missing.json", "--out", "never"])
"""


@pytest.mark.parametrize("how", ["default", "ignored"])
def test_ctrl_c_while_the_command_starts_is_one_line_and_130(tmp_path: Path, how: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.run(
        [sys.executable, "-c", CTRL_C_AT_START, how],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    if how == "default":
        assert (p.returncode, p.stderr) == (130, "advisor: interrupted\n"), p.stderr
    else:  # a caller that ignores SIGINT: the command runs on and fails on its missing file
        assert p.returncode == 1 and "missing.json" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "never").exists()


def _pool_gone_error() -> tuple[type[BaseException], BaseException, object]:
    """The error of a new worker whose pool's semaphore was removed: a real one, raised by
    multiprocessing's own ``SemLock.__setstate__`` for a semaphore that does not exist."""
    import multiprocessing.synchronize as mps

    lock = mps.Lock.__new__(mps.Lock)
    try:
        lock.__setstate__((0, 1, 1, f"/mp-advisor-gone-{os.getpid()}"))
    except FileNotFoundError:
        kind, value, tb = sys.exc_info()
        assert kind is not None and value is not None
        return kind, value, tb
    raise AssertionError("a semaphore that does not exist was opened")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX named semaphores")
def test_the_fork_servers_children_are_quiet_only_when_their_pool_is_gone(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from advisor.multirank import serverlife

    kind, value, tb = _pool_gone_error()
    assert serverlife.pool_gone(kind, value, tb)
    try:
        open(f"/nonexistent-{os.getpid()}")  # noqa: SIM115 (a FileNotFoundError elsewhere)
    except FileNotFoundError:
        other = sys.exc_info()
    assert not serverlife.pool_gone(*other)
    monkeypatch.setattr(sys, "excepthook", sys.__excepthook__)
    serverlife.quiet_orphans()
    sys.excepthook(kind, value, tb)
    assert capsys.readouterr().err == ""
    sys.excepthook(*other)
    assert "FileNotFoundError" in capsys.readouterr().err
