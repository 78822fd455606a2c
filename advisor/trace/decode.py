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
"""

from __future__ import annotations

import math
import os
import re
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec

from advisor.errors import TraceError

DEFAULT_MAX_TRACE_BYTES = 8 * 1024**3  # decompressed-size guard (gzip bombs); generous
CHUNK_BYTES = 1 << 20  # decompressed text decoded at a time
_READ_BYTES = 1 << 16  # compressed bytes read at a time (gzip traces inflate 10-20x)
_PIECE_BYTES = 1 << 18  # decompressed text produced at a time
_HEAD_LIMIT = 64 << 20  # the "traceEvents" key must appear within this many bytes
_GZIP_MAGIC = b"\x1f\x8b"
NAN = math.nan
NULL = msgspec.Raw(b"null")  # default of the raw (undecoded) fields


class Args(msgspec.Struct, frozen=True, gc=False):
    """The ``args`` keys the tables use. Shapes and lists stay raw JSON (decoded once per value)."""

    external_id: int = msgspec.field(name="External id", default=-1)
    external_id_legacy: int = msgspec.field(name="external id", default=-1)
    correlation: int = -1
    device: int = -1
    stream: int | str = -1
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default=NULL)
    input_dims_legacy: msgspec.Raw = msgspec.field(name="Input dims", default=NULL)
    input_type: msgspec.Raw = msgspec.field(name="Input type", default=NULL)
    nbytes: float = msgspec.field(name="bytes", default=NAN)
    kind: msgspec.Raw = NULL
    python_id: int = msgspec.field(name="Python id", default=-1)
    python_parent_id: int = msgspec.field(name="Python parent id", default=-1)
    call_stack: str | None = msgspec.field(name="Call stack", default=None)
    seq: int = msgspec.field(name="Sequence number", default=-1)
    fwd_tid: int = msgspec.field(name="Fwd thread id", default=-1)
    grid: msgspec.Raw = NULL
    block: msgspec.Raw = NULL
    mem_bytes: float = msgspec.field(name="Bytes", default=NAN)
    total_allocated: float = msgspec.field(name="Total Allocated", default=NAN)
    total_reserved: float = msgspec.field(name="Total Reserved", default=NAN)
    device_type: int = msgspec.field(name="Device Type", default=-1)
    device_id: int = msgspec.field(name="Device Id", default=-1)
    sync_kind: str | None = msgspec.field(name="cuda_sync_kind", default=None)


EMPTY_ARGS = Args()


class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str | None = None
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float = NAN
    dur: float = NAN
    args: Args = EMPTY_ARGS


class TraceFile(msgspec.Struct, gc=False):
    traceEvents: list[Event] | None = None  # noqa: N815 (the file's own key)
    deviceProperties: Any = None  # noqa: N815
    computeProperties: Any = None  # noqa: N815
    distributedInfo: Any = None  # noqa: N815
    baseTimeNanoseconds: Any = None  # noqa: N815
    schemaVersion: Any = None  # noqa: N815
    displayTimeUnit: Any = None  # noqa: N815
    record_shapes: Any = None
    cuda_runtime_version: Any = None
    cuda_driver_version: Any = None
    trace_id: Any = None


HEADER_KEYS = tuple(k for k in TraceFile.__struct_fields__ if k != "traceEvents")
_DECODE_FILE = msgspec.json.Decoder(TraceFile)
_DECODE_EVENTS = msgspec.json.Decoder(list[Event])
_DECODE_EVENT = msgspec.json.Decoder(Event)
_DECODE_ARGS = msgspec.json.Decoder(Args)
_DECODE_ANY = msgspec.json.Decoder()
_ENCODE = msgspec.json.Encoder()
_KEY_RE = re.compile(rb'"traceEvents"\s*:\s*')
_CUT_RE = re.compile(rb"\}\s*,\s*\{")
_BYTE_RE = re.compile(r"\(byte (\d+)\)")
_SURROGATE_RE = re.compile(
    rb"\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|\\u[dD][89a-fA-F][0-9a-fA-F]{2}"
)
_BAD_TEXT = (UnicodeDecodeError,)

Sink = Callable[[list[Event], int], None]  # (events, events dropped while decoding them)


# ------------------------------------------------------------------ bytes


def pieces(path: Path, max_bytes: int) -> Iterator[bytes]:
    """The file's text in pieces (gunzipped when gzip). Raises TraceError with a one-line reason."""
    try:
        fh = open(path, "rb")  # noqa: SIM115 (closed below, also on errors)
    except FileNotFoundError:
        raise TraceError("no such file", path) from None
    except IsADirectoryError:
        raise TraceError("is a directory, expected a trace file", path) from None
    except PermissionError:
        raise TraceError("permission denied", path) from None
    except OSError as err:
        raise TraceError(f"cannot read: {err.strerror or err}", path) from None
    with fh:
        try:
            first = fh.read(_READ_BYTES)
            if not first:
                raise TraceError("empty file", path)
            if first[:2] == _GZIP_MAGIC:
                yield from _gunzip(fh, first, path, max_bytes)
                return
            if os.fstat(fh.fileno()).st_size > max_bytes:
                raise TraceError(f"larger than --max-trace-bytes ({max_bytes:,} bytes)", path)
            while first:
                yield first
                first = fh.read(_PIECE_BYTES)
        except OSError as err:
            raise TraceError(f"cannot read: {err.strerror or err}", path) from None


