"""ISA-L and the standard library's zlib read and write the same bytes through advisor.trace.fastzlib."""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from advisor.errors import TraceError
from advisor.trace import fastzlib, source
from advisor.trace.source import pieces

IMPLS = ["isal", "stdlib"] if fastzlib._isal is not None else ["stdlib"]


@pytest.fixture(params=IMPLS)
def impl(request: pytest.FixtureRequest) -> Iterator[str]:
    fastzlib.use_stdlib(request.param == "stdlib")
    try:
        yield request.param
    finally:
        fastzlib.use_stdlib(False)


def _text() -> bytes:
    rnd = os.urandom(40_000).hex().encode()  # poorly compressible, so reads end mid-stream
    return b'{"traceEvents": [' + b",".join(b'{"n": "%d"}' % i for i in range(30_000)) + rnd + b"]}"


@pytest.mark.parametrize("read_bytes", [7, 1000, 1 << 16])
@pytest.mark.parametrize("piece_bytes", [1, 4096, 1 << 18])
def test_gunzip_in_small_reads_and_pieces(
    impl: str, read_bytes: int, piece_bytes: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(source, "_READ_BYTES", read_bytes)
    monkeypatch.setattr(source, "_PIECE_BYTES", piece_bytes)
    text = _text()[: 200_000 if piece_bytes == 1 else None]
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(text) + b"\0\0" + gzip.compress(b" "))  # two members, padding
    got = list(pieces(p, 1 << 40))
    assert b"".join(got) == text + b" "
    assert max(map(len, got)) <= piece_bytes


def test_truncated_and_corrupt_gzip(impl: str, tmp_path: Path) -> None:
    data = gzip.compress(_text())
    p = tmp_path / "t.json.gz"
    for cut in (len(data) - 4, len(data) // 2, 20):
        p.write_bytes(data[:cut])
        with pytest.raises(TraceError, match="truncated gzip"):
            b"".join(pieces(p, 1 << 40))
    p.write_bytes(data[:10] + b"\xff" * 64)
    with pytest.raises(TraceError, match="corrupt gzip"):
        b"".join(pieces(p, 1 << 40))


def test_size_guard(impl: str, tmp_path: Path) -> None:
    p = tmp_path / "bomb.json.gz"
    p.write_bytes(gzip.compress(b" " * 5_000_000))
    with pytest.raises(TraceError, match="max-trace-bytes"):
        b"".join(pieces(p, 1_000_000))


def test_copy_compressor_writes_standard_deflate(impl: str) -> None:
    text = _text()
    z = fastzlib.raw_deflate_obj()
    body = z.compress(text) + z.flush(zlib.Z_FINISH)
    assert zlib.decompress(body, -15) == text
    assert fastzlib.crc32(text[:1000], fastzlib.crc32(text[1000:2000])) != 0
    assert fastzlib.crc32(text) == zlib.crc32(text)
    assert fastzlib.crc32(text[5:], fastzlib.crc32(text[:5])) == zlib.crc32(text)


def test_annotated_copy_is_the_same_trace_with_either(impl: str, tmp_path: Path) -> None:
    from advisor.cli.app import main
    from advisor.trace import load_trace

    sample = Path(__file__).resolve().parent.parent / "sample_traces" / "cat_in_loop.cpu.json.gz"
    out = tmp_path / "out"
    os.environ["ADVISOR_NO_FORK"] = "1"
    try:
        with pytest.raises(SystemExit):
            main(["analyze", str(sample), "--out", str(out)])
    finally:
        del os.environ["ADVISOR_NO_FORK"]
    ann = out / "trace.annotated.json.gz"
    text = gzip.decompress(ann.read_bytes())  # the standard library reads it back
    assert b'"advisor_finding"' in text
    a, b = load_trace(ann), load_trace(sample)
    assert len(a.cpu_ops) == len(b.cpu_ops) and a.meta.event_count > b.meta.event_count
