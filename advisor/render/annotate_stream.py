"""Write ``trace.annotated.json.gz`` without holding the trace in memory, mostly in the background.

The annotated copy is the trace's own text with the findings events spliced in right after the
``[`` of its events array (see :mod:`advisor.render.annotate`). The findings are only known at the
end, but they go near the start of the text, so the work splits in two raw deflate streams:

- the text after the splice point (nearly all of it) is gunzipped and recompressed piece by piece
  in a background thread started as soon as the trace is loaded, while the detectors run (zlib
  releases the GIL, so this overlaps on a second core) -- memory holds one piece and the
  compressed output, never the text;
- at write time, the head (the text before the splice point + the findings events) is compressed
  and sync-flushed, and the two streams are joined into ONE standard gzip member: a deflate
  stream may continue with blocks from a fresh compressor after a sync flush, and the CRC-32 of
  the whole is combined from the two parts (``crc32_combine``, ported from zlib).

When the trace already holds a findings track, uses the findings pid, or has an unusual layout,
the job reports that and the caller falls back to :func:`advisor.render.annotate.annotate`.
"""

from __future__ import annotations

import os
import struct
import tempfile
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

from advisor import fastzlib
from advisor.render.annotate import (
    _EVENTS_KEY,
    _PID_TAKEN,
    CATEGORY,
    FINDINGS_PID,
    GZIP_LEVEL,
    finding_events,
)
from advisor.report import Report
from advisor.trace.decode import DEFAULT_MAX_TRACE_BYTES, pieces

# Recompress in a thread while the detectors run only up to this much text: beyond it, the thread
# and the detectors slow each other down (GIL hand-offs, a shared core) more than the overlap
# gains, and the copy is streamed after the detectors instead.
AHEAD_MAX_BYTES = 256 << 20
_HEAD_LIMIT = 64 << 20  # the events key must show up within this much text
_OVERLAP = 64  # bytes kept between pieces so a pattern split across two is still found
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # deflate, no name, no mtime, OS unknown


@dataclass
class Tail:
    """The text before the splice point, and the raw deflate of all the text after it."""

    head: bytes
    chunks: Iterable[bytes]  # a list, or blocks read back from a file
    crc: int  # CRC-32 of the text after the splice point
    length: int  # its length in bytes
    empty: bool  # the events array is empty: no comma after the findings


def recompress(path: Path, max_bytes: int = DEFAULT_MAX_TRACE_BYTES,
               stop: Callable[[], bool] = lambda: False, max_text: int | None = None,
               sink: Callable[[bytes], object] | None = None) -> Tail | None:  # fmt: skip
    """Gunzip ``path`` and recompress the text after the splice point; None when this path can't
    (no events key, a findings track already there, an unreadable file), ``stop()`` said so, or
    the text is longer than ``max_text``. ``sink`` takes the deflate chunks as they are made
    (the Tail then holds none); by default they are kept in ``Tail.chunks``."""
    z = fastzlib.raw_deflate_obj()
    buf = b""
    at: int | None = None
    head = b""
    first: bytes | None = None  # first non-space byte after the splice point
    prev = b""
    crc = 0
    total = 0
    out: list[bytes] = []
    put = sink if sink is not None else out.append
    for piece in _batched(pieces(path, max_bytes)):
        if stop():
            return None
        if at is None:
            buf += piece
            at = _splice_at(buf)
            if at is None:
                if len(buf) > _HEAD_LIMIT:
                    return None
                continue
            if _taken(buf):
                return None
            head = buf[:at]
            piece = buf[at:]
            prev = buf[-_OVERLAP:]
            buf = b""
        elif _taken(prev + piece[:_OVERLAP]) or _taken(piece):  # no copy of the piece
            return None
        else:
            prev = piece[-_OVERLAP:]
        if first is None and piece.strip():
            first = piece.lstrip()[:1]
        crc = fastzlib.crc32(piece, crc)
        total += len(piece)
        if max_text is not None and total > max_text:
            return None
        chunk = z.compress(piece)
        if chunk:
            put(chunk)
    if at is None or stop():  # cancelled: the text may be incomplete
        return None
    put(z.flush(zlib.Z_FINISH))
    return Tail(head, out, crc, total, first == b"]")