def _gunzip(fh: Any, data: bytes, path: Path, max_bytes: int) -> Iterator[bytes]:
    """Decompress gzip members (concatenated members too), a bounded piece at a time."""
    d = zlib.decompressobj(wbits=31)
    total = 0
    try:
        while True:
            if not data:
                data = fh.read(_READ_BYTES)
                if not data:
                    raise TraceError("truncated gzip file (stream ends early)", path)
            out = d.decompress(data, _PIECE_BYTES)
            data = d.unconsumed_tail
            total += len(out)
            if total > max_bytes:
                raise TraceError(
                    f"decompresses to more than --max-trace-bytes ({max_bytes:,} bytes)", path
                )
            if out:
                yield out
            if d.eof:
                data = d.unused_data.lstrip(b"\0")
                while not data:  # padding after the member is fine; another member follows?
                    more = fh.read(_READ_BYTES)
                    if not more:
                        return
                    data = more.lstrip(b"\0")
                d = zlib.decompressobj(wbits=31)
    except zlib.error as err:
        raise TraceError(f"corrupt gzip data ({err})", path) from None


def read_bytes(path: Path, max_bytes: int = DEFAULT_MAX_TRACE_BYTES) -> bytes:
    """The whole text of a (possibly gzipped) trace. Raises TraceError with a one-line reason."""
    data = b"".join(pieces(Path(path), max_bytes))
    if not data.strip():
        raise TraceError("empty trace (no JSON content)", path)
    return data


# ------------------------------------------------------------------ JSON


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


def decode_stream(path: Path, src: Iterator[bytes], sink: Sink) -> tuple[dict[str, Any], int]:
    """Feed the events of a trace to ``sink`` chunk by chunk; returns (header, text bytes)."""
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
        data = b.rest()
        return decode_whole(data, path, sink), len(data)
    tail = _events(b, m.end() + 1, sink, b'{"traceEvents":', path)
    for k, v in tail.items():
        if v is not None and header.get(k) is None:
            header[k] = v
    return header, b.dropped + len(b.buf)


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
            want *= 2
            continue
        b.drop(cut)
        s = 0
        want = CHUNK_BYTES
    # the rest of the array, plus what follows it in the file
    head = b"[" if opener is None else opener + b"["
    rest = _join(head, b.buf, s, len(b.buf), b"")
    return _decode_last(rest, opener is not None, sink, path, b.dropped + s - len(head))


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


def decode_whole(data: bytes, path: Path, sink: Sink, base: int = 0) -> dict[str, Any]:
    """Decode a whole text generically (slow path); returns the header."""
    obj = _decode_any(data, path, base)
    header: dict[str, Any] = {}
    if isinstance(obj, dict):
        raw = obj.get("traceEvents")
        if not isinstance(raw, list):
            if raw is None:
                raise TraceError(
                    "JSON object has no 'traceEvents' list: not a profiler trace", path
                )
            raise TraceError(f"'traceEvents' is {_json_type(raw)}, expected a list of events", path)
        header = {k: obj.get(k) for k in HEADER_KEYS}
    elif isinstance(obj, list):
        raw = obj
    else:
        raise TraceError(f"JSON holding {_json_type(obj)} is not a profiler trace", path)
    _convert_all(raw, sink)
    return header


