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

import atexit
import contextlib
import os
import pickle
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from advisor.errors import TraceError

_LIVE: set[Prefetch] = set()  # children not collected yet: killed at exit
_EARLY: list[Prefetch] = []  # started by the console entry before the command line was parsed


class Prefetch:
    """One trace decoding in a child process: :meth:`result` collects the columns, then
    :meth:`annotated_tail` the recompressed text for ``trace.annotated.json.gz`` (each once)."""

    def __init__(self, path: Path, max_bytes: int, pid: int, fd: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.pid = pid
        self._fh: Any = os.fdopen(fd, "rb")
        self._tail_coming = False
        self.annotate = False
        _LIVE.add(self)

    def _message(self) -> tuple[Any, ...] | None:
        if self._fh is None:
            return None
        try:
            msg = pickle.load(self._fh)
        except Exception:  # noqa: BLE001 (killed or crashed child: a short or empty pipe)
            self._close()
            return None
        return msg if isinstance(msg, tuple) and msg else None

    def result(self) -> tuple[Any, dict[str, Any], int] | None:
        """(columns, header, text bytes) as :func:`~advisor.trace.discover.decode_columns`
        returns them; raises the child's TraceError; None when the parent must decode itself."""
        msg = self._message()
        if msg is None:
            return None
        kind, *payload = msg
        if kind == "ok":
            cols, header, size, self._tail_coming = payload
            if not self._tail_coming:
                self._close()
            return cols, header, size
        self._close()
        if kind == "error":
            problem, path = payload
            raise TraceError(problem, path)
        return None

    @property
    def tail_coming(self) -> bool:
        """Whether the child is recompressing the trace for the annotated copy."""
        return self._tail_coming

    def annotated_tail(self) -> Any:
        """The child's :class:`~advisor.render.annotate_stream.Tail` (waits for it), or None."""
        if not self._tail_coming:
            return None
        self._tail_coming = False
        msg = self._message()
        self._close()
        return msg[1] if msg is not None and msg[0] == "tail" else None

    def cancel(self) -> None:
        """Stop the child if it is still working (the parent is done or leaving early)."""
        if self._fh is None:
            return
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGKILL)
        self._close()

    def _close(self) -> None:
        if self._fh is None:
            return
        _LIVE.discard(self)
        with contextlib.suppress(OSError):
            self._fh.close()
        self._fh = None
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(self.pid, 0)


def enabled() -> bool:
    """Whether a decoding child may be forked from this process now."""
    if not hasattr(os, "fork") or os.environ.get("ADVISOR_NO_FORK", "") not in ("", "0"):
        return False
    return threading.active_count() == 1  # forking a threaded process can deadlock the child


def start(path: Path, max_bytes: int, annotate: bool = False) -> Prefetch | None:
    """Fork a child decoding ``path``; None when forking is not possible here (decode in-process).

    ``annotate``: once the columns are sent, the child also recompresses the trace's text for
    ``trace.annotated.json.gz`` (see :mod:`advisor.render.annotate_stream`), on its own core while
    the parent runs the detectors."""
    if not enabled() or not Path(path).is_file():
        return None
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    try:
        r, w = os.pipe()
    except OSError:
        return None
    parent = os.getpid()
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
            _die_with(parent)
            code = _child(Path(path), max_bytes, w, annotate)
        finally:
            os._exit(code)
    os.close(w)
    pre = Prefetch(Path(path), max_bytes, pid, r)
    pre.annotate = annotate
    return pre


def start_early(path: Path, max_bytes: int, annotate: bool) -> None:
    """Start decoding before the command line is parsed (see :mod:`advisor.entry`); the command
    takes it over with :func:`claim`."""
    pre = start(path, max_bytes, annotate)
    if pre is not None:
        _EARLY.append(pre)


def claim(path: Path, max_bytes: int, annotate: bool = False) -> Prefetch | None:
    """The child started early for exactly this file and these settings, else a new one."""
    early = _EARLY.pop() if _EARLY else None
    if early is not None:
        same = (early.max_bytes, early.annotate) == (max_bytes, annotate)
        with contextlib.suppress(OSError):
            same = same and os.path.samefile(early.path, path)
        if same:
            return early
        early.cancel()
    return start(path, max_bytes, annotate)


@atexit.register
def cancel_all() -> None:
    """Kill every child not collected (an early exit: a usage error, Ctrl-C, an exception)."""
    _EARLY.clear()
    for pre in list(_LIVE):
        pre.cancel()


def _die_with(parent: int) -> None:
    """Linux: have the kernel kill this child when the parent dies (even by SIGKILL), so a child
    never decodes on for nobody. Elsewhere the child ends at its first write to the closed pipe."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(0)


def _child(path: Path, max_bytes: int, fd: int, annotate: bool) -> int:
    with os.fdopen(fd, "wb") as fh:
        size = _send_columns(path, max_bytes, fh, annotate)
        if size is None:
            return 0
        from advisor.render.annotate_stream import recompress

        try:
            tail = recompress(path, max_bytes)
        except Exception:  # noqa: BLE001 (the annotated copy is a convenience)
            tail = None
        fh.write(pickle.dumps(("tail", tail), protocol=pickle.HIGHEST_PROTOCOL))
    return 0


def _send_columns(path: Path, max_bytes: int, fh: Any, annotate: bool) -> int | None:
    """Decode and send the columns; the text size when the annotated tail is to follow."""
    msg: tuple[Any, ...]
    size: int | None = None
    try:
        from advisor.render.annotate_stream import AHEAD_MAX_BYTES
        from advisor.trace.discover import decode_columns
        from advisor.trace.source import pieces

        cols, header, raw = decode_columns(path, pieces(path, max_bytes), True)
        cols.drop_caches()
        if annotate and raw <= AHEAD_MAX_BYTES:  # big traces: streamed after the detectors
            size = raw
        msg = ("ok", cols, header, raw, size is not None)
    except TraceError as err:
        msg = ("error", err.problem, err.path)
    except BaseException as err:  # noqa: BLE001 (the parent decodes itself instead)
        msg = ("crash", f"{type(err).__name__}: {err}")
    try:
        data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as err:  # noqa: BLE001
        data, size = pickle.dumps(("crash", f"cannot send the columns: {err}")), None
    del msg
    fh.write(data)
    fh.flush()
    return size
