"""Decode a trace in a forked child process while the parent imports pandas and the detectors.

``advisor analyze`` spends its first half-second importing pandas, numpy and the detectors, and
decoding the trace is the other half: both are CPU work that holds the GIL, so threads cannot
overlap them, but two processes can. As soon as the command knows the trace's path (see
:mod:`advisor.cli.entry`), it forks a *decoder* (before pandas is imported: the child starts small)
that gunzips and decodes the trace into the column arrays of :mod:`advisor.trace.columns` -- numpy
and msgspec only -- joins each column's chunks and streams them back through a pipe in one pickle.
The parent builds the tables from them exactly as from an in-process decode, so the tables,
findings and errors are the same either way.

The child never writes a file and never prints: its outcome travels through a pipe and an
unnamed spool file. It is done and gone by the time the parent runs the detectors, so its memory
never adds to the parent's peak.

- A :class:`~advisor.errors.TraceError` (a bad trace) is sent back and raised in the parent, with
  the same one-line message.
- Anything else (a crash, a killed child, a short pipe) makes :meth:`Prefetch.result` return
  None, and the parent decodes in-process as if there had been no child, so a fault in this
  speed-up can only cost time, never the result.
- A child dies with its parent (Linux: ``PR_SET_PDEATHSIG``); every child not collected is killed
  at exit.

The console entry may start the child before the command line is parsed (:func:`start_early`,
a guess at the trace's path); the command then gets that :class:`Prefetch` as an argument and
keeps it only if it decodes the same file with the same settings (:func:`take_over`).

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
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from advisor import settings
from advisor.errors import TraceError
from advisor.lifeline import die_with, fork

_LIVE: set[_Child] = set()  # this process's children not collected yet: killed at exit


class _Child:
    """One forked child, the read end of its pipe (a short status message) and its spool (an
    unnamed temporary file holding its bulk result, so it can leave without waiting for us)."""

    def __init__(self, pid: int, fd: int, spool: BinaryIO) -> None:
        self.pid = pid
        self.fh: Any = os.fdopen(fd, "rb")
        self.spool: BinaryIO | None = spool
        _LIVE.add(self)

    def bulk(self) -> Any:
        """The columns the decoder spooled (after its message said they are complete)."""
        spool = self.take_spool()
        try:
            spool.seek(0)
            return _read_columns(spool)
        finally:
            spool.close()

    def take_spool(self) -> BinaryIO:
        """The spool, now the caller's to read and close."""
        spool, self.spool = self.spool, None
        assert spool is not None
        return spool

    def message(self) -> tuple[Any, ...] | None:
        """The child's one message (waits for it), then the child is collected."""
        if self.fh is None:
            return None
        try:
            msg = pickle.load(self.fh)
        except Exception:  # noqa: BLE001 (killed or crashed child: a short or empty pipe)
            msg = None
        if isinstance(msg, tuple) and msg and msg[0] == "ok":
            try:
                msg = (msg[0], *self.bulk())
            except Exception:  # noqa: BLE001 (a spool the child could not finish)
                msg = None
        self.close()
        return msg if isinstance(msg, tuple) and msg else None

    def kill(self) -> None:
        if self.fh is not None:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
        self.close()

    def close(self) -> None:
        if self.fh is None:
            return
        _LIVE.discard(self)
        if self.spool is not None:
            with contextlib.suppress(OSError, ValueError):
                self.spool.close()
        with contextlib.suppress(OSError):
            self.fh.close()
        self.fh = None
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(self.pid, 0)  # its peak RSS is then in getrusage(RUSAGE_CHILDREN)


class Prefetch:
    """One trace decoding in a child process: :meth:`result` collects the columns."""

    def __init__(self, path: Path, max_bytes: int, decoder: _Child) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self._decoder: _Child | None = decoder

    def result(self) -> tuple[Any, dict[str, Any], int] | None:
        """(columns, header, text bytes) as :func:`~advisor.trace.decode.decode_columns`
        returns them; raises the child's TraceError; None when the parent must decode itself."""
        if self._decoder is None:
            return None
        msg, self._decoder = self._decoder.message(), None
        if msg is None:
            return None
        kind, *payload = msg
        if kind == "ok":
            cols, header, size = payload
            return cols, header, size
        if kind == "error":
            problem, path = payload
            raise TraceError(problem, path)
        if settings.debug():  # a bug in the child: say so, then decode here
            print(
                f"advisor: decoding child failed ({payload[0]}); decoding in this process",
                file=sys.stderr,
            )
        return None

    def cancel(self) -> None:
        """Stop the child if it is still working (the parent is done or leaving early)."""
        if self._decoder is not None:
            self._decoder.kill()
        self._decoder = None


def enabled() -> bool:
    """Whether a child may be forked from this process now."""
    if not hasattr(os, "fork") or settings.no_fork():
        return False
    return threading.active_count() == 1  # forking a threaded process can deadlock the child


