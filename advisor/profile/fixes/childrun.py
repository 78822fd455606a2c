"""One ``advisor profile`` run of ``advisor try``, ended cleanly by SIGTERM or Ctrl-C.

The run starts in a process group of its own (the script's DataLoader workers join it). While
it runs, SIGTERM or SIGINT to ``advisor try`` (``kill``, a job supervisor, Ctrl-C) is passed on
to that whole group: ``advisor profile`` then ends the script as it does on that signal and
writes its run folder. ``advisor try`` waits up to ``CHILD_GRACE_S`` for it (a second signal
does not wait), kills what is left of the group, and raises :class:`Interrupted`; the caller
writes try.json and try.html with what finished and exits 143 (SIGTERM) or 130 (SIGINT).
Nothing of the run is left running. Between runs (reading a finished run),
:func:`interruptible` turns either signal into :class:`Interrupted` at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import IO

CHILD_GRACE_S = 20.0  # how long an interrupted run may take to end and write its folder
_POLL_S = 0.2


class Interrupted(Exception):  # noqa: N818 (what the user did, not a fault)
    """``advisor try`` got SIGTERM or SIGINT while a run was going on (the run is ended)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.name = signal.Signals(signum).name
        self.exit_code = 128 + signum  # 143, 130: as the shell reports a signal's end
        super().__init__(f"interrupted by {self.name}")


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """While the block runs, SIGTERM and SIGINT raise :class:`Interrupted` (main thread only;
    :func:`run_child` handles them itself while a run goes on)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_signal(signum: int, frame: FrameType | None) -> None:
        raise Interrupted(signum)

    saved = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in saved.items():
            signal.signal(s, h)


def run_child(cmd: list[str], log: IO[str], env: dict[str, str]) -> int:
    """Run ``cmd`` (output into ``log``) and return its exit code; raises :class:`Interrupted`
    after passing a SIGTERM / SIGINT on to its process group and seeing the group end."""
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    got: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        got.append(signum)
        _signal_group(proc.pid, signum if len(got) == 1 else signal.SIGKILL)

    handlers = (signal.SIGTERM, signal.SIGINT)
    saved = {}
    if threading.current_thread() is threading.main_thread():
        saved = {s: signal.signal(s, on_signal) for s in handlers}
    try:
        code = _wait(proc, got)
    finally:
        for s, h in saved.items():
            signal.signal(s, h)
    if got:
        _signal_group(proc.pid, signal.SIGKILL)  # whatever of the run is left (its workers)
        raise Interrupted(got[0])
    return code


def _wait(proc: subprocess.Popen[bytes], got: list[int]) -> int:
    """The child's exit code; after a signal, at most CHILD_GRACE_S more, then the group dies."""
    since: float | None = None
    while True:
        try:
            return proc.wait(timeout=_POLL_S)
        except subprocess.TimeoutExpired:
            pass
        if got and since is None:
            since = time.monotonic()
        if since is not None and time.monotonic() - since > CHILD_GRACE_S:
            _signal_group(proc.pid, signal.SIGKILL)
            return proc.wait()


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)
