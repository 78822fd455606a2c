"""The text of a trace recompressed for ``trace.annotated.json.gz``, in light imports only.

:func:`recompress` runs in a background thread while the detectors run;
:mod:`advisor.output.annotate_stream` joins its result with the findings.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from advisor.trace import fastzlib
from advisor.trace.source import DEFAULT_MAX_TRACE_BYTES, pieces

CATEGORY = "advisor_finding"
FINDINGS_PID = 2_000_000_000  # above any OS pid (Linux caps them at 2^22) and device id
EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
PID_TAKEN = re.compile(rb'"pid"\s*:\s*"?2000000000\b')
# Recompress ahead (in a thread while the detectors run) only up to this much
# text: beyond it the ahead copy would hold too much, or slow the detectors more than the overlap
# gains, and the copy is streamed after the detectors instead.
AHEAD_MAX_BYTES = 256 << 20
_HEAD_LIMIT = 64 << 20  # the events key must show up within this much text
_OVERLAP = 64  # bytes kept between pieces so a pattern split across two is still found


@dataclass
class Tail:
    """The text before the splice point, and the raw deflate of all the text after it."""

    head: bytes
    chunks: Iterable[bytes]  # a list, or blocks read back from a file
    crc: int  # CRC-32 of the text after the splice point
    length: int  # its length in bytes
    empty: bool  # the events array is empty: no comma after the findings


def recompress(
    path: Path,
    max_bytes: int = DEFAULT_MAX_TRACE_BYTES,
    stop: Callable[[], bool] = lambda: False,
    max_text: int | None = None,
    sink: Callable[[bytes], object] | None = None,
) -> Tail | None:
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
            at = splice_at(buf)
            if at is None:
                if len(buf) > _HEAD_LIMIT:
                    return None
                continue
            if taken(buf):
                return None
            head = buf[:at]
            piece = buf[at:]
            prev = buf[-_OVERLAP:]
            buf = b""
        elif taken(prev + piece[:_OVERLAP]) or taken(piece):  # no copy of the piece
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


def splice_at(text: bytes) -> int | None:
    """Offset just inside the events array (after its ``[``), or None when unsure."""
    if text.lstrip()[:1] == b"[":
        return text.index(b"[") + 1
    m = EVENTS_KEY.search(text)
    return m.end() if m else None


def taken(text: bytes) -> bool:
    """The text already holds a findings track, or an event uses the findings pid."""
    if CATEGORY.encode() in text:
        return True
    return str(FINDINGS_PID).encode() in text and PID_TAKEN.search(text) is not None


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
