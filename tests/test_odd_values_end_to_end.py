"""Odd values in a trace or an option, each through a real ``advisor`` process (and the API):

- ``distributedInfo.rank`` (or ``world_size``) of 10^20: the analysis is written, the rank is
  treated as unknown and the trace-quality notes say so;
- ``--scheduler tcp://127.0.0.1:1`` (nothing listens): one line saying the connection was
  refused, at once (not after dask's 30 s connect timeout);
- control bytes (ESC, BEL, DEL, C1) and bidi overrides in trace strings never reach
  report.html; findings.json keeps the strings as they were.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

import advisor
from tests.conftest import HANG_S, SAMPLES
from tests.test_profile import _env
from tests.tracebuilder import TraceBuilder

HUGE = 10**20


def _trace(tmp: Path, name: str = "t.json", kernel: str = "k", **dist: int) -> Path:
    b = TraceBuilder()
    for i in range(3):
        s = i * 1000
        b.step(i + 1, s, 1000)
        op = b.op("aten::mm", s + 10, 50)
        b.launch(op, "cudaLaunchKernel", s + 20, 5, kernel=kernel, gpu_ts=s + 30, gpu_dur=400)
    if dist:
        b.header["distributedInfo"] = dist
    return b.write(tmp / name)


def _analyze(tmp: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "advisor", "analyze", *map(str, args)],
        cwd=tmp,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )


@pytest.mark.parametrize(
    "dist",
    [
        {"rank": HUGE, "world_size": 2},
        {"rank": -HUGE, "world_size": 2},
        {"rank": 0, "world_size": HUGE},
    ],
    ids=["rank", "negative-rank", "world-size"],
)
def test_a_huge_rank_is_ignored_and_said(tmp_path: Path, dist: dict[str, int]) -> None:
    trace = _trace(tmp_path, **dist)
    p = _analyze(tmp_path, trace, "--out", "o")
    assert p.returncode == 0, p.stderr
    doc = json.loads((tmp_path / "o" / "findings.json").read_text())
    notes = " ".join(q["what"] for q in doc["run"]["trace_quality"])
    assert "distributedInfo" in notes and str(HUGE) in notes, notes
    report = advisor.analyze(trace)  # the API: no TypeError
    assert json.loads(report.to_json())["run"]["rank"] in (0, None)


def test_a_refused_scheduler_fails_at_once(tmp_path: Path) -> None:
    for r in (0, 1):
        (tmp_path / f"t.rank{r}.json.gz").write_bytes(
            (SAMPLES / "sync_point.cpu.json.gz").read_bytes()
        )
    t0 = time.monotonic()
    p = _analyze(tmp_path, tmp_path, "--scheduler", "tcp://127.0.0.1:1", "--out", "o")
    took = time.monotonic() - t0
    assert p.returncode == 1
    assert p.stderr.count("\n") == 1 and "connection refused" in p.stderr.lower(), p.stderr
    assert took < 25  # generous (a loaded machine); dask alone waits 30 s


CONTROLS = "\x1b[31m\x07\x7f\x9b\u202e\x00"


def test_control_bytes_never_reach_the_report(tmp_path: Path) -> None:
    trace = _trace(tmp_path, kernel=f"void evil{CONTROLS}kernel()")
    p = _analyze(tmp_path, trace, "--out", "o")
    assert p.returncode == 0, p.stderr
    html = (tmp_path / "o" / "report.html").read_text(encoding="utf-8")
    assert "evil[31mkernel" in html  # the text around them stays
    for c in CONTROLS[0] + CONTROLS[5:]:
        assert c not in html, repr(c)
    doc = json.loads((tmp_path / "o" / "findings.json").read_text(encoding="utf-8"))
    assert f"void evil{CONTROLS}kernel()" in [k["name"] for k in doc["views"]["kernels"]]
