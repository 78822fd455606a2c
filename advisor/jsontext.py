"""JSON text: the one module that turns values into JSON bytes.

Records become JSON-shaped values in :mod:`advisor.record` (``record.dump``); this module writes
those values (and any other JSON-shaped value) as text, in one of three layouts. No other module
calls ``json.dumps``, ``orjson.dumps`` or msgspec's encoder (``tests/test_json_writer.py``);
findings.json is read back in one place too, :func:`advisor.report.read`.

- :func:`document`: a file people read and diff (findings.json, try.json, ``advisor diff
  --json``, ``advisor inspect --json``): sorted keys, two-space indent, UTF-8, numpy scalars and
  arrays as their values, a final newline.
- :func:`ascii_document`: run.json, the same layout by the standard library, as every run.json
  so far: non-ASCII characters escaped, a NaN or an infinity written as ``null`` (strict JSON),
  a value JSON has no type for written as its ``str()`` (what the run captured stays readable).
- :func:`compact`: one line without spaces, for trace events (the annotated trace, a trace
  rewritten with its call sites) and values handed to a child process; a value orjson refuses
  (a NaN it cannot place, an integer beyond 64 bits) is written by the standard library.
"""

from __future__ import annotations

import json
import math
from typing import Any

import orjson


def document(value: Any) -> bytes:
    """``value`` as an indented JSON document with sorted keys and a final newline."""
    return (
        orjson.dumps(
            value, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY
        )
        + b"\n"
    )


def ascii_document(value: Any) -> bytes:
    """``value`` as an indented JSON document with sorted keys, ASCII only (see the module doc)."""
    text = json.dumps(_finite(value), indent=2, sort_keys=True, default=str, allow_nan=False)
    return (text + "\n").encode("utf-8")


def compact(value: Any) -> bytes:
    """``value`` as JSON on one line, without spaces."""
    try:
        return orjson.dumps(value)
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(value, separators=(",", ":")).encode()


def _finite(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {str(k): _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v
