"""Bad traces: one line on stderr naming the file and the problem, exit 1, no traceback, no output.

Every command that reads traces (analyze, inspect) goes through ``advisor.cli.app.main`` here, in
process; one test runs the real console entry in a subprocess to prove the same from outside.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from advisor.cli.app import main
from advisor.errors import TraceError
from advisor.trace import load_trace
from tests.conftest import HANG_S
from tests.tracebuilder import TraceBuilder


def _good() -> bytes:
    b = TraceBuilder()
    b.step(1, 0, 100)
    op = b.op("aten::mm", 10, 30, dims=[[8, 16], [16, 8]], types=["float", "float"])
    b.launch(op, "cudaLaunchKernel", 12, 5, kernel="volta_sgemm_128x64_nn", gpu_ts=50, gpu_dur=20)
    return json.dumps(b.to_dict()).encode()


def _write(name: str, data: bytes) -> Callable[[Path], Path]:
    def make(d: Path) -> Path:
        p = d / name
        p.write_bytes(data)
        return p

    return make


def _dir_without_traces(d: Path) -> Path:
    p = d / "runs"
    p.mkdir()
    (p / "notes.txt").write_text("no traces here")
    return p


_GOOD = _good()
# (case id, maker, words the one-line message must contain)
CASES: list[tuple[str, Callable[[Path], Path], str]] = [
    ("missing file", lambda d: d / "nope.json", "no such file"),
    ("directory with no traces", _dir_without_traces, "no trace files"),
    ("empty file", _write("empty.json", b""), "empty file"),
    ("whitespace only", _write("blank.json", b"  \n\t "), "empty trace"),
    ("binary garbage", _write("garbage.json", bytes(range(256)) * 8), "not JSON"),
    ("not JSON", _write("hello.json", b"hello world"), "not JSON"),
    ("truncated JSON", _write("cut.json", _GOOD[: len(_GOOD) // 2]), "truncated JSON"),
    ("malformed JSON", _write("bad.json", _GOOD.replace(b'"ph"', b"'ph'", 1)), "not valid JSON"),
    ("corrupt gzip", _write("c.json.gz", gzip.compress(_GOOD)[:10] + b"\xff" * 64), "gzip"),
    ("truncated gzip", _write("t.json.gz", gzip.compress(_GOOD)[:-30]), "truncated gzip"),
    ("list of numbers", _write("nums.json", b"[1, 2, 3]"), "not a profiler trace"),
    ("object without events", _write("obj.json", b'{"foo": 1}'), "no 'traceEvents'"),
    ("traceEvents a number", _write("num.json", b'{"traceEvents": 5}'), "expected a list"),
    ("traceEvents an object", _write("o.json", b'{"traceEvents": {"a": 1}}'), "expected a list"),
    ("no events", _write("none.json", b'{"traceEvents": []}'), "no events"),
    ("a bare string", _write("s.json", b'"trace"'), "not a profiler trace"),
    ("a bare number", _write("n.json", b"42"), "not a profiler trace"),
    ("absurd nesting", _write("deep.json", b"[" * 200_000 + b"]" * 200_000), "nested too deeply"),
    (
        "absurd nesting in args",
        _write(
            "deep2.json",
            b'{"traceEvents": [{"ph": "X", "args": {"x": '
            + b"[" * 200_000
            + b"]" * 200_000
            + b"}}]}",
        ),
        "nested too deeply",
    ),
    (
        "NaN literal",
        _write("nan.json", _GOOD.replace(b'"dur": 30', b'"dur": NaN', 1)),
        "not valid JSON",
    ),
]


@pytest.mark.parametrize("command", ["analyze", "inspect", "diff"])
@pytest.mark.parametrize(("case", "make", "words"), CASES, ids=[c[0] for c in CASES])
def test_bad_trace_is_one_line_exit_1_and_no_output(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    command: str,
    case: str,
    make: Callable[[Path], Path],
    words: str,
) -> None:
    path = make(tmp_path)
    out = tmp_path / "out"
    argv = [command, str(path)] + (["--out", str(out)] if command == "analyze" else [])
    if command == "diff":  # the bad trace as A, a good one as B
        good = tmp_path / "good" / "good.json"
        good.parent.mkdir()
        good.write_bytes(_GOOD)
        argv = [command, str(path), str(good), "--jobs", "1"]
    with pytest.raises(SystemExit) as ei:
        main(argv)
    err = capsys.readouterr().err
    assert ei.value.code == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert str(path) in lines[0] and words in lines[0], lines[0]
    assert "Traceback" not in err
    assert not out.exists(), "a failed analyze must not leave an output folder"


def test_gzip_bomb_guard(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    events = b'{"traceEvents": [' + b" " * (8 << 20) + b"]}"
    p = tmp_path / "bomb.json.gz"
    p.write_bytes(gzip.compress(events))
    plain = tmp_path / "big.json"
    plain.write_bytes(events)
    for f in (p, plain):
        with pytest.raises(SystemExit) as ei:
            main(["analyze", str(f), "--max-trace-bytes", "1000000", "--out", str(tmp_path / "o")])
        err = capsys.readouterr().err
        assert ei.value.code == 1 and "--max-trace-bytes" in err and str(f) in err
    assert not (tmp_path / "o").exists()


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "secret.json"
    p.write_bytes(_GOOD)
    if os.geteuid() != 0:  # root reads anything: simulate the refusal instead
        p.chmod(0)
    else:
        real_open = open

        def deny(file, *a, **k):  # type: ignore[no-untyped-def]
            if str(file) == str(p):
                raise PermissionError(13, "Permission denied", str(file))
            return real_open(file, *a, **k)

        monkeypatch.setattr("builtins.open", deny)
    with pytest.raises(TraceError, match="permission denied") as ei:
        load_trace(p)
    assert str(p) in str(ei.value)


def test_existing_output_refused_before_loading(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"hello")
    with pytest.raises(SystemExit) as ei:
        main(["analyze", str(bad), "--out", str(out)])
    assert ei.value.code == 1
    assert "not empty" in capsys.readouterr().err  # refused before the trace was even read
    assert [p.name for p in out.iterdir()] == ["mine.txt"]


def test_failed_write_leaves_nothing_behind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    good = tmp_path / "good.json"
    good.write_bytes(_GOOD)
    out = tmp_path / "out"

    def disk_full(report, target, *a, **k):  # type: ignore[no-untyped-def]
        (target / "findings.json").write_text("{")  # half of the output, then the disk fills
        raise OSError(28, "No space left on device", str(target / "report.html"))

    monkeypatch.setattr("advisor.analysis.pipeline.write_outputs", disk_full)
    with pytest.raises(SystemExit) as ei:
        main(["analyze", str(good), "--out", str(out)])
    err = capsys.readouterr().err
    assert ei.value.code == 1 and "No space left on device" in err and "Traceback" not in err
    assert not out.exists()


def test_skipped_events_are_counted_in_findings(tmp_path: Path) -> None:
    d = json.loads(_GOOD)
    d["traceEvents"] += [
        {"ph": "X", "cat": "cpu_op", "name": "neg", "pid": 1, "tid": 1, "ts": 5, "dur": -3},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": "soon", "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": "huge", "pid": 1, "tid": 1, "ts": 1e300, "dur": 1},
        {"ph": "X", "name": "no category", "pid": 1, "tid": 1, "ts": 5, "dur": 1},
        {"ph": "X", "cat": "brand_new", "name": "m", "pid": 0, "tid": 7, "ts": 5, "dur": 1},
        "not an event",
    ]
    raw = json.dumps(d).encode().replace(b'"name": "neg"', b'"name": "bad \xff\xfe name"')
    p = tmp_path / "mixed.json"
    p.write_bytes(raw + b"\n")
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as ei:
        main(["analyze", str(p), "--out", str(out)])
    assert ei.value.code == 0
    run = json.loads((out / "findings.json").read_text())["run"]
    assert run["events_skipped"] == 5
    t = load_trace(p)
    assert t.meta.unknown_categories == {"brand_new": 1}
    assert len(t.cpu_ops) == 1 and len(t.kernels) == 1


def test_console_entry_in_a_subprocess(tmp_path: Path) -> None:
    p = tmp_path / "cut.json.gz"
    p.write_bytes(gzip.compress(_GOOD)[:-30])
    r = subprocess.run(
        [sys.executable, "-m", "advisor", "analyze", str(p), "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert r.returncode == 1
    assert r.stderr.strip() == f"advisor: error: {p}: truncated gzip file (stream ends early)"
    assert r.stdout == ""
    assert not (tmp_path / "o").exists()


REPORT_CASES: list[tuple[str, Callable[[Path], Path], str]] = [
    ("missing run folder", lambda d: d / "nope", "no findings.json here"),
    ("corrupt findings.json", _write("findings.json", b"{bad"), "not valid JSON"),
    ("empty findings.json", _write("findings.json", b""), "not valid JSON"),
    ("a list, not findings", _write("findings.json", b"[1, 2]"), "not a torch-advisor"),
    (
        "findings without a body",
        _write("findings.json", b'{"schema_version": 1}'),
        "not a torch-advisor",
    ),
]


@pytest.mark.parametrize(("case", "make", "words"), REPORT_CASES, ids=[c[0] for c in REPORT_CASES])
def test_report_command_bad_input_is_one_line_and_writes_nothing(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    case: str,
    make: Callable[[Path], Path],
    words: str,
) -> None:
    path = make(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(SystemExit) as ei:
        main(["report", str(path)])
    err = capsys.readouterr().err
    assert ei.value.code == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no report.html left behind
