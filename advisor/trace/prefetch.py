"""Decode a trace in a forked child process while the parent imports pandas and the detectors.

``advisor analyze`` spends its first half-second importing pandas, numpy and the detectors, and
decoding the trace is the other half: both are CPU work that holds the GIL, so threads cannot
overlap them, but two processes can. As soon as the command knows the trace's path (see
:mod:`advisor.entry`), it forks a *decoder* (before pandas is imported: the child starts small)
that gunzips and decodes the trace into the column arrays of :mod:`advisor.trace.columns` -- numpy
and msgspec only -- joins each column's chunks and streams them back through a pipe in one pickle.
The parent builds the tables from them exactly as from an in-process decode, so the tables,
findings and errors are the same either way.

For ``analyze``, a second small child, the *copier*, recompresses the trace's text for
``trace.annotated.json.gz`` at the same time (:func:`advisor.render.tail.recompress`);
the parent collects its result together with the columns. Both children are done and gone by the
time the parent runs the detectors, so their memory never adds to the parent's peak.

The children never write a file and never print: their outcome travels through the pipes.

- A :class:`~advisor.errors.TraceError` (a bad trace) is sent back and raised in the parent, with
  the same one-line message.
- Anything else (a crash, a killed child, a short pipe) makes :meth:`Prefetch.result` return
  None, and the parent decodes in-process as if there had been no child (or writes the annotated
  copy itself), so a fault in this speed-up can only cost time, never the result.
- A child dies with its parent (Linux: ``PR_SET_PDEATHSIG``); every child not collected is killed
  at exit.

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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from advisor.errors import TraceError

child_peak_rss = 0  # bytes: the largest peak RSS of a child collected so far (for benchmarks)
_LIVE: set[_Child] = set()  # children not collected yet: killed at exit
_EARLY: list[Prefetch] = []  # started by the console entry before the command line was parsed


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
            _, _, usage = os.wait4(self.pid, 0)
            global child_peak_rss
            child_peak_rss = max(child_peak_rss, usage.ru_maxrss * 1024)


class Prefetch:
    """One trace decoding in a child process (and recompressing in another when ``annotate``):
    :meth:`result` collects the columns, :meth:`annotated_tail` the recompressed text."""

    def __init__(self, path: Path, max_bytes: int, decoder: _Child, copier: _Child | None,
                 annotate: bool) -> None:  # fmt: skip
        self.path = path
        self.max_bytes = max_bytes
        self.annotate = annotate  # asked for, even when the copier could not be forked
        self._decoder: _Child | None = decoder
        self._copier = copier

    def result(self) -> tuple[Any, dict[str, Any], int] | None:
        """(columns, header, text bytes) as :func:`~advisor.trace.discover.decode_columns`
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
        if os.environ.get("ADVISOR_DEBUG"):  # a bug in the child: say so, then decode here
            print(f"advisor: decoding child failed ({payload[0]}); decoding in this process",
                  file=sys.stderr)  # fmt: skip
        return None

    @property
    def tail_coming(self) -> bool:
        """Whether a copier is recompressing the text (see :meth:`annotated_tail`)."""
        return self._copier is not None

    def annotated_tail(self) -> Any:
        """The copier's :class:`~advisor.render.tail.Tail` (waits for it), or None
        when it could not make one."""
        copier, self._copier = self._copier, None
        return _spooled_tail(copier) if copier is not None else None

    def cancel(self) -> None:
        """Stop the children if they are still working (the parent is done or leaving early)."""
        for child in (self._decoder, self._copier):
            if child is not None:
                child.kill()
        self._decoder = self._copier = None


def enabled() -> bool:
    """Whether a child may be forked from this process now."""
    if not hasattr(os, "fork") or os.environ.get("ADVISOR_NO_FORK", "") not in ("", "0"):
        return False
    return threading.active_count() == 1  # forking a threaded process can deadlock the child


def start(path: Path, max_bytes: int, annotate: bool = False) -> Prefetch | None:
    """Fork the decoder for ``path`` (and the copier when ``annotate``); None when forking is not
    possible here (the caller decodes in-process)."""
    if not enabled() or not Path(path).is_file():
        return None
    p = Path(path)
    try:
        go_r, go_w = os.pipe() if annotate else (-1, -1)  # the decoder tells the copier to start
    except OSError:
        return None
    go = go_w if annotate else None
    try:
        decoder = _fork(lambda fh, spool: _decode(p, max_bytes, fh, spool, go), go_r)
        copier = None
        if decoder is not None and annotate:
            copier = _fork(lambda fh, spool: _copy(p, max_bytes, fh, spool, go_r), go_w)
    finally:
        for fd in (go_r, go_w):
            if fd >= 0:
                os.close(fd)
    return Prefetch(p, max_bytes, decoder, copier, annotate) if decoder is not None else None


