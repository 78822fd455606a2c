"""docs/plugins.md's worked detector, run as the doc says: its code block saved as a file and
given to ``advisor analyze --detector`` (a real process), on a trace whose steps wait for fill
kernels; the finding is there and valued by the replay. Also ``--detector`` with a module name,
a missing file, and a file that fails to import."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import HANG_S, REPO
from tests.test_profile import _env
from tests.tracebuilder import TraceBuilder

DOC = REPO / "docs" / "plugins.md"


def doc_detector() -> str:
    """The first Python code block of docs/plugins.md: the worked detector."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert blocks, "docs/plugins.md lost its worked detector"
    return str(blocks[0])


def fill_trace(path: Path) -> Path:
    """Six 1 ms steps; each zero-fills a buffer (0.2 ms on the GPU), runs a matmul on it
    (0.3 ms) and waits for the GPU at its end, so the fills hold every step up."""
    b = TraceBuilder()
    for i in range(6):
        s = i * 1000.0
        b.step(i + 1, s, 1000)
        z = b.op("aten::zeros", s + 10, 20)
        b.launch(
            z,
            "cudaLaunchKernel",
            s + 12,
            5,
            kernel="void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>",
            gpu_ts=s + 20,
            gpu_dur=200,
        )
        mm = b.op("aten::mm", s + 40, 20)
        b.launch(
            mm, "cudaLaunchKernel", s + 42, 5, kernel="sm80_gemm_f32", gpu_ts=s + 220, gpu_dur=300
        )
        b.runtime("cudaStreamSynchronize", s + 60, 470)
    return b.write(path)


def analyze(tmp: Path, *args: str | Path) -> tuple[subprocess.CompletedProcess[str], Any]:
    out = tmp / "o"
    p = subprocess.run(
        [sys.executable, "-m", "advisor", "analyze", *map(str, args), "--out", str(out), "--force"],
        cwd=tmp,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    doc = json.loads((out / "findings.json").read_text()) if p.returncode == 0 else None
    return p, doc


def test_the_worked_detector_runs_and_is_replayed(tmp_path: Path) -> None:
    det = tmp_path / "fill_kernels.py"
    det.write_text(doc_detector())
    trace = fill_trace(tmp_path / "trace.json")
    p, doc = analyze(tmp_path, trace, "--detector", det)
    assert p.returncode == 0, p.stderr
    assert doc["errored"] == []
    (f,) = [f for f in doc["findings"] if f["id"] == "fill-kernels"]
    # the fills hold each step up for 0.2 ms: the replay gives that back
    assert 0.15 <= f["est_savings_ms"] <= 0.25, f
    assert f["assumptions"][0].startswith("Replayed:")
    assert f["evidence"][0]["count"] == 6 and "FillFunctor" in f["evidence"][0]["what"]
    assert "Fill kernels" in doc["views"]["detectors"]["fill-kernels"]["doc"]
    assert "fill_kernels.min_pct" in doc["thresholds"]
    # --only and --set know it like a built-in detector
    p, doc = analyze(
        tmp_path,
        trace,
        "--detector",
        det,
        "--only",
        "fill-kernels",
        "--set",
        "fill_kernels.min_pct=50",
    )
    assert p.returncode == 0, p.stderr
    assert doc["findings"] == [] and doc["skipped"] == []


def test_detector_by_module_name(tmp_path: Path) -> None:
    (tmp_path / "my_fill_check.py").write_text(doc_detector())
    trace = fill_trace(tmp_path / "trace.json")
    p, doc = analyze(tmp_path, trace, "--detector", "my_fill_check", "--only", "fill-kernels")
    assert p.returncode == 0, p.stderr
    assert [f["id"] for f in doc["findings"]] == ["fill-kernels"]


def test_a_missing_or_broken_detector_file(tmp_path: Path) -> None:
    trace = fill_trace(tmp_path / "trace.json")
    p, _ = analyze(tmp_path, trace, "--detector", "nowhere/check.py")
    assert p.returncode == 1 and p.stderr.count("\n") == 1, p.stderr
    assert "check.py: --detector: no such file" in p.stderr
    p, _ = analyze(tmp_path, trace, "--detector", "no_such_module_anywhere")
    assert p.returncode == 1 and "no such file or importable module" in p.stderr
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('half-written detector')\n")
    p, doc = analyze(tmp_path, trace, "--detector", broken)
    assert p.returncode == 0, p.stderr  # the analysis goes on; the error is reported
    (err,) = [e for e in doc["errored"] if "broken.py" in e["id"]]
    assert "RuntimeError: half-written detector" in err["error"]
