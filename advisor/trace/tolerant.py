"""The slow, tolerant path: generic decoding, event by event conversion, one-line messages.

Used for a chunk (or a whole text) that the typed decoder refused: events with wrong-typed
fields are converted one by one and the unusable ones skipped and counted; text that is not
valid UTF-8 is repaired first (its events are then skipped). Also turns decoder errors into the
messages users see.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec

from advisor.errors import TraceError
from advisor.trace.structs import (
    _DECODE_ANY,
    _DECODE_ARGS,
    _DECODE_EVENT,
    _ENCODE,
    HEADER_KEYS,
    Event,
    Sink,
)

_BYTE_RE = re.compile(r"\(byte (\d+)\)")
_SURROGATE_RE = re.compile(
    rb"\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|\\u[dD][89a-fA-F][0-9a-fA-F]{2}"
)
_BAD_TEXT = (UnicodeDecodeError,)


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
            except (
                msgspec.ValidationError,
                msgspec.EncodeError,
                TypeError,
                ValueError,
                RecursionError,
            ):
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
