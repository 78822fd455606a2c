"""The text of a trace file, in pieces: plain JSON or gzip (streamed, bounded memory).

Raises :class:`~advisor.errors.TraceError` with a one-line reason for every fault: missing,
unreadable, empty, corrupt or truncated gzip, larger than ``--max-trace-bytes`` once
decompressed (the gzip bomb guard). The default limit is what this machine's available memory
can analyze (:func:`default_max_trace_bytes`); a :class:`Meter` tells the decoder how much of
the file was read, so it can bound the events by the file's size.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from advisor.errors import TraceError
from advisor.trace import fastzlib

PEAK_BYTES_PER_TEXT_BYTE = 5  # analysis peak memory per byte of decompressed JSON (~3.5)
MIN_DEFAULT_MAX_TRACE_BYTES = 256 * 1024**2  # what even a small machine is asked to read


def mem_available() -> int:
    """The memory this machine has available now (bytes; 4 GiB when it cannot be told)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 4 * 1024**3


def default_max_trace_bytes(available: int | None = None) -> int:
    """The default ``--max-trace-bytes``: the largest decompressed trace the available memory
    can analyze (``PEAK_BYTES_PER_TEXT_BYTE`` per byte), at least MIN_DEFAULT_MAX_TRACE_BYTES."""
    avail = mem_available() if available is None else available
    return max(MIN_DEFAULT_MAX_TRACE_BYTES, avail // PEAK_BYTES_PER_TEXT_BYTE)


DEFAULT_MAX_TRACE_BYTES = default_max_trace_bytes()  # decompressed-size guard (gzip bombs)
_READ_BYTES = 1 << 16  # compressed bytes read at a time (gzip traces inflate 10-20x)
_PIECE_BYTES = 1 << 18  # decompressed text produced at a time
_GZIP_MAGIC = b"\x1f\x8b"
# Memory bounded by what the trace holds: real gzip traces inflate 8-30x. Past SQUEEZE_RATIO
# (and SQUEEZE_AFTER bytes) the text is mostly padding, e.g. a gzip of whitespace; from then on
# runs of whitespace shrink to one space (insignificant between JSON tokens; inside a string,
# where only spaces may appear raw, a run of spaces gets shorter) and all-blank pieces go.
SQUEEZE_RATIO = 64
SQUEEZE_AFTER = 64 << 20
BLANK_RUN = re.compile(rb"[ \t\r\n]{32,}")  # whitespace squeezed to one space (decode too)


@dataclass
class Meter:
    """How much of the file :func:`pieces` has read so far (compressed bytes for gzip)."""

    file_bytes: int = 0


def pieces(path: Path, max_bytes: int, meter: Meter | None = None) -> Iterator[bytes]:
    """The file's text in pieces (gunzipped when gzip). Raises TraceError with a one-line reason.
    ``meter``: kept up to date with the bytes read from the file."""
    meter = meter if meter is not None else Meter()
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
            meter.file_bytes = len(first)
            if first[:2] == _GZIP_MAGIC:
                yield from _gunzip(fh, first, path, max_bytes, meter)
                return
            if os.fstat(fh.fileno()).st_size > max_bytes:
                raise TraceError(f"larger than --max-trace-bytes ({max_bytes:,} bytes)", path)
            while first:
                yield first
                first = fh.read(_PIECE_BYTES)
                meter.file_bytes += len(first)
        except OSError as err:
            raise TraceError(f"cannot read: {err.strerror or err}", path) from None


def _gunzip(fh: Any, data: bytes, path: Path, max_bytes: int, meter: Meter) -> Iterator[bytes]:
    """Decompress gzip members (concatenated members too), a bounded piece at a time."""
    d = fastzlib.gunzip_obj()
    total = 0
    taken = len(data)  # compressed bytes read
    squeeze = False
    blank_end = False  # the last piece given ended in whitespace
    try:
        while True:
            if data:
                out = d.decompress(data, _PIECE_BYTES)
                data = d.unconsumed_tail
            else:  # output still pending from input already taken (ISA-L holds some inside)
                out = d.decompress(b"", _PIECE_BYTES)
                if not out and not d.eof:
                    data = fh.read(_READ_BYTES)
                    taken += len(data)
                    meter.file_bytes = taken
                    if not data:
                        raise TraceError("truncated gzip file (stream ends early)", path)
                    continue
            total += len(out)
            if total > max_bytes:
                raise TraceError(
                    f"decompresses to more than --max-trace-bytes ({max_bytes:,} bytes)", path
                )
            if not squeeze and total > SQUEEZE_AFTER and total > SQUEEZE_RATIO * taken:
                squeeze = True
            if out and squeeze:
                out = BLANK_RUN.sub(b" ", out)
                if out.isspace():
                    out = b"" if blank_end else b" "
            if out:
                blank_end = out[-1:].isspace()
                yield out
            if d.eof:
                data = d.unused_data.lstrip(b"\0")
                while not data:  # padding after the member is fine; another member follows?
                    more = fh.read(_READ_BYTES)
                    taken += len(more)
                    meter.file_bytes = taken
                    if not more:
                        return
                    data = more.lstrip(b"\0")
                d = fastzlib.gunzip_obj()
    except fastzlib.ERRORS as err:
        raise TraceError(f"corrupt gzip data ({err})", path) from None


def read_bytes(path: Path, max_bytes: int = DEFAULT_MAX_TRACE_BYTES) -> bytes:
    """The whole text of a (possibly gzipped) trace. Raises TraceError with a one-line reason."""
    data = b"".join(pieces(Path(path), max_bytes))
    if not data.strip():
        raise TraceError("empty trace (no JSON content)", path)
    return data


# ------------------------------------------------------------------ JSON
