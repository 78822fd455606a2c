"""Read a trace file and decode the fields the tables need.

Fast path: msgspec decodes straight into typed structs, keeping only the keys listed here (args
such as ``registers per thread`` are never materialized). If a field has an unexpected type
anywhere, the whole file falls back to a generic decode, and events are converted one by one:
those that cannot be used are skipped and counted instead of failing the load.
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path
from typing import Any

import msgspec

from advisor.errors import TraceError

DEFAULT_MAX_TRACE_BYTES = 8 * 1024**3  # decompressed-size guard (gzip bombs); generous
_GZIP_MAGIC = b"\x1f\x8b"


class Args(msgspec.Struct, omit_defaults=True):
    external_id: int | None = msgspec.field(name="External id", default=None)
    external_id_legacy: int | None = msgspec.field(name="external id", default=None)
    correlation: int | None = None
    device: int | None = None
    stream: int | str | None = None
    input_dims: Any = msgspec.field(name="Input Dims", default=None)
    input_dims_legacy: Any = msgspec.field(name="Input dims", default=None)
    input_type: Any = msgspec.field(name="Input type", default=None)
    nbytes: int | float | None = msgspec.field(name="bytes", default=None)
    kind: Any = None
    python_id: int | None = msgspec.field(name="Python id", default=None)
    python_parent_id: int | None = msgspec.field(name="Python parent id", default=None)
    call_stack: str | None = msgspec.field(name="Call stack", default=None)
    seq: int | None = msgspec.field(name="Sequence number", default=None)
    fwd_tid: int | None = msgspec.field(name="Fwd thread id", default=None)
    grid: Any = None
    block: Any = None
    name: Any = None  # metadata events: process/thread names
    mem_bytes: int | float | None = msgspec.field(name="Bytes", default=None)
    total_allocated: int | float | None = msgspec.field(name="Total Allocated", default=None)
    total_reserved: int | float | None = msgspec.field(name="Total Reserved", default=None)
    device_type: int | None = msgspec.field(name="Device Type", default=None)
    device_id: int | None = msgspec.field(name="Device Id", default=None)
    sync_kind: str | None = msgspec.field(name="cuda_sync_kind", default=None)
    wait_on_stream: int | None = None
    collective: str | None = msgspec.field(name="Collective name", default=None)
    in_msg_nelems: int | None = msgspec.field(name="In msg nelems", default=None)
    group_size: int | None = msgspec.field(name="Group size", default=None)
    dtype: str | None = msgspec.field(name="dtype", default=None)
    kernel_backend: str | None = None


class Event(msgspec.Struct, omit_defaults=True):
    ph: str = ""
    cat: str | None = None
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float | None = None
    dur: float | None = None
    args: Args | None = None


class TraceFile(msgspec.Struct):
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


_DECODE_FILE = msgspec.json.Decoder(TraceFile)
_DECODE_ARRAY = msgspec.json.Decoder(list[Event])
_DECODE_ANY = msgspec.json.Decoder()
_CONVERT_EVENT = msgspec.convert


class Decoded(msgspec.Struct):
    events: list[Event]
    header: dict[str, Any]
    skipped_events: int
    raw_bytes: int


def read_bytes(path: Path, max_bytes: int = DEFAULT_MAX_TRACE_BYTES) -> bytes:
    """The file's bytes, gunzipped when it is gzip. Raises TraceError with a one-line reason."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        raise TraceError("no such file", path) from None
    except IsADirectoryError:
        raise TraceError("is a directory, expected a trace file", path) from None
    except PermissionError:
        raise TraceError("permission denied", path) from None
    except OSError as err:
        raise TraceError(f"cannot read: {err.strerror or err}", path) from None
    if not data:
        raise TraceError("empty file", path)
    if data[:2] == _GZIP_MAGIC:
        data = _gunzip(data, path, max_bytes)
    elif len(data) > max_bytes:
        raise TraceError(f"larger than --max-trace-bytes ({max_bytes:,} bytes)", path)
    if not data.strip():
        raise TraceError("empty trace (no JSON content)", path)
    return data


