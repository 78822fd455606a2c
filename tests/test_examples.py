"""The examples/ scripts: every one runs on the CPU, every problem has a fixed twin and a row in
examples/README.md.

Each script runs with ``--steps 2`` in a process of its own, one per core at a time, and must
exit 0 (one still running after ``HANG_S`` is killed: a hang guard, not a speed check).
Importing torch, and dynamo (which an optimizer imports when it is built), is most of a small
script's cost: 128 s of CPU for the 48 scripts when each child imported dynamo itself, 36 s when
the parent does. So one subprocess imports both once and forks a child per script (``runpy``,
``__name__ == "__main__"``, the script's folder first on ``sys.path``); each child starts from
that clean state and logs to its own file. The scripts write nothing outside their own temporary
directories: safe under xdist.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import HANG_S

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
SCRIPTS = sorted(EXAMPLES.glob("*.py"))
PROBLEMS = [p for p in SCRIPTS if not p.stem.endswith("_fixed")]
ROW = re.compile(r"^\| `([a-z0-9_]+\.py)` \| `([a-z0-9-]+)` \|", re.M)

RUNNER = """
import os, runpy, signal, sys, time, traceback
import torch  # imported once; every forked child inherits it
import torch._dynamo  # what building an optimizer imports (torch._disable_dynamo)

jobs, timeout_s, logs = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
pending, running = list(sys.argv[4:]), {}

def start(path):
    pid = os.fork()
    if pid == 0:
        fd = os.open(os.path.join(logs, os.path.basename(path) + ".log"),
                     os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        rc = 0
        try:
            sys.argv = [path, "--steps", "2"]
            sys.path.insert(0, os.path.dirname(path))
            runpy.run_path(path, run_name="__main__")
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else int(e.code is not None)
        except BaseException:
            traceback.print_exc()
            rc = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    running[pid] = (path, time.monotonic())

while pending or running:
    while pending and len(running) < jobs:
        start(pending.pop(0))
    pid, status = os.waitpid(-1, os.WNOHANG)
    if pid == 0:
        for child, (path, t0) in list(running.items()):
            if time.monotonic() - t0 > timeout_s:
                os.kill(child, signal.SIGKILL)
        time.sleep(0.02)
        continue
    path, t0 = running.pop(pid)
    secs = time.monotonic() - t0
    rc = os.waitstatus_to_exitcode(status)
    print(os.path.basename(path), rc, f"{secs:.1f}", int(secs > timeout_s), flush=True)
"""


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_every_example_runs_on_cpu(tmp_path: Path) -> None:
    assert len(SCRIPTS) >= 38, [p.name for p in SCRIPTS]
    jobs = str(max(1, os.cpu_count() or 1))
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, jobs, str(HANG_S), str(tmp_path), *map(str, SCRIPTS)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_S * len(SCRIPTS),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = {
        name: (int(rc), float(secs), timed_out == "1")
        for name, rc, secs, timed_out in (line.split() for line in proc.stdout.splitlines())
    }
    assert sorted(results) == [p.name for p in SCRIPTS]
    failed = [
        f"{name}: rc={rc} after {secs:.1f} s{' (timed out)' if late else ''}\n"
        + (tmp_path / f"{name}.log").read_text()[-2000:]
        for name, (rc, secs, late) in sorted(results.items())
        if rc or late
    ]
    assert not failed, "\n\n".join(failed)


def test_every_problem_has_a_fixed_twin_and_a_readme_row() -> None:
    readme = (EXAMPLES / "README.md").read_text()
    rows = set(ROW.findall(readme))
    row_scripts = {script for script, _ in rows}
    assert len(PROBLEMS) >= 19
    for problem in PROBLEMS:
        assert (EXAMPLES / f"{problem.stem}_fixed.py").is_file(), f"{problem.name}: no _fixed twin"
        assert problem.name in row_scripts, f"{problem.name}: no row in examples/README.md"
    for fixed in (p for p in SCRIPTS if p.stem.endswith("_fixed")):
        assert (EXAMPLES / f"{fixed.stem[: -len('_fixed')]}.py").is_file(), fixed.name
    assert row_scripts <= {p.name for p in PROBLEMS}, row_scripts - {p.name for p in PROBLEMS}


def test_readme_rows_name_real_finding_ids_and_docstrings_agree() -> None:
    ids = {p.stem.replace("_", "-") for p in (REPO / "heuristics").glob("[!_]*.py")}
    readme = (EXAMPLES / "README.md").read_text()
    for script, finding in ROW.findall(readme):
        assert finding in ids, f"{script}: unknown finding id {finding}"
        doc = (EXAMPLES / script).read_text()
        assert finding in doc.split('"""')[1], f"{script}: docstring does not name {finding}"
        twin = script.replace(".py", "_fixed.py")
        assert twin in doc, f"{script}: docstring does not name its twin {twin}"
