"""The benchmark scripts run (on a small synthetic trace) and start-up never imports torch.

No timings are asserted: the figures belong in docs/performance.md, measured on a quiet machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import HANG_S, REPO
from tests.tracebuilder import TraceBuilder

BENCH = REPO / "benchmarks"


def _small_trace(tmp_path: Path) -> Path:
    b = TraceBuilder()
    for s in range(4):
        b.step(s + 1, s * 1000, 1000)
        op = b.op("aten::mm", s * 1000 + 10, 300, dims=[[8, 16], [16, 8]], types=["float"] * 2)
        b.launch(
            op,
            "cudaLaunchKernel",
            s * 1000 + 20,
            5,
            kernel="volta_sgemm_128x64_nn",
            gpu_ts=s * 1000 + 400,
            gpu_dur=200,
        )
    return b.write(tmp_path / "small.json.gz")


def _run(args: list[str], timeout: int = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, timeout=timeout, cwd=REPO
    )


@pytest.mark.slow
def test_analyze_speed_script_runs(tmp_path: Path) -> None:
    trace = _small_trace(tmp_path)
    r = _run(
        [
            str(BENCH / "analyze_speed.py"),
            str(trace),
            "--repeat",
            "1",
            "--hta-python",
            str(tmp_path / "no-such-python"),
        ]
    )
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "skipping the HTA figure" in out
    assert "parse floor (gunzip + orjson.loads)" in out
    assert "advisor analyze (end to end)" in out and "x the floor" in out
    assert "advisor --help: torch not imported" in out
    assert "advisor analyze: torch not imported" in out


@pytest.mark.slow
def test_load_script_and_big_trace_builder(tmp_path: Path) -> None:
    trace = _small_trace(tmp_path)
    r = _run([str(BENCH / "load.py"), str(trace), "--repeat", "1"])
    assert r.returncode == 0, r.stderr
    assert "small.json.gz" in r.stdout and "targets" in r.stdout
    big = tmp_path / "big.json"
    r = _run(
        [str(BENCH / "make_big_trace.py"), str(big), "--source", str(trace), "--size-mb", "0.05"]
    )
    assert r.returncode == 0, r.stderr
    from advisor.trace import load_trace

    t, src = load_trace(big), load_trace(trace)
    copies = len(t.steps) // len(src.steps)
    assert copies >= 2 and len(t.steps) == copies * len(src.steps)
    assert len(t.kernels) == copies * len(src.kernels)
    assert (t.kernels["launch_idx"] >= 0).all()  # correlations stay paired in every copy
    assert t.steps["step"].is_unique


def test_help_and_analyze_never_import_torch_or_the_profile_runner(tmp_path: Path) -> None:
    """Nor what only ``advisor profile`` uses: its runner and its capture settings."""
    trace = _small_trace(tmp_path)
    code = (
        "import sys\n"
        "from advisor.cli.app import main\n"
        "for argv in (['--help'], ['analyze', sys.argv[1], '--out', sys.argv[2]]):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit as e:\n"
        "        assert e.code in (0, None), e.code\n"
        "names = ('torch', 'advisor.profile.run', 'advisor.profile.capture')\n"
        "print(sorted(m for m in names if m in sys.modules))\n"
    )
    r = _run(["-c", code, str(trace), str(tmp_path / "out")])
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[]"


def test_help_imports_no_pandas_or_numpy() -> None:
    """``advisor --help`` and every command's --help stay light: pandas and numpy are imported
    when a command runs (for analyze: after the decoding child is forked)."""
    code = (
        "import sys\n"
        "from advisor.cli.app import main\n"
        "for argv in (['--help'], ['analyze', '--help'], ['profile', '--help'], ['try', '--help'],\n"
        "             ['inspect', '--help'], ['diff', '--help'], ['report', '--help']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit as e:\n"
        "        assert e.code in (0, None), e.code\n"
        "print(sorted(m for m in ('pandas', 'numpy', 'torch') if m in sys.modules))\n"
    )
    r = _run(["-c", code])
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.slow
def test_many_ranks_script_runs() -> None:
    r = _run([str(BENCH / "many_ranks.py"), "--ranks", "4"], timeout=HANG_S)
    assert r.returncode == 0, r.stderr
    row = r.stdout.strip().splitlines()[-1].split()
    assert row[0] == "4" and row[6] == "4/4" and row[7] == "1"  # every rank read, straggler 4 // 3
