"""Processes the script forks: left alone, and counted.

A raw ``os.fork()`` child of the script runs the script's code after the fork, and when that
code ends (``sys.exit``, an exception, the end of the script) it returns into the advisor's
runner like the parent would. :func:`leave_child` ends it there as plain Python would (its
exception printed by ``sys.excepthook``, its own exit code, its non-daemon threads joined, its
``atexit`` handlers run, stdout and stderr flushed), without any of the advisor's end of run:
no summary, nothing written into the run folder.

It leaves by ``os._exit`` after that Python-level shutdown, skipping the C++ teardown of static
objects: torch's profiler keeps threads that a forked child does not have, and its teardown in
such a child aborts (``std::system_error: Invalid argument``) or hangs; under plain Python and
``torch.profiler`` the same child hangs at its exit. Only the process ``advisor profile``
started is profiled: what a child does is not in the trace.

:class:`ForkWatch` counts the raw forks of the profiled process (``os.register_at_fork``; not
``multiprocessing``'s, whose children end by ``os._exit`` on their own), and how many came
while the profiler was recording; run.json says so (``forks``).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import NoReturn

from advisor.runcapture import Forks

EXIT_SIGINT = 130


def leave_child(code: int) -> NoReturn:
    """End a forked child of the script that came back into the runner, with ``code`` (130:
    a ``KeyboardInterrupt``, which ends the process by SIGINT, as Python does)."""
    with contextlib.suppress(BaseException):
        threading._shutdown()  # type: ignore[attr-defined]  # what Py_Finalize does first
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            if stream is not None:
                stream.flush()
    _flush_c_stdio()
    if code == EXIT_SIGINT:
        with contextlib.suppress(BaseException):
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
    os._exit(code)


def _by_multiprocessing() -> bool:
    """The fork came from ``multiprocessing`` (a DataLoader worker, a Pool): its children end
    by ``os._exit`` on their own and never come back into the runner."""
    frame = sys._getframe(1)
    while frame is not None:
        if "multiprocessing" in frame.f_code.co_filename:
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def _flush_c_stdio() -> None:
    """C ``stdio`` buffers (what extensions printed) flushed, as ``exit()`` would."""
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError, TypeError):
        pass


class ForkWatch:
    """Counts the forks of this process after :meth:`start` (each fork: ``recording()`` says
    whether the profiler was recording then) until :meth:`stop`."""

    def __init__(self, recording: Callable[[], bool]) -> None:
        self._recording = recording
        self._owner = os.getpid()
        self._on = False
        self.total = 0
        self.while_recording = 0

    def start(self) -> None:
        self._on = True
        if hasattr(os, "register_at_fork"):  # callbacks stay registered: _on ends them
            os.register_at_fork(after_in_parent=self._forked)

    def stop(self) -> None:
        self._on = False
        self._recording = lambda: False  # the callback stays registered: it keeps no run

    def _forked(self) -> None:
        if not self._on or os.getpid() != self._owner or _by_multiprocessing():
            return
        self.total += 1
        try:
            if self._recording():
                self.while_recording += 1
        except Exception:  # noqa: BLE001 (a count, never a failure of the script's fork)
            pass

    def summary(self) -> Forks | None:
        """run.json's ``forks`` (None when the script never forked)."""
        if not self.total:
            return None
        return Forks(total=self.total, while_recording=self.while_recording)


def fork_note(summary: Forks | None) -> str | None:
    """run.json's note when the script forked while the profiler recorded."""
    n = int(summary.while_recording or 0) if summary else 0
    if not n:
        return None
    return (
        f"The script forked {n} process(es) while the profiler was "
        "recording: only this process is profiled, so their work is not in the trace. "
        "Under torch.profiler alone such a child can hang at its exit; advisor profile "
        "ends it with its own exit code (see docs/errors.md)."
    )
