"""The streamed trace.annotated.json.gz equals the in-memory one, as one standard gzip member."""

from __future__ import annotations

import dataclasses
import gzip
import json
import zlib
from pathlib import Path

import pytest

from advisor.output import annotate_stream as stream
from advisor.output.annotate import annotate
from advisor.trace import load_trace, source
from tests.report_samples import gpu_builder, sample_report


def _report(path: Path):  # type: ignore[no-untyped-def]
    r = sample_report(load_trace(path))
    return dataclasses.replace(r, run=dataclasses.replace(r.run, trace=str(path)))


def _members(data: bytes) -> int:
    """How many gzip members the file holds (viewers expect one)."""
    n = 0
    while data:
        d = zlib.decompressobj(wbits=31)
        d.decompress(data)
        assert d.eof
        data = d.unused_data
        n += 1
    return n


@pytest.mark.parametrize("name", ["t.json.gz", "t.json"])
def test_streamed_copy_equals_the_in_memory_one(
    tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(source, "_PIECE_BYTES", 97)  # many pieces: patterns split across them
    src = gpu_builder().write(tmp_path / name)
    report = _report(src)
    job = stream.Prepared(src)
    out = tmp_path / "out" / "trace.annotated.json.gz"
    assert job.write(report, out)
    data = out.read_bytes()
    assert _members(data) == 1
    assert gzip.decompress(data) == gzip.decompress(annotate(src, report))
    assert out.stat().st_mode & 0o044  # readable by others, like the other outputs


def test_array_format_and_empty_events(tmp_path: Path) -> None:
    src = tmp_path / "arr.json"
    src.write_text(json.dumps(gpu_builder().to_dict()["traceEvents"]))
    report = _report(src)
    out = tmp_path / "a.json.gz"
    assert stream.Prepared(src).write(report, out)
    assert gzip.decompress(out.read_bytes()) == gzip.decompress(annotate(src, report))
    empty = tmp_path / "empty.json"
    empty.write_text('{"traceEvents": [ ], "displayTimeUnit": "ms"}')
    assert stream.Prepared(empty).write(report, out)
    assert json.loads(gzip.decompress(out.read_bytes()))["displayTimeUnit"] == "ms"


def test_traces_it_cannot_splice_fall_back(tmp_path: Path) -> None:
    src = gpu_builder().write(tmp_path / "t.json")
    report = _report(src)
    taken = tmp_path / "taken.json"
    taken.write_text(src.read_text().replace('"pid": 1000', '"pid": 2000000000', 1))
    out = tmp_path / "x.json.gz"
    assert not stream.Prepared(taken).write(report, out)
    assert not out.exists()
    odd = tmp_path / "odd.json"
    odd.write_text('{"deviceProperties": [], "other": 1}')
    assert not stream.Prepared(odd).write(report, out)


def test_analyze_writes_the_streamed_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from advisor.cli.app import main

    def no_fallback(*a: object, **k: object) -> bytes:
        raise AssertionError("analyze should stream the annotated copy")

    monkeypatch.setattr("advisor.output.annotate.annotate", no_fallback)
    src = gpu_builder().write(tmp_path / "trace.json.gz")
    with pytest.raises(SystemExit) as ei:
        main(["analyze", str(src), "--out", str(tmp_path / "out")])
    assert ei.value.code == 0
    data = (tmp_path / "out" / "trace.annotated.json.gz").read_bytes()
    assert _members(data) == 1
    assert len(load_trace(tmp_path / "out" / "trace.annotated.json.gz").kernels) == len(
        load_trace(src).kernels
    )
