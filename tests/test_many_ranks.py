"""A real folder of 32 rank traces through ``analyze`` and ``diff``, in subprocesses with a time
limit, so a hang fails instead of blocking the suite (issue 20 case 1: with
``ProcessPoolExecutor(max_tasks_per_child=8)`` a folder of 17+ traces hung forever at 0% CPU on
CPython 3.11, gh-115634). And the first Ctrl-C ends the run: exit 130, one "interrupted" line.

The ranks are built from a real shipped trace (``tests.mr_helpers.synth_ranks``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import HANG_S, REPO, SAMPLES
from tests.mr_helpers import synth_ranks
from tests.procs import group, reading, wait_for

pytestmark = pytest.mark.slow

N = 32
LIMIT_S = 300  # far above the ~30 s these take on 2 busy cores; a hang is unbounded


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ranks32") / "in"
    synth_ranks(SAMPLES / "sync_point.cpu.json.gz", out, N, straggler=5)
    return out


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), **extra}


def _advisor(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [sys.executable, "-m", "advisor", *args],
            capture_output=True,
            text=True,
            timeout=LIMIT_S,
            env=_env(**env),
            cwd=REPO,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"advisor {args[0]} on {N} traces did not finish in {LIMIT_S} s (hang)")


def test_analyze_32_traces_in_the_process_pool(folder: Path, tmp_path: Path) -> None:
    # ADVISOR_NO_DASK: the machine's own worker processes, the pool that used to hang
    p = _advisor(
        "analyze",
        str(folder),
        "--out",
        str(tmp_path / "out"),
        "--json",
        "-j",
        "2",
        ADVISOR_NO_DASK="1",
    )
    assert p.returncode == 0, p.stderr
    ranks = json.loads(p.stdout)["run"]["ranks"]
    assert [r["rank"] for r in ranks] == list(range(N))
    assert all("error" not in r for r in ranks)
    assert (tmp_path / "out" / "report.html").is_file()


def test_diff_32_traces(folder: Path) -> None:
    p = _advisor("diff", str(folder), str(folder), "--json", "-j", "2", ADVISOR_NO_DASK="1")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["a"]["traces"] == d["b"]["traces"] == N
    assert d["a"]["ranks"] == list(range(N)) and d["step_ms_median"]["delta_ms"] == 0


@pytest.mark.parametrize("engine", ["pool", "dask"])
def test_first_ctrl_c_ends_the_run(tmp_path: Path, engine: str) -> None:
    # 32 copies of the 30 MB GPU sample (~1.5 s each): still busy when Ctrl-C comes
    folder = tmp_path / "in"
    folder.mkdir()
    for r in range(N):
        shutil.copyfile(SAMPLES / "resnet50_v100.kineto.json.gz", folder / f"trace.rank{r}.json.gz")
    # the terminal sends SIGINT to the whole foreground process group: workers included
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "advisor",
            "analyze",
            str(folder),
            "--out",
            str(tmp_path / "out"),
            "-j",
            "2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(ADVISOR_NO_DASK="1" if engine == "pool" else ""),
        cwd=REPO,
        start_new_session=True,
    )
    try:
        # Ctrl-C once both workers are reading traces (started, analysing): 32 traces are far
        # from done by then, however fast or busy the machine
        deadline = time.monotonic() + HANG_S
        while len(reading(proc.pid, folder)) < 2 and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.01)
        assert proc.poll() is None, proc.communicate()
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=HANG_S)  # it ends promptly: never all 32 traces
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err
    lines = [ln for ln in err.splitlines() if ln.strip() and "Analyzing" not in ln]
    assert lines == ["advisor: interrupted"], err
    assert not (tmp_path / "out" / "report.html").exists()
    # the workers were killed: they go (HANG_S only guards a hang)
    assert wait_for(lambda: not group(proc.pid), HANG_S), "worker processes left behind"