class Prepared:
    """The tail of one trace, recompressed in a background thread, or by ``source`` (a call that
    returns the :class:`Tail` made elsewhere, e.g. by the process that decoded the trace)."""

    def __init__(self, path: Path, max_bytes: int = DEFAULT_MAX_TRACE_BYTES,
                 source: Callable[[], Tail | None] | None = None) -> None:  # fmt: skip
        self.path = path
        self.max_bytes = max_bytes
        self._tail: Tail | None = None
        self._stop = False
        self._source = source
        self._thread: threading.Thread | None = None
        if source is None:
            self._thread = threading.Thread(target=self._run, name="advisor-annotate", daemon=True)
            self._thread.start()

    def cancel(self) -> None:
        self._stop = True

    def _run(self) -> None:
        try:
            self._tail = recompress(self.path, self.max_bytes, lambda: self._stop)
        except BaseException:  # noqa: BLE001 (the copy is a convenience: never fail the run)
            self._tail = None

    def _wait(self) -> Tail | None:
        if self._thread is not None:
            self._thread.join()
        elif self._source is not None:
            source, self._source = self._source, None
            try:
                self._tail = source()
            except Exception:  # noqa: BLE001
                self._tail = None
        return self._tail

    def write(self, report: Report, target: Path) -> bool:
        """Write the annotated copy to ``target`` (atomically); False when this path can't."""
        tail = self._wait()
        if tail is None:
            return False
        ours = b",".join(orjson.dumps(e) for e in finding_events(report, FINDINGS_PID))
        head = tail.head + ours + (b"" if tail.empty else b",")
        z = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -15)
        head_deflate = z.compress(head) + z.flush(zlib.Z_SYNC_FLUSH)
        crc = crc32_combine(zlib.crc32(head), tail.crc, tail.length)
        size = (len(head) + tail.length) & 0xFFFFFFFF
        trailer = struct.pack("<II", crc, size)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        try:
            mask = os.umask(0o022)
            os.umask(mask)
            os.fchmod(fd, 0o666 & ~mask)
            with os.fdopen(fd, "wb") as fh:
                fh.write(_GZIP_HEADER)
                fh.write(head_deflate)
                for chunk in tail.chunks:
                    fh.write(chunk)
                fh.write(trailer)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, target)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        return True


def _splice_at(text: bytes) -> int | None:
    head = text.lstrip()[:1]
    if head == b"[":
        return text.index(b"[") + 1
    if head != b"{":
        return None
    m = _EVENTS_KEY.search(text)
    return m.end() if m else None


def _taken(text: bytes) -> bool:
    """The text already holds a findings track, or an event uses the findings pid."""
    if CATEGORY.encode() in text:
        return True
    return str(FINDINGS_PID).encode() in text and _PID_TAKEN.search(text) is not None


def _batched(src: Iterator[bytes], size: int = 1 << 20) -> Iterator[bytes]:
    """Pieces joined into blocks of about ``size``: fewer, longer zlib calls, so this thread
    takes the GIL rarely and leaves the detectors running at full speed."""
    parts: list[bytes] = []
    n = 0
    for piece in src:
        parts.append(piece)
        n += len(piece)
        if n >= size:
            yield b"".join(parts)
            parts, n = [], 0
    if parts:
        yield b"".join(parts)


# ---------------------------------------------------------------- jobs per trace path

_JOBS: dict[str, Prepared] = {}
_LOCK = threading.Lock()


def prepare(path: Path, max_bytes: int = DEFAULT_MAX_TRACE_BYTES,
            source: Callable[[], Tail | None] | None = None) -> None:  # fmt: skip
    """Start recompressing ``path`` in the background (call once the trace has loaded), or
    register ``source``, which will deliver the recompressed tail made elsewhere."""
    key = str(Path(path).resolve())
    with _LOCK:
        if key not in _JOBS:
            _JOBS[key] = Prepared(Path(path), max_bytes, source)


def take(path: Path) -> Prepared | None:
    """The job started for ``path`` (removed from the registry), or None."""
    with _LOCK:
        return _JOBS.pop(str(Path(path).resolve()), None)


# ---------------------------------------------------------------- CRC-32 of a concatenation


def _gf2_times(mat: list[int], vec: int) -> int:
    s = 0
    i = 0
    while vec:
        if vec & 1:
            s ^= mat[i]
        vec >>= 1
        i += 1
    return s


def _gf2_square(mat: list[int]) -> list[int]:
    return [_gf2_times(mat, mat[n]) for n in range(32)]


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """CRC-32 of A+B from crc32(A), crc32(B) and len(B) (zlib's crc32_combine)."""
    if len2 <= 0:
        return crc1
    odd = [0xEDB88320] + [1 << n for n in range(31)]  # the operator for one zero bit
    even = _gf2_square(odd)  # two zero bits
    odd = _gf2_square(even)  # four zero bits
    while True:
        even = _gf2_square(odd)
        if len2 & 1:
            crc1 = _gf2_times(even, crc1)
        len2 >>= 1
        if not len2:
            break
        odd = _gf2_square(even)
        if len2 & 1:
            crc1 = _gf2_times(odd, crc1)
        len2 >>= 1
        if not len2:
            break
    return crc1 ^ crc2
