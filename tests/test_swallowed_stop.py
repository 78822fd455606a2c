"""Issue 20 case 8: a script whose loop catches ``BaseException`` cannot swallow SIGTERM or the
advisor's stop after the window. Real ``advisor profile`` runs and real signals: plain Python
dies of SIGTERM at once; under the advisor the run ends at the script's next step (or, when it
no longer steps, after the grace period) with its report written, exit code 143."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import HANG_S
from tests.test_profile import FAST, _cmd, _env, _write, advisor

pytestmark = pytest.mark.slow

STUBBORN = """
import time, torch
model = torch.nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
i = 0
while i < 1000:  # about 20 s
    try:
        i += 1
        if STEPPING or i < 10:
            model(torch.randn(8, 16)).sum().backward()
            opt.step()
            opt.zero_grad()
        if i == 6:
            print("READY", flush=True)
        time.sleep(0.02)
    except BaseException as e:
        print("SWALLOWED", type(e).__name__, flush=True)
print("FINISHED", flush=True)
"""


def _term_after_ready(tmp: Path, *args: str) -> tuple[int, str, str, float]:
    proc = subprocess.Popen(
        _cmd(*args), cwd=tmp, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip() == "READY":
                break
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=HANG_S)
        return proc.returncode, out, err, time.monotonic() - t0
    finally:
        proc.kill()


@pytest.mark.parametrize("stepping", [True, False], ids=["steps-on", "no-more-steps"])
def test_sigterm_is_not_swallowed(tmp_path: Path, stepping: bool) -> None:
    _write(tmp_path, "stubborn.py", STUBBORN, STEPPING=stepping)
    code, out, err, took = _term_after_ready(tmp_path, "--run-to-end", "--out", "o", "stubborn.py")
    assert code == 143, err
    assert "SWALLOWED Terminated" in out and "FINISHED" not in out
    # ended at the next step or after the grace period (3 s): long before the loop's ~20 s
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    assert run["end_reason"] == "sigterm" and run["exit_code"] == 143
    assert (tmp_path / "o" / "report.html").is_file()


def test_the_stop_after_the_window_is_not_swallowed(tmp_path: Path) -> None:
    _write(tmp_path, "stubborn.py", STUBBORN, STEPPING=True)
    p = advisor(tmp_path, *FAST, "--phases", "train", "--out", "o", "stubborn.py", timeout=HANG_S)
    assert p.returncode == 0, p.stderr
    assert "SWALLOWED WindowCaptured" in p.stdout and "FINISHED" not in p.stdout
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    assert run["end_reason"] == "window-captured" and run["window_steps"] == [3, 4]
    assert (tmp_path / "o" / "report.html").is_file()