def start(path: Path, max_bytes: int) -> Prefetch | None:
    """Fork the decoder for ``path``; None when forking is not possible here (the caller
    decodes in-process)."""
    if not enabled() or not Path(path).is_file():
        return None
    p = Path(path)
    decoder = _fork(lambda fh, spool: _decode(p, max_bytes, fh, spool))
    return Prefetch(p, max_bytes, decoder) if decoder is not None else None


def start_early(args: Sequence[str], max_bytes: int) -> Prefetch | None:
    """Before the command line is parsed: start decoding the one existing file among a
    command's arguments ``args`` (a guess: :func:`take_over` checks it). Which commands read a
    trace first is the command line's business (:mod:`advisor.cli.entry`)."""
    files = [a for a in args if not a.startswith("-") and os.path.isfile(a)]
    return start(Path(files[0]), max_bytes) if len(files) == 1 else None


def take_over(early: Prefetch | None, path: Path, max_bytes: int) -> Prefetch | None:
    """``early`` when it decodes exactly this file with these settings, else a new child (and
    ``early`` is stopped)."""
    if early is not None:
        same = early.max_bytes == max_bytes
        with contextlib.suppress(OSError):
            same = same and os.path.samefile(early.path, path)
        if same:
            return early
        early.cancel()
    return start(path, max_bytes)


@atexit.register
def cancel_all() -> None:
    """Kill every child not collected (an early exit: a usage error, Ctrl-C, an exception)."""
    for child in list(_LIVE):
        child.kill()


# ---------------------------------------------------------------- in the children


def _fork(job: Callable[[BinaryIO, BinaryIO], None]) -> _Child | None:
    """Run ``job(pipe, spool)`` in a forked child: the spool (an unnamed temporary file) takes its
    bulk result, the pipe a short message written once the spool is complete."""
    try:
        spool: BinaryIO = tempfile.TemporaryFile(prefix="advisor-")
    except OSError:
        return None
    try:
        r, w = os.pipe()
    except OSError:
        spool.close()
        return None
    parent = os.getpid()
    try:
        pid = fork()  # stdout and stderr flushed first
    except OSError:
        os.close(r)
        os.close(w)
        spool.close()
        return None
    if pid == 0:  # the child: work, send, leave without running any of the parent's exit code
        try:
            os.close(r)
            _die_with(parent)
            with os.fdopen(w, "wb") as fh:
                job(fh, spool)
        finally:
            os._exit(0)
    os.close(w)
    return _Child(pid, r, spool)


def _die_with(parent: int) -> None:
    """Linux: have the kernel kill this child when the parent dies (even by SIGKILL), so a child
    never works on for nobody. Elsewhere the child ends at its first write to the closed pipe."""
    for child in list(_LIVE):  # the parent's other children are not ours to collect
        _LIVE.discard(child)
    if not die_with(parent):
        return
    if os.getppid() != parent:  # still here: the signal is on its way
        os._exit(0)


def _decode(path: Path, max_bytes: int, fh: BinaryIO, spool: BinaryIO) -> None:
    """The decoder: the columns go to the spool in pieces of SPILL_ROWS rows as they are decoded
    (this process never holds a big trace whole), then the rest of the Columns; a status goes to
    the pipe."""
    msg: tuple[Any, ...]
    try:
        from advisor.trace.decode import decode_columns
        from advisor.trace.source import Meter, pieces

        meter = Meter()
        src = pieces(path, max_bytes, meter)
        cols, header, raw = decode_columns(path, src, True, _spilling(spool), meter)
        cols.flush()
        cols.spill = None
        pickle.dump(("end", cols, header, raw), spool, protocol=pickle.HIGHEST_PROTOCOL)
        spool.flush()
        msg = ("ok",)
    except TraceError as err:
        msg = ("error", err.problem, err.path)
    except BaseException as err:  # noqa: BLE001 (the parent decodes itself instead)
        msg = ("crash", f"{type(err).__name__}: {err}")
    pickle.dump(msg, fh)


def _spilling(spool: BinaryIO) -> Any:
    """Columns whose pieces go to the spool after every chunk."""
    from advisor.trace.columns import Columns

    cols = Columns()
    cols.spill = lambda parts: pickle.dump(("part", parts), spool, pickle.HIGHEST_PROTOCOL)
    return cols


def _read_columns(spool: BinaryIO) -> tuple[Any, dict[str, Any], int]:
    """The decoder's spool back into one Columns (pieces in order, then the rest)."""
    parts: list[Any] = []
    while True:
        kind, *payload = pickle.load(spool)
        if kind == "part":
            parts.append(payload[0])
            continue
        cols, header, raw = payload
        for p in parts:
            cols.put_parts(p)
        return cols, header, raw
