"""Wall time of the framework examples (``examples/frameworks/``) with 2 DataLoader workers:
``python SCRIPT`` against ``advisor profile SCRIPT`` (the default: stopped after the evaluation
window), for each framework installed.

    python benchmarks/frameworks_wall.py [--steps N] [--workers W]

Prints, per script: the plain run's wall time, the profiled run's wall time and its run until
the script was over (run.json ``duration_s``: before the analysis and the report), the
profiler's own windows and exports (run.json ``timings_s``: probe, windows, exports, call
sites), and what is left (``extra_s`` = run - plain - windows). The goal: ``extra_s`` within 3 s
(the DataLoader workers' shut-down once cost 5 s per worker per live loader). Run it on a quiet
machine: the figures are wall times.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = {
    "hf_trainer": ("transformers", "accelerate"),
    "lightning_train": ("lightning",),
    "accelerate_loop": ("accelerate",),
}


def _timed(cmd: list[str], cwd: str) -> float:
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", HF_HUB_OFFLINE="1")
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, check=True, timeout=1800)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    print(
        f"{'script':16} {'plain_s':>8} {'profiled_s':>10} {'run_s':>6} {'windows_s':>9} {'extra_s':>8}"
    )
    for name, mods in SCRIPTS.items():
        if not all(importlib.util.find_spec(m) for m in mods):
            print(f"{name:16} skipped: {' '.join(mods)} not installed")
            continue
        script = str(REPO / "examples" / "frameworks" / f"{name}.py")
        args = ["--steps", str(a.steps), "--workers", str(a.workers)]
        with tempfile.TemporaryDirectory() as tmp:
            plain = _timed([sys.executable, script, *args], tmp)
            out = Path(tmp) / "run"
            cmd = [sys.executable, "-m", "advisor", "profile", "--out", str(out), script, *args]
            prof = _timed(cmd, tmp)
            run = json.loads((out / "run.json").read_text())
            windows = sum(float(v) for v in (run.get("timings_s") or {}).values())
            ran = float(run.get("duration_s") or 0.0)
            extra = ran - plain - windows
            print(f"{name:16} {plain:8.1f} {prof:10.1f} {ran:6.1f} {windows:9.1f} {extra:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