def _tolerant(data: bytes, sink: Sink, path: Path, base: int) -> bool:
    """Generic decode of a chunk, then event by event; False when the cut was bad."""
    try:
        obj = _generic(data)
    except msgspec.DecodeError as err:
        _raise_if_inside(err, len(data), path, base)
        return False
    except RecursionError:
        raise TraceError("JSON nested too deeply", path) from None
    _convert_all(obj if isinstance(obj, list) else [obj], sink)
    return True


def _generic(data: bytes) -> Any:
    """Generic decode; text that is not valid UTF-8 is repaired (its events are skipped later)."""
    try:
        return _DECODE_ANY.decode(data)
    except (msgspec.DecodeError, *_BAD_TEXT) as err:
        if isinstance(err, msgspec.DecodeError) and not _is_text_error(err):
            raise
        return _DECODE_ANY.decode(_repair_text(data))


def _decode_any(data: bytes, path: Path, base: int) -> Any:
    try:
        return _generic(data)
    except msgspec.DecodeError as err:
        raise TraceError(_json_problem(err, base), path) from None
    except RecursionError:
        raise TraceError("JSON nested too deeply", path) from None


def _convert_all(items: list[Any], sink: Sink) -> None:
    events: list[Event] = []
    dropped = 0
    for item in items:
        ev = _convert_event(item)
        if ev is None:
            dropped += 1
        else:
            events.append(ev)
    sink(events, dropped)


def _convert_event(item: Any) -> Event | None:
    if not isinstance(item, dict):
        return None
    name = item.get("name")
    if isinstance(name, str) and "\ufffd" in name:
        return None  # the name was not valid UTF-8 text
    try:
        return _DECODE_EVENT.decode(_ENCODE.encode(item))
    except (msgspec.ValidationError, msgspec.EncodeError, TypeError, ValueError, RecursionError):
        pass
    # keep the event if only its args are broken: drop the args that do not fit
    args = item.get("args")
    clean: dict[str, Any] = {}
    if isinstance(args, dict):
        for key, value in args.items():
            try:
                one = {key: value}
                _DECODE_ARGS.decode(_ENCODE.encode(one))
            except (msgspec.ValidationError, msgspec.EncodeError, TypeError, ValueError,
                    RecursionError):  # fmt: skip
                continue
            clean[key] = value
    base = {k: item[k] for k in ("ph", "cat", "name", "pid", "tid", "ts", "dur") if k in item}
    base["args"] = clean
    try:
        return _DECODE_EVENT.decode(_ENCODE.encode(base))
    except (msgspec.ValidationError, msgspec.EncodeError, TypeError, ValueError, RecursionError):
        return None


def _json_type(v: Any) -> str:
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int | float):
        return "a number"
    if isinstance(v, str):
        return "a string"
    return "an object" if isinstance(v, dict) else "an array"


def _is_text_error(err: Exception) -> bool:
    msg = str(err).lower()
    return "utf" in msg or "surrogate" in msg or "unicode" in msg


def _repair_text(data: bytes) -> bytes:
    """Invalid UTF-8 bytes and lone surrogate escapes become U+FFFD."""
    text = data.decode("utf-8", "replace").encode("utf-8")
    return _SURROGATE_RE.sub(lambda m: m[0] if len(m[0]) == 12 else b"\\ufffd", text)


def _raise_if_inside(err: Exception, size: int, path: Path, base: int) -> None:
    """A chunk that fails well before its end is broken text, not a bad cut: report it."""
    m = _BYTE_RE.search(str(err))
    if m and int(m.group(1)) < size - 2:
        raise TraceError(_json_problem(err, base), path) from None


def _json_problem(err: Exception, base: int) -> str:
    msg = str(err)
    m = _BYTE_RE.search(msg)
    if "truncated" in msg.lower():
        return "truncated JSON (the file ends in the middle of the data)"
    where = f" near byte {base + int(m.group(1)):,}" if m else ""
    detail = msg.split(" (byte")[0].removeprefix("JSON is malformed: ")
    return f"not valid JSON{where} ({detail})"
