"""Child processes that end with the process they work for.

A worker (a trace analysed in a process pool, a decoding child, ``advisor try``'s run of the
script) must never work on for nobody: killed parents (SIGKILL, the OOM killer) run no clean-up,
and a child left running holds the caller's pipes (a pipeline reading from the command hangs).
On Linux the kernel delivers a signal to a child when its parent dies
(``PR_SET_PDEATHSIG``); elsewhere :func:`die_with` does nothing and the callers' other guards
(a closed pipe, a poll of the parent) apply.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from advisor import settings

PR_SET_PDEATHSIG = 1


def fork() -> int:
    """``os.fork()`` after flushing stdout and stderr (nothing buffered is written twice: a child
    never flushes them), without Python 3.12's warning about forking a process with threads."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001, S110 (a closed stdout)
            pass
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return os.fork()


def die_with(parent: int, sig: int = signal.SIGKILL) -> bool:
    """In a child: have the kernel send it ``sig`` when its parent dies (even by SIGKILL). If the
    parent ``parent`` (its pid) died before the request took effect, the signal is sent now.
    False where the platform has no such request."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig))
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent:  # the parent died before the request took effect
        os.kill(os.getpid(), sig)
    return True


@contextmanager
def helpers_die_with_me() -> Iterator[None]:
    """While a helper process that runs no code of ours first (multiprocessing's fork server)
    is started: it finds this process's pid in its environment (``ADVISOR_DIE_WITH``), and its
    preloaded module calls :func:`die_with_starter`. Only from the main thread: the kernel's
    signal follows the thread that started the child, and the main thread lasts as long as the
    process."""
    with settings.starter_set(os.getpid()):
        yield


def die_with_starter() -> bool:
    """In a helper started under :func:`helpers_die_with_me`: die with the process that started
    it (:func:`die_with`). The variable is removed, so the helper's own children never act on
    it; anywhere else (no variable, or a pid that is not this process's parent) nothing
    happens. Whether the request was made."""
    pid = settings.pop_starter()
    if not pid.isdigit() or int(pid) != os.getppid():
        return False
    return die_with(int(pid))


@contextmanager
def held_sigint() -> Iterator[list[int]]:
    """Hold Ctrl-C (SIGINT) while the block runs, where raising it at once would leave a thing
    half made (a module half imported, a Dask cluster half built): the list it yields gets an
    entry per SIGINT received, and the caller acts on it after the block; the handler the
    process had is back after the block. Nothing is held off the main thread, or where SIGINT is
    ignored (it stays ignored). A child forked inside the block keeps holding it: its parent
    stops it."""
    got: list[int] = []
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(
        signal.SIGINT
    ) in (signal.SIG_IGN, None):
        yield got
        return
    old = signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
    try:
        yield got
    finally:
        signal.signal(signal.SIGINT, old)
