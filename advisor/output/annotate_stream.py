"""Write ``trace.annotated.json.gz`` without holding the trace in memory, mostly in the background.

The annotated copy is the trace's own text with the findings events spliced in right after the
``[`` of its events array (see :mod:`advisor.output.annotate`). The findings are only known at the
end, but they go near the start of the text, so the work splits in two raw deflate streams:

- the text after the splice point (nearly all of it) is gunzipped and recompressed piece by piece
  (:func:`advisor.output.tail.recompress`) in a background thread started as soon as the trace is
  loaded (:class:`AheadCopy`), while the detectors run (zlib releases the GIL, so this overlaps
  on a second core) -- memory holds one piece and the compressed output, never the text;
- at write time, the head (the text before the splice point + the findings events) is compressed
  and sync-flushed, and the two streams are joined into ONE standard gzip member: a deflate
  stream may continue with blocks from a fresh compressor after a sync flush, and the CRC-32 of
  the whole is combined from the two parts (``crc32_combine``, ported from zlib).

When the trace already holds a findings track, uses the findings pid, or has an unusual layout,
the job reports that and the caller falls back to :func:`advisor.output.annotate.annotate`.
"""

from __future__ import annotations

import os
import struct
import threading
import zlib
from pathlib import Path

from advisor.jsontext import compact
from advisor.output.annotate import GZIP_LEVEL, finding_events
from advisor.output.tail import AHEAD_MAX_BYTES, FINDINGS_PID, Tail, recompress
from advisor.report import Report
from advisor.trace.source import DEFAULT_MAX_TRACE_BYTES

__all__ = ["AHEAD_MAX_BYTES", "AheadCopy", "Prepared", "Tail", "crc32_combine", "recompress"]

_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # deflate, no name, no mtime, OS unknown


class Prepared:
    """The tail of one trace, recompressed in a background thread."""

    def __init__(self, path: Path, max_bytes: int = DEFAULT_MAX_TRACE_BYTES) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self._tail: Tail | None = None
        self._stop = False
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
        self._thread.join()
        return self._tail

    def write(self, report: Report, target: Path) -> bool:
        """Write the annotated copy to ``target`` (atomically); False when this path can't."""
        tail = self._wait()
        if tail is None:
            return False
        ours = b",".join(compact(e) for e in finding_events(report, FINDINGS_PID))
        head = tail.head + ours + (b"" if tail.empty else b",")
        z = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -15)
        head_deflate = z.compress(head) + z.flush(zlib.Z_SYNC_FLUSH)
        crc = crc32_combine(zlib.crc32(head), tail.crc, tail.length)
        size = (len(head) + tail.length) & 0xFFFFFFFF
        trailer = struct.pack("<II", crc, size)
        from advisor.output.outfiles import commit, temp_file

        fd, tmp = temp_file(target)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(_GZIP_HEADER)
                fh.write(head_deflate)
                for chunk in tail.chunks:
                    fh.write(chunk)
                fh.write(trailer)
                fh.flush()
                os.fsync(fh.fileno())
            commit(tmp, target)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        return True


# ---------------------------------------------------------------- started ahead


class AheadCopy:
    """The annotated copy of one analysis, recompressed while the detectors run: the command
    that writes the outputs makes one, :meth:`start` begins once the trace is loaded, and
    writing the outputs takes the job (:meth:`take`)."""

    def __init__(self) -> None:
        self._job: Prepared | None = None

    def start(self, path: Path, text_bytes: int, max_bytes: int = DEFAULT_MAX_TRACE_BYTES) -> None:
        """Start recompressing ``path`` (``text_bytes``: its decompressed size); traces over
        AHEAD_MAX_BYTES of text are streamed after the detectors instead."""
        if self._job is None and path.is_file() and text_bytes <= AHEAD_MAX_BYTES:
            self._job = Prepared(path, max_bytes)

    def take(self, path: Path) -> Prepared | None:
        """The job started for ``path``, now the caller's; None when none was (or another
        file's, which is cancelled)."""
        job, self._job = self._job, None
        if job is not None and Path(job.path).resolve() != Path(path).resolve():
            job.cancel()
            return None
        return job


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
