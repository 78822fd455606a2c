"""The decoding child process (advisor.trace.prefetch): same tables, same errors, safe fallbacks."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pandas as pd
import pytest

from advisor.cli.app import main
from advisor.cli.entry import early_prefetch
from advisor.errors import TraceError
from advisor.trace import load_trace, prefetch
from tests.conftest import HANG_S
from tests.procs import running, wait_for
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
    got = pre.result()  # the child's own columns, not the in-process fallback
    assert got is not None
    pre = prefetch.start(path, 1 << 40)
    _assert_same(load_trace(path, prefetch=pre), load_trace(path))


@needs_fork
@pytest.mark.parametrize("spill_rows", [1, 300])
def test_columns_sent_in_many_pieces_build_the_same_tables(
    spill_rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from advisor.trace import columns, decode

    monkeypatch.setattr(columns, "SPILL_ROWS", spill_rows)  # every chunk, or a few together
    monkeypatch.setattr(decode, "CHUNK_BYTES", 1 << 14)  # many chunks
    path = SAMPLE
    pre = prefetch.start(path, 1 << 40)
    assert pre is not None
    got = pre.result()
    assert got is not None
    monkeypatch.undo()
    _assert_same(load_trace(path, prefetch=prefetch.start(path, 1 << 40)), load_trace(path))
    from advisor.trace.build import Decoded, build_trace

    cols, header, size = got
    _assert_same_tables_only(build_trace(Decoded(cols, header, size), str(path)), load_trace(path))


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
    monkeypatch.setattr(prefetch, "_decode", lambda *a: os._exit(9))
    pre = prefetch.start(SAMPLE, 1 << 40)
    assert pre is not None
    assert pre.result() is None
    pre = prefetch.start(SAMPLE, 1 << 40)
    _assert_same(load_trace(SAMPLE, prefetch=pre), load_trace(SAMPLE))


@needs_fork
def test_a_child_that_fails_says_so_under_debug(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from advisor.trace import decode

    def broken(*a: object, **k: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(decode, "decode_columns", broken)  # the child's copy only matters
    monkeypatch.setenv("ADVISOR_DEBUG", "1")
    pre = prefetch.start(SAMPLE, 1 << 40)
    assert pre is not None
    assert pre.result() is None
    assert "decoding child failed (RuntimeError: boom)" in capsys.readouterr().err


@needs_fork
def test_cancel_kills_and_reaps_the_children() -> None:
    pre = prefetch.start(SAMPLE, 1 << 40)
    assert pre is not None
    pids = [pre._decoder.pid]  # type: ignore[union-attr]
    pre.cancel()
    for pid in pids:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # already reaped: no zombie left behind
    assert pre.result() is None  # a cancelled prefetch never answers
    assert not prefetch._LIVE


@needs_fork
def test_the_child_is_collected_once_its_work_is_taken() -> None:
    pre = prefetch.start(SAMPLE, 1 << 40)
    assert pre is not None
    assert len(prefetch._LIVE) == 1
    (child,) = prefetch._LIVE
    load_trace(SAMPLE, prefetch=pre)
    assert not prefetch._LIVE  # the decoder is gone before the detectors run
    with pytest.raises(ChildProcessError):  # and collected (no zombie)
        os.waitpid(child.pid, os.WNOHANG)


@needs_fork
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
        outs.append((d, (out / "trace.annotated.json.gz").read_bytes()))
    assert outs[0][0] == outs[1][0]
    assert outs[0][1] == outs[1][1]  # the same annotated copy, gzip bytes and all


# ---------------------------------------------------------------- the console entry's early start


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["analyze", "T"], "T"),
        (["analyze", "--out", "o", "T", "--force"], "T"),
        (["inspect", "--top", "3", "T"], "T"),
        (["analyze", "T", "U"], None),  # two files: no guess
        (["analyze", "DIR"], None),  # folders: the command finds the traces
        (["analyze", "missing-file"], None),
        (["profile", "T"], None),
        (["report", "T"], None),
        (["analyze"], None),
    ],
)
@needs_fork
def test_start_early_guesses_the_one_existing_file(
    args: list[str], expected: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "T").write_bytes(SAMPLE.read_bytes())
    (tmp_path / "U").write_bytes(b"{}")
    (tmp_path / "DIR").mkdir()
    monkeypatch.chdir(tmp_path)
    early = early_prefetch(args, 1 << 40)
    try:
        assert (early.path.name if early is not None else None) == expected
    finally:
        if early is not None:
            early.cancel()


@needs_fork
def test_take_over_keeps_only_a_matching_early_child(tmp_path: Path) -> None:
    other = tmp_path / "copy.json.gz"
    other.write_bytes(SAMPLE.read_bytes())
    early = prefetch.start_early([str(SAMPLE)], 1 << 40)
    assert early is not None
    assert prefetch.take_over(early, SAMPLE, 1 << 40) is early  # not a second decode
    early.cancel()
    early = prefetch.start_early([str(SAMPLE)], 1 << 40)
    assert early is not None
    other_settings = prefetch.take_over(early, SAMPLE, 99)  # other settings: a new child
    assert other_settings is not None and other_settings is not early
    assert early._decoder is None
    other_settings.cancel()
    early = prefetch.start_early([str(SAMPLE)], 1 << 40)
    fresh = prefetch.take_over(early, other, 1 << 40)  # another file: a new child
    assert fresh is not None and fresh is not early and fresh.path == other
    assert early is not None and early._decoder is None and len(prefetch._LIVE) == 1
    _assert_same_tables_only(load_trace(other, prefetch=fresh), load_trace(SAMPLE))
    assert prefetch.take_over(None, SAMPLE, 1 << 40) is not None  # none started early
    prefetch.cancel_all()


@needs_fork
def test_the_console_entry_runs_analyze_with_an_early_child(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = tmp_path / "out"
    r = subprocess.run(
        [sys.executable, "-m", "advisor", "analyze", str(SAMPLE), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert r.returncode == 0, r.stderr
    assert (out / "findings.json").is_file() and (out / "trace.annotated.json.gz").is_file()
    ann = load_trace(out / "trace.annotated.json.gz")
    _assert_same_tables_only(ann, load_trace(SAMPLE))


def _assert_same_tables_only(a: object, b: object) -> None:
    ta, tb = _tables(a), _tables(b)
    for k in ta:
        pd.testing.assert_frame_equal(ta[k], tb[k], check_exact=True, obj=k)


@needs_fork
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc")
def test_children_die_with_a_killed_parent(tmp_path: Path) -> None:
    """SIGKILL leaves no atexit to run: the kernel ends the children (PR_SET_PDEATHSIG)."""
    import signal
    import subprocess
    import sys

    code = (
        "import sys, time\n"
        "from advisor.trace import prefetch\n"
        "prefetch._decode = lambda *a: time.sleep(10**6)\n"  # a decoder that never ends alone
        f"pre = prefetch.start(__import__('pathlib').Path({str(SAMPLE)!r}), 1 << 40)\n"
        "print(pre._decoder.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    pids = [int(x) for x in p.stdout.readline().split()]
    assert len(pids) == 1
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=HANG_S)

    assert wait_for(lambda: not any(map(running, pids)), HANG_S, step_s=0.05)


@needs_fork
@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="reads /proc")
def test_ctrl_c_while_the_child_decodes(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to the whole process group): exit 130, one line, no output, no child left."""
    import contextlib
    import signal
    import subprocess
    import sys

    code = (
        "import sys, time\n"
        "from advisor.trace import prefetch\n"
        "def slow(*a):\n"  # a decoder that ends only with its parent, however slow the imports
        "    time.sleep(10**6)\n"
        "prefetch._decode = slow\n"
        "result = prefetch.Prefetch.result\n"
        "def waiting(self):\n"  # the parent says when it waits for the columns
        "    print('WAITING', flush=True)\n"
        "    return result(self)\n"
        "prefetch.Prefetch.result = waiting\n"
        "sys.argv = ['advisor'] + sys.argv[1:]\n"
        "from advisor.cli.entry import main\n"
        "main()\n"
    )
    out = tmp_path / "out"
    p = subprocess.Popen(
        [sys.executable, "-c", code, "analyze", str(SAMPLE), "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )

    def children() -> list[int]:
        with contextlib.suppress(OSError):
            return [
                int(k) for k in Path(f"/proc/{p.pid}/task/{p.pid}/children").read_text().split()
            ]
        return []

    wait_for(children, HANG_S, step_s=0.05)  # the decoder, once forked
    kids = children()
    assert p.stdout is not None
    assert p.stdout.readline().strip() == "WAITING"  # (imports done, however busy the machine)
    os.killpg(p.pid, signal.SIGINT)
    _, err = p.communicate(timeout=HANG_S)
    assert p.returncode == 130
    assert err.strip().splitlines() == ["advisor: interrupted"]
    assert not out.exists()
    assert wait_for(lambda: not any(map(running, kids)), HANG_S, step_s=0.05)
