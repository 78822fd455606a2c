"""Two guards around a profiling session.

- :class:`MaxSecondsAlarm`: ``--max-seconds`` for scripts that never step, as a SIGALRM timer
  (main thread only, and only when nothing else handles SIGALRM). Its callback runs in the main
  thread between bytecodes and may raise into the script, like Ctrl-C.
- :class:`ForeignProfilerWatch`: notices the script starting torch.profiler (or
  ``torch.autograd.profiler.profile``) itself, before that profiler takes over: only one can
  run at a time, and a second one silently discards the first one's session.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any


class MaxSecondsAlarm:
    def __init__(self, seconds: float, on_fire: Callable[[], None]) -> None:
        self._seconds = seconds
        self._on_fire = on_fire
        self._old: Any = None

    def arm(self) -> None:
        if self._seconds <= 0 or not hasattr(signal, "setitimer"):
            return
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGALRM) not in (signal.SIG_DFL, None):
            return  # the environment uses SIGALRM itself
        self._old = signal.signal(signal.SIGALRM, self._handler)
        signal.setitimer(signal.ITIMER_REAL, self._seconds)

    def extend(self, seconds: float) -> None:
        """Fire again in ``seconds`` (only while armed: from its own handler, say)."""
        if self._old is not None and seconds > 0 and hasattr(signal, "setitimer"):
            signal.setitimer(signal.ITIMER_REAL, seconds)

    def disarm(self) -> None:
        """Stop the timer; put the earlier SIGALRM handler back. From a thread other than the
        main one (a script that trains in a thread) only the timer stops: Python lets only the
        main thread set handlers, so the handler goes when the main thread disarms again."""
        if self._old is None:
            return
        signal.setitimer(signal.ITIMER_REAL, 0)
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGALRM) == self._handler:
            signal.signal(signal.SIGALRM, self._old)
        self._old = None

    def _handler(self, signum: int, frame: Any) -> None:
        self._on_fire()


class ForeignProfilerWatch:
    """Calls ``on_foreign()`` when a profiler other than the session's own is about to start
    while ``is_watching()`` is true. The session's own calls run inside :meth:`own`."""

    def __init__(self, is_watching: Callable[[], bool], on_foreign: Callable[[], None]) -> None:
        self._is_watching = is_watching
        self._on_foreign = on_foreign
        self._own_depth = 0
        self._patched: Any = None

    def own(self) -> _Own:
        return _Own(self)

    def install(self) -> None:
        import torch.autograd.profiler as ap

        cls = ap.profile
        orig = cls.__dict__.get("_prepare_trace")
        if orig is None:
            return
        watch = self

        def _prepare_trace(prof: Any, *args: Any, **kwargs: Any) -> Any:
            if not watch._own_depth and watch._is_watching():
                watch._on_foreign()
            return orig(prof, *args, **kwargs)

        setattr(cls, "_prepare_trace", _prepare_trace)  # noqa: B010
        self._patched = (cls, orig)

    def remove(self) -> None:
        if self._patched is not None:
            cls, orig = self._patched
            setattr(cls, "_prepare_trace", orig)  # noqa: B010
            self._patched = None


class _Own:
    def __init__(self, watch: ForeignProfilerWatch) -> None:
        self._watch = watch

    def __enter__(self) -> None:
        self._watch._own_depth += 1

    def __exit__(self, *exc: object) -> None:
        self._watch._own_depth -= 1


def rss_bytes() -> int | None:
    """The process's resident memory (Linux); None where it cannot be read."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        return None
