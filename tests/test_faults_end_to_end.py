"""Faults around a run, each with a real ``advisor`` process:

``--max-seconds`` out of range; ``sys.exit`` beyond a C long; a closed stdout or a reader that
leaves early (``| head``); hand-edited findings.json; ``os._exit``, SIGHUP, SIGQUIT and SIGSEGV
inside the script (the first three write the report, a crash leaves a run.json that says no
report could be written)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import HANG_S
from tests.test_profile import FAST, _cmd, _env, _write, advisor

REPO = Path(__file__).resolve().parent.parent
slow = pytest.mark.slow

ENDS = """
import os, signal, sys, time, torch
m = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for i in range(3):
    m(torch.randn(2, 4)).sum().backward()
    opt.step()
print("BEFORE", flush=True)
how = sys.argv[1]
if how == "os-exit":
    os._exit(7)
if how == "big-exit":
    sys.exit(2**70)
if how == "segv":
    import ctypes
    ctypes.string_at(0)
if how in ("sighup", "sigquit"):
    os.kill(os.getpid(), signal.SIGHUP if how == "sighup" else signal.SIGQUIT)
    time.sleep(600)  # the signal ends the script: it never gets past here
"""


def _one_line(p: subprocess.CompletedProcess[str], words: str) -> None:
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 1 and len(lines) == 1, (p.returncode, p.stderr)
    assert lines[0].startswith("advisor: error:") and words in lines[0], p.stderr


@pytest.mark.parametrize("value", ["nan", "inf", "1e300", "-1"])
def test_max_seconds_out_of_range(tmp_path: Path, value: str) -> None:
    _write(tmp_path, "s.py", "print('RAN')\n")
    p = advisor(tmp_path, "--max-seconds", value, "--out", "o", "s.py")
    _one_line(p, "--max-seconds must be 0 (no limit) up to")
    assert "RAN" not in p.stdout and not (tmp_path / "o").exists()


@slow
@pytest.mark.parametrize(
    "how,code,reason",
    [
        ("os-exit", 7, "os-exit"),
        ("big-exit", 255, "sys-exit"),
        ("sighup", 129, "sighup"),
        ("sigquit", 131, "sigquit"),
    ],
)
def test_script_endings_keep_their_report(tmp_path: Path, how: str, code: int, reason: str) -> None:
    _write(tmp_path, "ends.py", ENDS)
    # plain python: 7, 255, killed by SIGHUP (shells say 129), by SIGQUIT (131)
    p = advisor(tmp_path, "--run-to-end", *FAST, "--out", "o", "ends.py", how)
    assert p.returncode == code, p.stderr
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    assert run["end_reason"] == reason and run["exit_code"] == code
    assert (tmp_path / "o" / "report.html").is_file() and (
        tmp_path / "o" / "trace.json.gz"
    ).is_file()


@slow
def test_a_crash_leaves_a_run_json_that_says_so(tmp_path: Path) -> None:
    _write(tmp_path, "ends.py", ENDS)
    p = advisor(tmp_path, *FAST, "--run-to-end", "--out", "o", "ends.py", "segv")
    assert p.returncode == -11  # killed by SIGSEGV, as plain python
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    assert run["end_reason"] == "process-died" and "could be analyzed" in run["notes"][0]


@slow
def test_closed_stdout_and_early_reader_keep_the_exit_code(tmp_path: Path) -> None:
    _write(tmp_path, "s.py", "import torch\nprint('FIRST', flush=True)\n")
    cmd = " ".join(_cmd("--out", "a", "s.py"))
    p = subprocess.run(
        ["bash", "-c", f"{cmd} >&-"],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr and (tmp_path / "a" / "report.html").is_file()
    p = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {cmd.replace(' a ', ' b ')} | head -1"],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert p.returncode == 0 and p.stdout == "FIRST\n", p.stderr
    assert "Traceback" not in p.stderr and (tmp_path / "b" / "report.html").is_file()


TAMPER = {
    "findings-not-a-list": lambda d: d.__setitem__("findings", "x"),
    "finding-not-an-object": lambda d: d.__setitem__("findings", [1]),
    "run-steps-not-a-number": lambda d: d["run"].__setitem__("step_ms_median", "abc"),
    "views-steps-damaged": lambda d: d["views"].__setitem__("steps", [{"x": 1}]),
    "views-device-not-an-object": lambda d: d["views"].__setitem__("device", "x"),
}


def test_tampered_findings_json_names_the_file(tmp_path: Path) -> None:
    sample = REPO / "sample_traces" / "sync_point.cpu.json.gz"
    run = subprocess.run(
        [sys.executable, "-m", "advisor", "analyze", str(sample), "--out", "r"],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        timeout=HANG_S,
    )
    assert run.returncode == 0
    base = json.loads((tmp_path / "r" / "findings.json").read_text())
    for name, change in TAMPER.items():
        d = copy.deepcopy(base)
        change(d)
        (tmp_path / name).mkdir()
        (tmp_path / name / "findings.json").write_text(json.dumps(d))
        p = subprocess.run(
            [sys.executable, "-m", "advisor", "report", name],
            cwd=tmp_path,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=HANG_S,
        )
        _one_line(p, f"{name}/findings.json: damaged findings.json")


SITE_FULL_ON_ANNOTATED = """
import errno, os
_replace = os.replace
def replace(src, dst, *a, **k):
    if str(dst).endswith("trace.annotated.json.gz"):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return _replace(src, dst, *a, **k)
os.replace = replace
"""


def test_disk_full_while_analyze_writes_the_annotated_trace(tmp_path: Path) -> None:
    _write(tmp_path / "site", "sitecustomize.py", SITE_FULL_ON_ANNOTATED)
    env = {**_env(), "PYTHONPATH": f"{tmp_path / 'site'}:{REPO}"}
    sample = REPO / "sample_traces" / "sync_point.cpu.json.gz"
    p = subprocess.run(
        [sys.executable, "-m", "advisor", "analyze", str(sample), "--out", "o"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    _one_line(p, "No space left on device")
    assert not (tmp_path / "o").exists()  # a failed write removes what it had written


BIG = """
import torch
m = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(30)])
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for i in range(12):
    m(torch.randn(8, 64)).sum().backward()
    opt.step()
    opt.zero_grad()
"""


@slow
def test_disk_full_during_profile_leaves_no_temporary_file(tmp_path: Path) -> None:
    """A real full disk: a 1 MB tmpfs (needs root to mount; skipped otherwise)."""
    full = tmp_path / "full"
    full.mkdir()
    if (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(full)], capture_output=True
        ).returncode
        != 0
    ):
        pytest.skip("cannot mount a small tmpfs here (not root)")
    try:
        _write(tmp_path, "big.py", BIG)
        p = advisor(tmp_path, *FAST, "--active", "3", "--out", full / "o", "big.py")
        assert p.returncode == 0, p.stderr  # the script's own code
        assert "No space left on device" in p.stderr
        left = sorted(os.listdir(full / "o"))
        assert not [n for n in left if n.endswith(".tmp")], left
        assert (
            "run.json" not in left
            or json.loads((full / "o" / "run.json").read_text())["end_reason"] != "process-died"
        )
    finally:
        subprocess.run(["umount", str(full)], capture_output=True)
