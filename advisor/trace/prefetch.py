"""Decode a trace in a forked child process while the parent imports pandas and the detectors.

``advisor analyze`` spends its first half-second importing pandas, numpy and the detectors, and
decoding the trace is the other half: both are CPU work that holds the GIL, so threads cannot
overlap them, but two processes can. As soon as the command knows the trace's path, it forks a
child (before pandas is imported: the child starts small) that gunzips and decodes the trace into
the column arrays of :mod:`advisor.trace.columns` -- numpy and msgspec only -- and sends them back
through a pipe in one pickle. The parent builds the tables from them exactly as from an in-process
decode, so the tables, findings and errors are the same either way.

The child never writes a file and never prints: its outcome travels through the pipe.

- A :class:`~advisor.errors.TraceError` (a bad trace) is sent back and raised in the parent, with
  the same one-line message.
- Anything else (a crash, a killed child, a short pipe) makes :meth:`Prefetch.result` return
  None, and the parent decodes in-process as if there had been no child, so a fault in this
  speed-up can only cost time, never the result.

The decode memory (the text being parsed and one chunk of msgspec structs) lives in the child
and is returned to the system when it exits; the parent holds only the columns.

Forking is skipped where it is not safe or not possible: no ``os.fork`` (Windows), threads already
running in the parent, or ``ADVISOR_NO_FORK=1`` in the environment.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from advisor.errors import TraceError

_READ = 1 << 20


class Prefetch:
    """One trace decoding in a child process; :meth:`result` collects it (once)."""

    def __init__(self, path: Path, max_bytes: int, pid: int, fd: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.pid = pid
        self.fd = fd
        self._done = False

    def result(self) -> tuple[Any, dict[str, Any], int] | None:
        """(columns, header, text bytes) as :func:`~advisor.trace.discover.decode_columns`
        returns them; raises the child's TraceError; None when the parent must decode itself."""
        if self._done:
            return None
        self._done = True
        try:
            with os.fdopen(self.fd, "rb", buffering=0) as fh:
                data = _read_all(fh)
        except OSError:
            data = b""
        self._reap()
        try:
            kind, *payload = pickle.loads(data)
        except Exception:  # noqa: BLE001 (killed or crashed child: short or empty pipe)
            return None
        if kind == "ok":
            cols, header, size = payload
            return cols, header, size
        if kind == "error":
            problem, path = payload
            raise TraceError(problem, path)
        return None

    def cancel(self) -> None:
        """Stop the child (the parent is leaving early) and close the pipe."""
        if self._done:
            return
        self._done = True
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.close(self.fd)
        self._reap()

    def _reap(self) -> None:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(self.pid, 0)


def _read_all(fh: Any) -> bytes:
    parts: list[bytes] = []
    while True:
        part = fh.read(_READ)
        if not part:
            return b"".join(parts)
        parts.append(part)


def enabled() -> bool:
    """Whether a decoding child may be forked from this process now."""
    if not hasattr(os, "fork") or os.environ.get("ADVISOR_NO_FORK", "") not in ("", "0"):
        return False
    return threading.active_count() == 1  # forking a threaded process can deadlock the child


def start(path: Path, max_bytes: int) -> Prefetch | None:
    """Fork a child decoding ``path``; None when forking is not possible here (decode in-process)."""
    if not enabled() or not Path(path).is_file():
        return None
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    try:
        r, w = os.pipe()
    except OSError:
        return None
    try:
        pid = os.fork()
    except OSError:
        os.close(r)
        os.close(w)
        return None
    if pid == 0:  # the child: decode, send, leave without running any of the parent's exit code
        code = 1
        try:
            os.close(r)
            code = _child(Path(path), max_bytes, w)
        finally:
            os._exit(code)
    os.close(w)
    return Prefetch(Path(path), max_bytes, pid, r)


def _child(path: Path, max_bytes: int, fd: int) -> int:
    msg: tuple[Any, ...]
    try:
        from advisor.trace.discover import decode_columns
        from advisor.trace.source import pieces

        cols, header, size = decode_columns(path, pieces(path, max_bytes), True)
        cols.drop_caches()
        msg = ("ok", cols, header, size)
    except TraceError as err:
        msg = ("error", err.problem, err.path)
    except BaseException as err:  # noqa: BLE001 (the parent decodes itself instead)
        msg = ("crash", f"{type(err).__name__}: {err}")
    try:
        data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as err:  # noqa: BLE001
        data = pickle.dumps(("crash", f"cannot send the columns: {err}"))
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return 0
