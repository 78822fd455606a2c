"""Issue 31 item 3: small files that would cost gigabytes. Three gzip bombs are generated here
(as concatenated gzip members, so building them costs nothing) and given to a real
``advisor analyze`` process: each ends in a one-line error naming the file, exit code 1, no
output folder, within 10 s of CPU time and 500 MB of memory (the process and its decoding child,
each measured on its own)."""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

import pytest

from advisor.trace.source import (
    MIN_DEFAULT_MAX_TRACE_BYTES,
    PEAK_BYTES_PER_TEXT_BYTE,
    default_max_trace_bytes,
)
from benchmarks._measure import ADVISOR_CODE, run
from tests.test_profile import _env

MB = 1 << 20
EVENT = b'{"ph":"X","cat":"kernel","name":"a","ts":1,"dur":1,"pid":1,"tid":1}'


def _member(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=9, mtime=0)


def _bomb(path: Path, head: bytes, body: bytes, copies: int, tail: bytes) -> Path:
    """head + body * copies + tail, gzipped: body compressed once, its member repeated."""
    one = _member(body)
    with path.open("wb") as fh:
        fh.write(_member(head))
        for _ in range(copies):
            fh.write(one)
        fh.write(_member(tail))
    return path


def huge_name(tmp: Path) -> Path:
    """~1 MB of gzip: one event whose name is 1 GiB of 'A'."""
    return _bomb(
        tmp / "name.json.gz",
        b'{"traceEvents":[{"ph":"X","cat":"kernel","name":"',
        b"A" * MB,
        1024,
        b'","ts":1,"dur":1,"pid":1,"tid":1}]}',
    )


def huge_number(tmp: Path) -> Path:
    """~2 MB of gzip: one event whose ts is a number of 2 GiB digits."""
    return _bomb(
        tmp / "number.json.gz",
        b'{"traceEvents":[{"ph":"X","cat":"kernel","name":"a","ts":',
        b"1" * MB,
        2048,
        b',"dur":1,"pid":1,"tid":1}]}',
    )


def many_events(tmp: Path) -> Path:
    """~3.9 MB of gzip: 15 million identical events."""
    per = MB // (len(EVENT) + 1)
    copies = 15_000_000 // per
    return _bomb(
        tmp / "events.json.gz",
        b'{"traceEvents":[',
        (EVENT + b",") * per,
        copies,
        EVENT + b"]}",
    )


def huge_header(tmp: Path) -> Path:
    """~1 MB of gzip: a 1 GiB string in the header, before the events."""
    return _bomb(
        tmp / "header.json.gz",
        b'{"otherData":"',
        b"B" * MB,
        1024,
        b'","traceEvents":[' + EVENT + b"]}",
    )


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (huge_name, "a string longer than"),
        (huge_number, "a number longer than"),
        (many_events, "events in"),
        (huge_header, "no plain 'traceEvents' list"),
    ],
    ids=["1GiB-name", "2GiB-number", "15M-events", "1GiB-header"],
)
def test_a_bomb_is_a_clean_error_in_bounded_time_and_memory(
    tmp_path: Path, make: object, problem: str
) -> None:
    bomb = make(tmp_path)  # type: ignore[operator]
    assert bomb.stat().st_size < 4 * MB
    out = tmp_path / "o"
    # a fresh interpreter runs the command (its own peak RSS, VmHWM, and its decoding
    # child's: wait4 would count the pages of the process it was forked from); a CPU limit
    # ends a runaway instead of the test machine
    code = "import resource\nresource.setrlimit(resource.RLIMIT_CPU, (60, 60))\n" + ADVISOR_CODE
    s = run([sys.executable, "-c", code, "analyze", str(bomb), "--out", str(out)], env=_env())
    err = [ln for ln in s.output.splitlines() if ln.startswith("advisor:")]
    assert s.rc == 1, (s.rc, s.output)
    assert len(err) == 1 and err[0].startswith(f"advisor: error: {bomb}: "), s.output
    assert problem in err[0], err
    assert "Traceback" not in s.output
    assert not out.exists()
    assert s.cpu_s < 10, s
    assert max(s.peak_rss_bytes, s.child_rss_bytes) < 500 * MB, s
    # (no bound on wall time: on a loaded machine it says how busy the neighbours are; the CPU
    # time above is the bound)


def test_the_default_byte_limit_follows_available_memory() -> None:
    gib = 1 << 30
    assert default_max_trace_bytes(40 * gib) == 40 * gib // PEAK_BYTES_PER_TEXT_BYTE
    assert default_max_trace_bytes(100 * MB) == MIN_DEFAULT_MAX_TRACE_BYTES