def _gunzip(data: bytes, path: Path, max_bytes: int) -> bytes:
    d = zlib.decompressobj(wbits=31)
    chunks: list[bytes] = []
    total = 0
    pos = 0
    step = 1 << 24
    try:
        while pos < len(data):
            piece = d.decompress(data[pos : pos + step], max_bytes + 1 - total)
            pos += step
            chunks.append(piece)
            total += len(piece)
            if total > max_bytes:
                raise TraceError(
                    f"decompresses to more than --max-trace-bytes ({max_bytes:,} bytes)", path
                )
            while d.unconsumed_tail:
                piece = d.decompress(d.unconsumed_tail, max_bytes + 1 - total)
                chunks.append(piece)
                total += len(piece)
                if total > max_bytes:
                    raise TraceError(
                        f"decompresses to more than --max-trace-bytes ({max_bytes:,} bytes)", path
                    )
            if d.eof:
                break
    except zlib.error as err:
        raise TraceError(f"corrupt gzip data ({err})", path) from None
    if not d.eof:
        raise TraceError("truncated gzip file (stream ends early)", path)
    return b"".join(chunks)


def decode(path: str | os.PathLike[str], max_bytes: int = DEFAULT_MAX_TRACE_BYTES) -> Decoded:
    """Decode a Chrome/Kineto trace file into typed events plus its header keys."""
    p = Path(path)
    data = read_bytes(p, max_bytes)
    head = data.lstrip()[:1]
    if head not in (b"{", b"["):
        raise TraceError("not JSON (does not start with '{' or '[')", p)
    try:
        if head == b"[":
            return Decoded(_DECODE_ARRAY.decode(data), {}, 0, len(data))
        tf = _DECODE_FILE.decode(data)
    except msgspec.ValidationError:
        return _decode_tolerant(data, p)
    except msgspec.DecodeError as err:
        raise TraceError(_json_problem(err, len(data)), p) from None
    except RecursionError:
        raise TraceError("JSON nested too deeply", p) from None
    if tf.traceEvents is None:
        raise TraceError("JSON object has no 'traceEvents' list: not a profiler trace", p)
    header = {k: getattr(tf, k) for k in tf.__struct_fields__ if k != "traceEvents"}
    return Decoded(tf.traceEvents, header, 0, len(data))


def _json_problem(err: Exception, size: int) -> str:
    msg = str(err)
    if "truncated" in msg.lower():
        return f"truncated JSON (file ends early, {size:,} bytes read)"
    return f"not valid JSON ({msg})"


def _decode_tolerant(data: bytes, path: Path) -> Decoded:
    """Slow path: decode generically and keep the events that have usable fields."""
    try:
        obj = _DECODE_ANY.decode(data)
    except msgspec.DecodeError as err:
        raise TraceError(_json_problem(err, len(data)), path) from None
    except RecursionError:
        raise TraceError("JSON nested too deeply", path) from None
    header: dict[str, Any] = {}
    if isinstance(obj, dict):
        raw = obj.get("traceEvents")
        if not isinstance(raw, list):
            if raw is None:
                raise TraceError(
                    "JSON object has no 'traceEvents' list: not a profiler trace", path
                )
            raise TraceError(
                f"'traceEvents' is a {type(raw).__name__}, expected a list of events", path
            )
        for k in TraceFile.__struct_fields__:
            if k != "traceEvents":
                header[k] = obj.get(k)
    elif isinstance(obj, list):
        raw = obj
    else:
        raise TraceError(f"JSON {type(obj).__name__} is not a profiler trace", path)
    events: list[Event] = []
    skipped = 0
    for item in raw:
        ev = _convert_event(item)
        if ev is None:
            skipped += 1
        else:
            events.append(ev)
    if raw and not events:
        raise TraceError("no usable trace events: not a profiler trace", path)
    return Decoded(events, header, skipped, len(data))


def _convert_event(item: Any) -> Event | None:
    if not isinstance(item, dict):
        return None
    try:
        return _CONVERT_EVENT(item, Event)
    except (msgspec.ValidationError, TypeError, ValueError, RecursionError):
        pass
    # Keep the event if only its args are broken: drop args fields that do not fit.
    args = item.get("args")
    clean_args: dict[str, Any] = {}
    if isinstance(args, dict):
        for key, value in args.items():
            try:
                _CONVERT_EVENT({key: value}, Args)
            except (msgspec.ValidationError, TypeError, ValueError, RecursionError):
                continue
            clean_args[key] = value
    base = {k: item[k] for k in ("ph", "cat", "name", "pid", "tid", "ts", "dur") if k in item}
    base["args"] = clean_args
    try:
        return _CONVERT_EVENT(base, Event)
    except (msgspec.ValidationError, TypeError, ValueError, RecursionError):
        return None


def open_text_head(path: Path, n: int = 4096) -> bytes:
    """The first bytes of a (possibly gzipped) file, for cheap sniffing."""
    with open(path, "rb") as fh:
        head = fh.read(2)
    opener = gzip.open if head == _GZIP_MAGIC else open
    with opener(path, "rb") as fh:  # type: ignore[operator]
        return fh.read(n)  # type: ignore[no-any-return]
