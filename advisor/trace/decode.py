"""Read a trace file and decode the fields the tables need, chunk by chunk.

The file is gunzipped as a stream and cut into chunks of a few MB at event boundaries
(``}`` ``,`` ``{`` at the top level of ``traceEvents``). msgspec decodes each chunk straight into
small typed structs holding only the keys listed here (the rest, e.g. ``Input Strides``, is
skipped unparsed; shapes stay raw JSON until the column builder dedups them), and the chunk is
turned into column arrays before the next one is read. So memory holds one chunk of text and
events plus the columns, never the whole file or one Python object per event.

A cut that lands inside a string or nested value makes that chunk invalid JSON, so every cut is
checked by the strict decode itself; on failure an earlier cut is tried, then a longer chunk.
A chunk whose events have unexpected types is decoded generically and converted event by event:
events that cannot be used are skipped and counted instead of failing the load. Files that do not
have the usual layout go through the same code on the whole text. Every fault ends in one
:class:`~advisor.errors.TraceError` naming the file.

What a file can cost is bounded while it is read, so a small file that inflates into a bomb
fails within seconds and a few hundred MB:

- **an event** (and so a string or a number in it) is at most ``MAX_EVENT_BYTES``; real ones
  are a few KB, so no boundary in that much text means a string or a number no profiler
  writes;
- **events per file**: at most ``EVENTS_PER_FILE_BYTE`` per byte read from the file (the gzip
  bytes for a gzip trace), and ``MIN_EVENTS_LIMIT`` whatever the size; real gzip traces hold
  one event per 6 to 25 bytes, a file of millions of identical events one per fraction of a
  byte;
- **a file without the usual layout** (decoded generically, at many times its size in memory):
  ``MAX_WHOLE_BYTES``;
- **the decompressed text**: ``--max-trace-bytes`` (:mod:`advisor.trace.source`).
"""

from __future__ import annotations

import contextlib
import gc
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from advisor.errors import TraceError
from advisor.trace.source import (
    BLANK_RUN,
    DEFAULT_MAX_TRACE_BYTES,
    Meter,
    pieces,
    read_bytes,
)
from advisor.trace.structs import (
    _DECODE_ANY,
    _DECODE_EVENTS,
    _DECODE_FILE,
    EMPTY_ARGS,
    HEADER_KEYS,
    NAN,
    NULL,
    Args,
    Event,
    Sink,
    TraceFile,
)
from advisor.trace.tolerant import (
    _BAD_TEXT,
    _is_text_error,
    _json_problem,
    _json_type,
    _raise_if_inside,
    _tolerant,
    decode_whole,
)

if TYPE_CHECKING:
    from advisor.trace.columns import Columns

__all__ = [
    "DEFAULT_MAX_TRACE_BYTES",
    "EMPTY_ARGS",
    "NAN",
    "NULL",
    "Args",
    "Event",
    "TraceFile",
    "decode_stream",
    "decode_whole",
    "pieces",
    "read_bytes",
]

CHUNK_BYTES = 1 << 20  # decompressed text decoded at a time
MAX_EVENT_BYTES = 16 << 20  # the longest event (string, number) read; real events: a few KB
EVENTS_PER_FILE_BYTE = 1  # events allowed per byte read from the file
MIN_EVENTS_LIMIT = 100_000  # events allowed whatever the file's size
MAX_WHOLE_BYTES = 64 << 20  # the largest text of an unusual layout decoded at once
_NUMBER_CHARS = frozenset(b"0123456789+-.eE")
_HEAD_LIMIT = 64 << 20  # the "traceEvents" key must appear within this many bytes
_KEY_RE = re.compile(rb'"traceEvents"\s*:\s*')
_CUT_RE = re.compile(rb"\}\s*,\s*\{")


class _Buffer:
    """The decompressed text not consumed yet, filled from the pieces on demand."""

    def __init__(self, src: Iterator[bytes]) -> None:
        self.src = src
        self.buf = bytearray()
        self.eof = False
        self.dropped = 0  # bytes removed from the front (for byte offsets in messages)

    def fill(self, size: int) -> None:
        while len(self.buf) < size and not self.eof:
            piece = next(self.src, None)
            if piece is None:
                self.eof = True
            else:
                self.buf += piece

    def rest(self) -> bytes:
        self.fill(1 << 62)
        return bytes(self.buf)

    def drop(self, n: int) -> None:
        del self.buf[:n]
        self.dropped += n