def start_early(path: Path, max_bytes: int, annotate: bool) -> None:
    """Start decoding before the command line is parsed (see :mod:`advisor.entry`); the command
    takes it over with :func:`claim`."""
    pre = start(path, max_bytes, annotate)
    if pre is not None:
        _EARLY.append(pre)


def claim(path: Path, max_bytes: int, annotate: bool = False) -> Prefetch | None:
    """The children started early for exactly this file and these settings, else new ones."""
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
    for child in list(_LIVE):
        child.kill()


# ---------------------------------------------------------------- in the children


def _fork(job: Callable[[BinaryIO, BinaryIO], None], close: int = -1) -> _Child | None:
    """Run ``job(pipe, spool)`` in a forked child: the spool (an unnamed temporary file) takes its
    bulk result, the pipe a short message written once the spool is complete. The child closes
    the file descriptor ``close`` (one it must not hold)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
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
        pid = os.fork()
    except OSError:
        os.close(r)
        os.close(w)
        spool.close()
        return None
    if pid == 0:  # the child: work, send, leave without running any of the parent's exit code
        try:
            os.close(r)
            if close >= 0:
                os.close(close)
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
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(0)


def _decode(path: Path, max_bytes: int, fh: BinaryIO, spool: BinaryIO, go: int | None) -> None:
    """The decoder: the columns go to the spool in pieces of SPILL_ROWS rows as they are decoded
    (this process never holds a big trace whole), then the rest of the Columns; a status goes to
    the pipe. Then it
    wakes the copier (``go``), which recompresses while the parent runs the detectors, on the
    core this frees."""
    msg: tuple[Any, ...]
    try:
        from advisor.trace.discover import decode_columns
        from advisor.trace.source import pieces

        cols, header, raw = decode_columns(path, pieces(path, max_bytes), True, _spilling(spool))
        cols.flush()
        cols.spill = None
        pickle.dump(("end", cols, header, raw), spool, protocol=pickle.HIGHEST_PROTOCOL)
        spool.flush()
        msg = ("ok",)
    except TraceError as err:
        msg = ("error", err.problem, err.path)
    except BaseException as err:  # noqa: BLE001 (the parent decodes itself instead)
        msg = ("crash", f"{type(err).__name__}: {err}")
    if go is not None:
        with contextlib.suppress(OSError):
            os.write(go, b"g")
            os.close(go)
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


def _copy(path: Path, max_bytes: int, fh: BinaryIO, spool: BinaryIO, go: int) -> None:
    """The copier: waits for the decoder (its word, or its end), then recompresses; the deflate
    text goes to the spool as it is made, the rest of the Tail to the pipe."""
    msg: tuple[Any, ...] = ("none",)
    with contextlib.suppress(OSError):
        os.read(go, 1)
        os.close(go)
    try:
        from advisor.render.tail import AHEAD_MAX_BYTES, recompress

        # beyond AHEAD_MAX_BYTES of text the copy is streamed after the detectors instead
        tail = recompress(path, max_bytes, max_text=AHEAD_MAX_BYTES, sink=spool.write)
        if tail is not None:
            spool.flush()
            msg = ("tail", tail, spool.tell())
    except Exception:  # noqa: BLE001 (the annotated copy is a convenience)
        msg = ("none",)
    pickle.dump(msg, fh)


def _spooled_tail(copier: _Child) -> Any:
    """The copier's Tail, its chunks read from the spool as the annotated copy is written."""
    if copier.fh is None or copier.spool is None:
        return None
    spool = copier.take_spool()
    msg = copier.message()
    if msg is None or msg[0] != "tail":
        spool.close()
        return None
    tail, size = msg[1], msg[2]
    spool.seek(0, os.SEEK_END)
    if spool.tell() != size:  # an incomplete spool (disk full): write the copy another way
        spool.close()
        return None
    tail.chunks = _SpoolBlocks(spool)
    return tail


class _SpoolBlocks:
    """The recompressed text in a spool, read back in blocks (iterable once; closes the file)."""

    def __init__(self, spool: BinaryIO) -> None:
        self.spool = spool

    def __iter__(self) -> Iterator[bytes]:
        with self.spool as f:
            f.seek(0)
            while block := f.read(1 << 20):
                yield block
