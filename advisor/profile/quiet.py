"""torch's own profiler noise kept out of the terminal while the advisor's profilers run.

torch's profiler writes lines of its own to the process's stderr (file descriptor 2, from C++):
``USDT:... profiler_start`` / ``profiler_stop`` at every start and stop, and ``[W... CPUAllocator
.cpp:...] Memory block of unknown size was allocated before the profiling started ...`` when
memory recorded by a window is freed. They say nothing to the user and fall between the
script's and the advisor's lines. :class:`NoiseFilter` points descriptor 2 at a pipe while a
profiler of the advisor's records; a thread passes everything on to the real stderr as it comes,
except complete lines that are exactly that noise (:data:`NOISE`). Partial lines (a progress bar
drawn with ``\\r``) are passed on at once, unless they could be the start of a noise line; then
they wait for the rest of the line, at most :data:`HOLD_S`. The script's own output is never
dropped or reordered; while the filter is on, descriptor 2 is a pipe, not a terminal.

A process forked from Python meanwhile (a DataLoader worker, ``os.fork()``) gets the real
stderr back at once (an at-fork hook), so its output never depends on this process's thread;
a program started with ``subprocess`` writes through the filter while it runs.

:class:`PhaseProgress`: a phase of the run that lasts more than :data:`PROGRESS_AFTER_S` (the
steps before the window, the window, the wait for an evaluation phase) says in one line on
stderr what the advisor is waiting for.

:class:`StdoutAside`: with ``--json``, the script's standard output goes to standard error while
it runs, so that standard output holds the findings JSON alone.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import sys
import threading
import typing
from collections.abc import Callable

NOISE = re.compile(
    rb"^(USDT:[^\n]*\] profiler_(start|stop)"
    rb"|\[W[0-9 :.]*CPUAllocator\.cpp:\d+\] Memory block of unknown size was allocated before "
    rb"the profiling started[^\n]*)\r?$"
)
_PREFIXES = (b"USDT:", b"[W")
HOLD_S = 0.25


def _maybe_noise(part: bytes) -> bool:
    """Whether an incomplete line could still become a noise line."""
    return any(part.startswith(p) or p.startswith(part) for p in _PREFIXES)


def _write_all(fd: int, data: bytes) -> None:
    while data:
        try:
            n = os.write(fd, data)
        except InterruptedError:
            continue
        except OSError:
            return  # the reader went away: nothing to tell
        data = data[n:]


def _pump(r: int, real: int) -> None:
    held = b""
    try:
        while True:
            ready, _, _ = select.select([r], [], [], HOLD_S if held else None)
            if not ready:  # a held partial line that did not end: it was not noise
                _write_all(real, held)
                held = b""
                continue
            chunk = os.read(r, 65536)
            if not chunk:
                break
            data = held + chunk
            lines = data.split(b"\n")
            held = lines.pop()
            kept = [ln + b"\n" for ln in lines if not NOISE.match(ln)]
            if held and not _maybe_noise(held):
                kept.append(held)
                held = b""
            if kept:
                _write_all(real, b"".join(kept))
        if held and not NOISE.match(held):
            _write_all(real, held)
    except OSError:
        pass
    finally:
        for fd in (r, real):
            with contextlib.suppress(OSError):
                os.close(fd)


# the real stderr of the filter that is on, for the at-fork hook (one filter at a time: the
# advisor runs one profiling session per process)
_REAL_STDERR: list[int] = []
_HOOKED: list[bool] = []


def _child_gets_real_stderr() -> None:
    if _REAL_STDERR:
        with contextlib.suppress(OSError):
            os.dup2(_REAL_STDERR[0], 2)


class NoiseFilter:
    """``start()`` / ``stop()`` around the advisor's profiling; both may be called again."""

    def __init__(self) -> None:
        self._saved: int | None = None
        self._thread: threading.Thread | None = None

    @property
    def active(self) -> bool:
        return self._saved is not None

    def start(self) -> None:
        if self._saved is not None:
            return
        try:
            _flush()
            saved = os.dup(2)
        except OSError:  # no stderr: nothing to filter
            return
        try:
            r, w = os.pipe()
        except OSError:
            os.close(saved)
            return
        try:
            os.dup2(w, 2)
            pump_real = os.dup(saved)  # the thread's own copy: it outlives stop()
        except OSError:
            for fd in (saved, r):
                os.close(fd)
            return
        finally:
            os.close(w)
        self._saved = saved
        _REAL_STDERR[:] = [saved]
        if not _HOOKED and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_child_gets_real_stderr)
            _HOOKED.append(True)
        self._thread = threading.Thread(
            target=_pump, args=(r, pump_real), name="advisor-stderr", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        if self._saved is None:
            return
        _flush()
        saved, self._saved = self._saved, None
        _REAL_STDERR.clear()
        try:
            os.dup2(saved, 2)  # the pipe's write end is now held only by forked children
        except OSError:
            pass
        finally:
            os.close(saved)
        if self._thread is not None:
            # what was written before is out before the caller goes on (unless a forked child
            # still holds the pipe: the thread then goes on forwarding its output)
            self._thread.join(timeout=0.2)
            self._thread = None


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError, AttributeError):
            pass


PROGRESS_AFTER_S = 2.0  # a phase that lasts longer says on stderr what the advisor waits for


class PhaseProgress:
    """One line on stderr when a phase of the run lasts more than :data:`PROGRESS_AFTER_S`
    (the script runs meanwhile, so no spinner draws over its output). ``text()`` returns the
    line, or None when the phase is over by then."""

    def __init__(self) -> None:
        self._timer: threading.Timer | None = None

    def after(self, text: Callable[[], str | None]) -> None:
        self.cancel()

        def say() -> None:
            try:
                line = text()
                if line:
                    print(f"advisor: {line}", file=sys.stderr, flush=True)
            except Exception:  # noqa: BLE001 (a courtesy: never disturbs the run)
                pass

        self._timer = threading.Timer(PROGRESS_AFTER_S, say)
        self._timer.daemon = True
        self._timer.start()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class StdoutAside:
    """With ``--json`` the script's standard output (its prints, its children's, its C
    extensions': file descriptor 1) goes to standard error while it runs, so that standard
    output holds the findings JSON alone and a pipe into a JSON reader works."""

    def __init__(self, on: bool) -> None:
        self.on = on
        self._saved: int | None = None

    def start(self) -> None:
        if not self.on or self._saved is not None:
            return
        try:
            _flush_stream(sys.stdout)
            self._saved = os.dup(1)
            os.dup2(2, 1)
        except (OSError, ValueError, AttributeError):
            self._saved = None

    def stop(self) -> None:
        if self._saved is None:
            return
        _flush_stream(sys.stdout)
        try:
            os.dup2(self._saved, 1)
            os.close(self._saved)
        except OSError:
            pass
        self._saved = None


def _flush_stream(stream: typing.Any) -> None:
    try:
        stream.flush()
    except Exception:  # noqa: BLE001 (a closed or replaced stream)
        pass
