"""The whole test suite: lint, format check, type check, tests. ``python -m tests.run_all``.

Extra arguments go to pytest (e.g. ``python -m tests.run_all -k loader``).

Before pytest the package's bytecode is compiled once, as ``pip install`` leaves an installed
package: the suite starts many ``advisor`` processes, and where ``PYTHONDONTWRITEBYTECODE`` is
set each would otherwise compile every module it imports (0.3-0.6 s of CPU a process).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from benchmarks._measure import compile_checkout

REPO = Path(__file__).resolve().parent.parent
SOURCES = ["advisor", "heuristics", "tests", "benchmarks", "examples"]


def run(cmd: list[str]) -> int:
    print("+", " ".join(cmd), flush=True)
    return subprocess.call(cmd, cwd=REPO)


def main(argv: list[str]) -> int:
    py = sys.executable
    present = [s for s in SOURCES if (REPO / s).exists()]
    steps = [
        [py, "-m", "ruff", "check", *present],
        [py, "-m", "ruff", "format", "--check", *present],
        [py, "-m", "mypy"],
    ]
    failed = [" ".join(c[2:4]) for c in steps if run(c) != 0]
    print("+ compile the package's bytecode (benchmarks._measure.compile_checkout)", flush=True)
    if not compile_checkout():
        failed.append("compileall")
    workers = os.environ.get("PYTEST_WORKERS", "2")
    code = run([py, "-m", "pytest", "-n", workers, "--dist", "loadfile", *argv])
    if failed:
        print(f"FAILED checks: {', '.join(failed)}", flush=True)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