def decode_stream(
    path: Path, src: Iterator[bytes], sink: Sink, meter: Meter | None = None
) -> tuple[dict[str, Any], int]:
    """Feed the events of a trace to ``sink`` chunk by chunk; returns (header, text bytes).
    ``meter``: how much of the file ``src`` has read, for the events-per-file limit."""
    if meter is not None:
        sink = _limited(sink, meter, path)
    b = _Buffer(src)
    b.fill(1 << 16)
    start = 0
    n = len(b.buf)
    while start < n and b.buf[start] in b" \t\r\n":
        start += 1
    if b.buf[start : start + 3] == b"\xef\xbb\xbf":  # UTF-8 byte order mark
        start += 3
    head = bytes(b.buf[start : start + 1])
    if not head:
        raise TraceError("empty trace (no JSON content)", path)
    if head not in (b"{", b"["):
        if b.eof:  # small: say what it is when it is JSON after all
            try:
                value = _DECODE_ANY.decode(b.buf)
            except (msgspec.DecodeError, RecursionError, *_BAD_TEXT):
                pass
            else:
                raise TraceError(f"JSON holding {_json_type(value)} is not a profiler trace", path)
        raise TraceError("not JSON (does not start with '{' or '[')", path)
    if head == b"[":
        _events(b, start + 1, sink, None, path)
        return {}, b.dropped + len(b.buf)
    m = _KEY_RE.search(b.buf, start)
    while m is None and not b.eof and len(b.buf) < _HEAD_LIMIT:
        b.fill(len(b.buf) * 2)
        m = _KEY_RE.search(b.buf, start)
    header: dict[str, Any] | None = None
    if m is not None and b.buf[m.end() : m.end() + 1] == b"[":
        header = _prefix_header(bytes(b.buf[start : m.start()]))
    if m is None or header is None:  # unusual layout: decode the whole text at once
        b.fill(MAX_WHOLE_BYTES + 1)
        if len(b.buf) > MAX_WHOLE_BYTES:  # generic decoding costs many times the text
            raise TraceError(
                f"no plain 'traceEvents' list in its first {_HEAD_LIMIT:,} bytes, and more than "
                f"{MAX_WHOLE_BYTES:,} bytes to read another way: not a profiler trace",
                path,
            )
        data = b.rest()
        return decode_whole(data, path, sink), len(data)
    tail = _events(b, m.end() + 1, sink, b'{"traceEvents":', path)
    for k, v in tail.items():
        if v is not None and header.get(k) is None:
            header[k] = v
    return header, b.dropped + len(b.buf)


def _limited(sink: Sink, meter: Meter, path: Path) -> Sink:
    """``sink``, refusing the events beyond the events-per-file limit (see the module doc)."""
    seen = 0

    def add(events: list[Event], dropped: int) -> None:
        nonlocal seen
        seen += len(events) + dropped
        limit = max(MIN_EVENTS_LIMIT, EVENTS_PER_FILE_BYTE * meter.file_bytes)
        if seen > limit:
            raise TraceError(
                f"{seen:,} events in the first {meter.file_bytes:,} bytes: more than "
                f"{EVENTS_PER_FILE_BYTE} per byte of the file, which no profiler trace holds "
                "(a compression bomb?)",
                path,
            )
        sink(events, dropped)

    return add


def _prefix_header(prefix: bytes) -> dict[str, Any] | None:
    """Header keys written before ``traceEvents`` (None when the prefix is not plain JSON)."""
    try:
        tf = _DECODE_FILE.decode(prefix + b'"traceEvents":[]}')
    except (msgspec.DecodeError, RecursionError, *_BAD_TEXT):
        return None
    return {k: getattr(tf, k) for k in HEADER_KEYS}


def _events(b: _Buffer, s: int, sink: Sink, opener: bytes | None, path: Path) -> dict[str, Any]:
    """Decode the events array from ``b.buf[s:]`` (just after its ``[``) in chunks."""
    want = CHUNK_BYTES
    while True:
        b.fill(s + want)
        if b.eof:
            break
        cut = _try_cuts(b, s, sink, path)
        if cut is None:  # no usable cut yet (huge event or unlucky text): read further
            if want >= MAX_EVENT_BYTES:
                if _squeezed(b, s):  # whitespace padding between events, not an event
                    want = CHUNK_BYTES
                    continue
                raise TraceError(_oversized(b, s), path)
            want *= 2
            continue
        b.drop(cut)
        s = 0
        want = CHUNK_BYTES
    # the rest of the array, plus what follows it in the file
    head = b"[" if opener is None else opener + b"["
    rest = _join(head, b.buf, s, len(b.buf), b"")
    return _decode_last(rest, opener is not None, sink, path, b.dropped + s - len(head))


