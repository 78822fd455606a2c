"""The decoding child process (advisor.trace.prefetch): same tables, same errors, safe fallbacks."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pandas as pd
import pytest

from advisor.cli import main
from advisor.errors import TraceError
from advisor.trace import load_trace, prefetch
from tests.tracebuilder import TraceBuilder

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_traces" / "misaligned_dims.cpu.json.gz"
SHARED = ROOT.parent / "shared" / "traces" / "hta" / "negative_queue_length_values_check"

needs_fork = pytest.mark.skipif(not prefetch.enabled(), reason="no fork here (or threads running)")


def _tables(trace: object) -> dict[str, pd.DataFrame]:
    return {k: v for k, v in vars(trace).items() if isinstance(v, pd.DataFrame)}


def _assert_same(a: object, b: object) -> None:
    ta, tb = _tables(a), _tables(b)
    assert ta.keys() == tb.keys() and ta
    for k in ta:
        pd.testing.assert_frame_equal(ta[k], tb[k], check_exact=True, obj=k)
    assert a.meta == b.meta  # type: ignore[attr-defined]


def _gpu_trace() -> bytes:
    b = TraceBuilder()
    b.step(1, 0, 100)
    op = b.op("aten::mm", 10, 30, dims=[[8, 16], [16, 8]], types=["float", "float"])
    b.launch(op, "cudaLaunchKernel", 12, 5, kernel="volta_sgemm_128x64_nn", gpu_ts=50, gpu_dur=20)
    return json.dumps(b.to_dict()).encode()


@needs_fork
@pytest.mark.parametrize("which", ["sample", "shared", "built"])
def test_child_decode_builds_the_same_tables(which: str, tmp_path: Path) -> None:
    if which == "sample":
        path = SAMPLE
    elif which == "shared":
        if not SHARED.is_dir():
            pytest.skip("../shared/traces not present")
        path = next(p for p in sorted(SHARED.iterdir()) if p.name.endswith((".json", ".json.gz")))
    else:
        path = tmp_path / "t.json.gz"
        path.write_bytes(gzip.compress(_gpu_trace()))
    pre = prefetch.start(path, 1 << 40)
    assert pre is not None
    _assert_same(load_trace(path, prefetch=pre), load_trace(path))


@needs_fork
def test_child_trace_error_is_raised_in_the_parent_with_the_same_line(tmp_path: Path) -> None:
    bad = tmp_path / "cut.json.gz"
    bad.write_bytes(gzip.compress(_gpu_trace())[:-12])  # truncated gzip stream
    with pytest.raises(TraceError) as direct:
        load_trace(bad)
    pre = prefetch.start(bad, 1 << 40)
    assert pre is not None
    with pytest.raises(TraceError) as via_child:
        load_trace(bad, prefetch=pre)
    assert str(via_child.value) == str(direct.value)
    assert str(bad) in str(via_child.value)


@needs_fork
def test_size_guard_applies_in_the_child(tmp_path: Path) -> None:
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(_gpu_trace()))
    pre = prefetch.start(p, 64)
    assert pre is not None
    with pytest.raises(TraceError, match="max-trace-bytes"):
        load_trace(p, 64, prefetch=pre)


@needs_fork
def test_a_child_that_dies_costs_only_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A child killed before it answers (OOM killer, a bug) leaves the parent to decode itself."""
    monkeypatch.setattr(prefetch, "_child", lambda *a: os._exit(9))
    pre = prefetch.start(SAMPLE, 1 << 40)
    assert pre is not None
    assert pre.result() is None
    pre = prefetch.start(SAMPLE, 1 << 40)
    _assert_same(load_trace(SAMPLE, prefetch=pre), load_trace(SAMPLE))


@needs_fork
def test_cancel_kills_and_reaps_the_child() -> None:
    pre = prefetch.start(SAMPLE, 1 << 40)
    assert pre is not None
    pre.cancel()
    with pytest.raises(ChildProcessError):
        os.waitpid(pre.pid, os.WNOHANG)  # already reaped: no zombie left behind
    assert pre.result() is None  # a cancelled prefetch never answers


def test_no_fork_when_disabled_or_threaded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADVISOR_NO_FORK", "1")
    assert prefetch.start(SAMPLE, 1 << 40) is None
    monkeypatch.delenv("ADVISOR_NO_FORK")
    monkeypatch.setattr(prefetch.threading, "active_count", lambda: 2)
    assert prefetch.start(SAMPLE, 1 << 40) is None


def test_no_child_for_a_missing_file(tmp_path: Path) -> None:
    assert prefetch.start(tmp_path / "nope.json", 1 << 40) is None


@needs_fork
def test_analyze_with_and_without_the_child_writes_the_same_findings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outs = []
    for fork in ("", "1"):
        monkeypatch.setenv("ADVISOR_NO_FORK", fork)
        out = tmp_path / f"out{fork or 0}"
        with pytest.raises(SystemExit) as ex:
            main(["analyze", str(SAMPLE), "--out", str(out)])
        assert ex.value.code == 0
        d = json.loads((out / "findings.json").read_text())
        d.pop("generated_at", None)
        d["run"].pop("generated_at", None)
        outs.append(d)
    assert outs[0] == outs[1]
