"""``advisor analyze FOLDER`` killed from outside (SIGTERM, SIGKILL to the advisor's own pid,
not its group) leaves no worker process running: the workers die with it (they would hold the
caller's pipes, and a pipeline reading from the command would hang).

Before SIGKILL, a worker caught reading a trace (so past its set-up) is stopped (SIGSTOP): it
cannot end by finishing its traces or by reading a closed pipe, only through the kernel's death
signal, so the outcome does not depend on how busy the machine is. SIGTERM is the advisor's own
clean-up, which ends its workers itself, so they run on for it. The waits' limit (``HANG_S``) is a hang guard, never the thing measured."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import HANG_S, REPO, SAMPLES
from tests.procs import group, reading, wait_for

pytestmark = pytest.mark.slow


def _eof(fd: int, limit_s: float) -> bool:
    """Whether reading ``fd`` reaches its end (every writer gone) within ``limit_s``."""
    import select

    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready and not os.read(fd, 1 << 16):
            return True
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel's parent-death signal")
@pytest.mark.parametrize(
    ("engine", "sig"),
    [("pool", signal.SIGTERM), ("pool", signal.SIGKILL), ("dask", signal.SIGKILL)],
)
def test_killed_analyze_leaves_no_worker(tmp_path: Path, engine: str, sig: int) -> None:
    if engine == "dask":
        pytest.importorskip("distributed")
    folder = tmp_path / "in"
    folder.mkdir()
    n = 20 if engine == "dask" else 8  # more than 16 traces: the local Dask cluster
    for r in range(n):
        shutil.copyfile(SAMPLES / "resnet50_v100.kineto.json.gz", folder / f"trace.rank{r}.json.gz")
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "ADVISOR_NO_DASK": "1" if engine == "pool" else "",
    }
    cmd = [sys.executable, "-m", "advisor", "analyze", str(folder), "--out", str(tmp_path / "o")]
    proc = subprocess.Popen(
        [*cmd, "-j", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=REPO,
        start_new_session=True,
    )
    try:
        # the workers are running (the advisor, its fork server and workers: 3 or more)
        assert wait_for(lambda: len(group(proc.pid)) >= 3, HANG_S), "no workers started"
        if sig == signal.SIGKILL:
            # no clean-up runs. A worker caught reading a trace is stopped: it can no longer
            # finish its traces, notice a closed pipe or exit by itself, so only the kernel's
            # death signal can end it (however busy the machine, the outcome is the
            # mechanism's, not a race with the work)
            stopped: set[int] = set()

            def catch() -> bool:
                for pid in reading(proc.pid, folder) - stopped:
                    os.kill(pid, signal.SIGSTOP)
                    stopped.add(pid)
                return bool(stopped)

            assert wait_for(catch, HANG_S, step_s=0.01), "no worker seen reading a trace"
        os.kill(proc.pid, sig)  # the advisor alone, as `kill PID` or the OOM killer does
        proc.wait(timeout=HANG_S)
        # a pipeline reading from the command ends: nobody holds its stdout any more
        assert proc.stdout is not None
        assert _eof(proc.stdout.fileno(), HANG_S), "a process still holds the command's stdout"
        assert wait_for(lambda: not group(proc.pid), HANG_S), group(proc.pid)
    finally:
        for pid in group(proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if proc.poll() is None:
            proc.kill()
            proc.wait()