def _squeezed(b: _Buffer, s: int) -> bool:
    """Shrink runs of whitespace in the text not decoded yet to one space (as the source does
    past its squeeze ratio); True when that freed most of it."""
    before = len(b.buf) - s
    text = BLANK_RUN.sub(b" ", b.buf[s:])
    if len(text) > before // 2:
        return False
    del b.buf[s:]
    b.buf += text
    return True


def _oversized(b: _Buffer, s: int) -> str:
    """What the text holds where no event ends within MAX_EVENT_BYTES: a string, a number."""
    tail = bytes(b.buf[-4096:])
    where = f"(from byte {b.dropped + s:,})"
    if tail and set(tail) <= _NUMBER_CHARS:
        what = f"a number longer than {MAX_EVENT_BYTES:,} digits"
    elif b'"' not in tail:
        what = f"a string longer than {MAX_EVENT_BYTES:,} characters"
    else:
        what = f"an event longer than {MAX_EVENT_BYTES:,} bytes"
    return f"{what} {where}: not a profiler trace"


def _join(head: bytes, buf: bytearray, start: int, end: int, tail: bytes) -> bytes:
    """head + buf[start:end] + tail as one new bytes object (one copy)."""
    with memoryview(buf) as whole, whole[start:end] as part:
        return b"".join((head, part, tail))


def _try_cuts(b: _Buffer, s: int, sink: Sink, path: Path) -> int | None:
    """Decode one chunk ending at one of the last event boundaries; returns where the next starts."""
    buf = b.buf
    cuts: list[re.Match[bytes]] = []
    for window in (1 << 16, 1 << 20):  # events are small: the last 64 KB nearly always has cuts
        cuts = list(_CUT_RE.finditer(buf, max(s, len(buf) - window)))[-4:]
        if cuts or window >= len(buf) - s:
            break
    for m in reversed(cuts):
        chunk = _join(b"[", buf, s, m.start() + 1, b"]")  # up to and with the '}'
        if _decode_chunk(chunk, sink, path, b.dropped + s - 1):
            return m.end() - 1  # the '{' of the next event
    return None


def _decode_chunk(chunk: bytes, sink: Sink, path: Path, base: int) -> bool:
    """Decode ``[events]``; False when the cut was not at an event boundary."""
    try:
        events = _DECODE_EVENTS.decode(chunk)
    except msgspec.ValidationError:
        return _tolerant(chunk, sink, path, base)
    except msgspec.DecodeError as err:
        if _is_text_error(err):
            return _tolerant(chunk, sink, path, base)
        _raise_if_inside(err, len(chunk), path, base)
        return False
    except _BAD_TEXT:
        return _tolerant(chunk, sink, path, base)
    except RecursionError:
        raise TraceError("JSON nested too deeply", path) from None
    sink(events, 0)
    return True


def _decode_last(data: bytes, is_object: bool, sink: Sink, path: Path, base: int) -> dict[str, Any]:
    try:
        if is_object:
            tf = _DECODE_FILE.decode(data)
            sink(tf.traceEvents or [], 0)
            return {k: getattr(tf, k) for k in HEADER_KEYS}
        sink(_DECODE_EVENTS.decode(data), 0)
        return {}
    except msgspec.ValidationError:
        pass
    except msgspec.DecodeError as err:
        if not _is_text_error(err):
            raise TraceError(_json_problem(err, base), path) from None
    except _BAD_TEXT:
        pass
    except RecursionError:
        raise TraceError("JSON nested too deeply", path) from None
    return decode_whole(data, path, sink, base)


@contextlib.contextmanager
def loading(p: Path) -> Iterator[None]:
    """Garbage collection off (the decoded data holds no cycles: collections would only walk the
    heap) and deep nesting or exhausted memory reported as one-line TraceErrors."""
    gc_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    except RecursionError:
        raise TraceError("trace nested too deeply", p) from None
    except MemoryError:
        raise TraceError("out of memory while loading the trace", p) from None
    finally:
        if gc_enabled:
            gc.enable()


def decode_columns(
    p: Path,
    src: Iterator[bytes],
    require_events: bool,
    cols: Columns | None = None,
    meter: Meter | None = None,
) -> tuple[Columns, dict[str, Any], int]:
    """The trace's columns, header and text size (no pandas involved); ``cols``: the Columns to
    fill (e.g. one that sends its pieces elsewhere as it goes); ``meter``: what ``src`` read of
    the file (bounds the events)."""
    from advisor.trace.columns import Columns

    cols = cols if cols is not None else Columns()
    with loading(p):
        header, size = decode_stream(p, src, cols.add, meter)
    if require_events and not cols.events:
        raise TraceError("the trace holds no events", p)
    if cols.events and not cols.usable:
        raise TraceError("no usable trace events: not a profiler trace", p)
    return cols, header, size
