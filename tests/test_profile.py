"""End-to-end tests of ``advisor profile``: real torch on the CPU, each run in a subprocess.

The scripts are tiny (a few steps of a small model) so the file stays well under 90 s on two
cores; runs that several tests look at are shared through module-scoped fixtures.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import HANG_S, steps_marked

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow

FAST = ["--wait", "1", "--warmup", "1", "--active", "2"]

TRAIN = """
import os, sys
import torch, torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from helper import VALUE  # a sibling module: sys.path[0] is the script's folder

print("ARGV", sys.argv[1:], __name__, os.path.basename(sys.path[0]), os.path.isabs(__file__))
print("HELPER", VALUE)
torch.backends.cudnn.benchmark = True

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)  # bias on, then BatchNorm
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).flatten(1))

def main():
    model = Net()
    data = TensorDataset(torch.randn(64, 3, 8, 8), torch.randint(0, 10, (64,)))
    loader = DataLoader(data, batch_size=8, num_workers=NUM_WORKERS, shuffle=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
    model.eval()
    model(torch.randn(2, 3, 8, 8))  # inference with autograd on: recorded in run.json
    model.train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(torch.randn(2, 3, 8, 8))
    for epoch in range(100):
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=False)
            loss.backward()
            torch.cuda.empty_cache()  # a no-op without CUDA; recorded in run.json
            try:
                opt.step()
            except Exception:
                print("SWALLOWED")
    print("FINISHED")

if __name__ == "__main__":
    main()
"""

LOOP = """
import sys, time
import torch, torch.nn as nn
model = nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(STEPS):
    loss = model(torch.randn(8, 16)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if i == READY_AT:
        print("READY", flush=True)
    time.sleep(SLEEP)
print("FINISHED", flush=True)
EXIT
"""


def _line(text: str, needle: str) -> int:
    """1-based line of ``needle`` in the file ``_write`` makes from ``text``."""
    lines = textwrap.dedent(text).splitlines()
    return next(i for i, ln in enumerate(lines, 1) if needle in ln)


def _write(folder: Path, name: str, text: str, **subs: Any) -> Path:
    text = textwrap.dedent(text)
    for k, v in subs.items():
        text = text.replace(k, str(v))
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _loop(
    folder: Path,
    name: str = "loop.py",
    steps: int = 12,
    ready_at: int = -1,
    sleep: float = 0.0,
    exit: str = "",
) -> Path:
    return _write(folder, name, LOOP, STEPS=steps, READY_AT=ready_at, SLEEP=sleep, EXIT=exit)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", NO_COLOR="1", PYTHONUNBUFFERED="1")
    return env


def _cmd(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "advisor", "profile", *map(str, args)]


def advisor(
    cwd: Path, *args: str | Path, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _cmd(*args),
        cwd=cwd,
        env={**_env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def outputs(out: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Check the four files exist and are valid; return (run.json, findings.json)."""
    for name in ("trace.json.gz", "run.json", "findings.json", "report.html"):
        assert (out / name).is_file(), f"{name} missing in {out}: {sorted(os.listdir(out))}"
    with gzip.open(out / "trace.json.gz", "rb") as fh:
        trace = json.load(fh)
    assert trace["traceEvents"]
    run = json.loads((out / "run.json").read_text())
    findings = json.loads((out / "findings.json").read_text())
    assert findings["schema_version"] == 1 and isinstance(findings["findings"], list)
    html = (out / "report.html").read_text()
    assert html.lstrip().startswith("<!DOCTYPE html>") and "</html>" in html
    assert not [p for p in os.listdir(out) if p.endswith(".tmp")], "temp files left behind"
    return run, findings


@pytest.fixture(scope="module")
def train_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The training script with a 2-worker DataLoader, stopped after the window (--phases
    train: no wait for an evaluation phase)."""
    d = tmp_path_factory.mktemp("train")
    _write(d / "proj", "train.py", TRAIN, NUM_WORKERS=2)
    _write(d / "proj", "helper.py", "VALUE = 42\n")
    t0 = time.perf_counter()
    p = advisor(
        d,
        *FAST,
        "--phases",
        "train",
        "--out",
        "out",
        "proj/train.py",
        "--lr",
        "0.1",
        "--out",
        "theirs",
        "-m",
        env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
    )
    run, findings = outputs(d / "out")
    return {"p": p, "dir": d, "run": run, "findings": findings, "s": time.perf_counter() - t0}


def test_argv_passthrough_and_main_semantics(train_run: dict[str, Any]) -> None:
    p = train_run["p"]
    assert p.returncode == 0, p.stderr
    assert "ARGV ['--lr', '0.1', '--out', 'theirs', '-m'] __main__ proj True" in p.stdout
    assert "HELPER 42" in p.stdout
    assert not (train_run["dir"] / "theirs").exists()


def test_stops_after_window_not_swallowed(train_run: dict[str, Any]) -> None:
    p, run = train_run["p"], train_run["run"]
    assert "SWALLOWED" not in p.stdout and "FINISHED" not in p.stdout
    assert run["end_reason"] == "window-captured" and run["exit_code"] == 0
    assert run["stopped_after_window"] is True and run["ended_early"] is False
    assert run["trace_scope"] == "window" and run["window_steps"] == [3, 4]
    assert run["steps_seen"] == 5 and run["step_source"] == "optimizer"
    assert "advisor analyze out/trace.json.gz" in p.stdout
    assert steps_marked(train_run["findings"]["run"]) == 2


def test_dataloader_with_workers(train_run: dict[str, Any]) -> None:
    (dl,) = train_run["run"]["dataloaders"]
    assert dl["num_workers"] == 2 and dl["batch_size"] == 8 and dl["dataset_len"] == 64
    assert dl["pin_memory"] is False and dl["persistent_workers"] is False
    assert dl["prefetch_factor"] == 2
    assert dl["file"].endswith("train.py") and dl["line"] == _line(TRAIN, "loader = DataLoader")


def test_run_json_content(train_run: dict[str, Any]) -> None:
    run = train_run["run"]
    import torch

    assert run["torch"] == torch.__version__ and run["script"] == "proj/train.py"
    assert run["argv"] == ["--lr", "0.1", "--out", "theirs", "-m"]
    assert run["profile"] == {
        "wait": 1,
        "warmup": 1,
        "active": 2,
        "record_shapes": True,
        "with_stack": True,
        "profile_memory": True,
        "max_seconds": 60.0,
        "run_to_end": False,
        "phases": ["train"],
        "eval_steps": 3,
        "max_window_seconds": 60.0,
        "eval_wait": 10.0,
        "activities": ["cpu"],  # CUDA is profiled only once the script has initialized it
    }
    assert run["eval"] is None and run["phase"] == "train" and run["step_module"] is None
    assert run["call_sites"] > 0 and run["call_sites_error"] is None
    assert run["backends"]["cudnn_benchmark"] is True
    assert run["backends"]["float32_matmul_precision"] == "highest"
    assert {"name", "compute_capability", "total_memory_bytes"} <= set(run["device"])
    assert set(run["memory"]) == {"peak_allocated_bytes", "peak_reserved_bytes"}
    assert run["host"]["cpu_count"] >= 1
    (opt,) = run["optimizers"]
    assert opt["class"] == "SGD" and opt["foreach"] is False
    assert opt["line"] == _line(TRAIN, "opt = torch.optim.SGD")
    assert run["forward"]["autocast_dtypes"] == ["bfloat16"]
    assert run["forward"]["eval_with_grad"][0]["module"] == "Net"
    mods = run["modules"]
    (pair,) = mods["conv_bias_before_bn"]
    assert pair["conv"] == "Net.conv" and pair["bn"] == "Net.bn"
    assert pair["line"] == _line(TRAIN, "self.conv = nn.Conv2d")
    assert mods["param_dtypes"] == {"float32": sum(p for p in [8 * 27 + 8, 16, 5120 + 10])}
    assert mods["data_parallel"] is False and mods["compiled"] is False
    assert {"owner": "Optimizer", "set_to_none": False}.items() <= run["zero_grad"][0].items()
    assert opt["param_groups"] == 1
    (ec,) = run["allocator"]["empty_cache"]
    assert ec["line"] == _line(TRAIN, "torch.cuda.empty_cache()") and ec["calls"] >= 5
    assert run["allocator"]["alloc_conf"] == "expandable_segments:True"
    assert run["allocator"]["caching_disabled"] is False
    assert run["backends"]["detect_anomaly"] is False
    assert run["backends"]["cuda_launch_blocking"] is False


def test_run_to_end_and_force_over_previous_run(train_run: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "out"
    shutil.copytree(train_run["dir"] / "out", out)
    _loop(tmp_path, steps=8)
    p = advisor(tmp_path, *FAST, "--run-to-end", "--out", out, "loop.py")
    assert p.returncode == 1 and "not empty" in p.stderr  # no --force: refused
    p = advisor(tmp_path, *FAST, "--run-to-end", "--force", "--out", out, "loop.py")
    assert p.returncode == 0, p.stderr
    assert "FINISHED" in p.stdout
    run, _ = outputs(out)
    assert run["end_reason"] == "completed" and run["trace_scope"] == "window"
    assert run["stopped_after_window"] is False and run["steps_seen"] == 8


def test_refuses_to_overwrite_user_files(tmp_path: Path) -> None:
    script = _loop(tmp_path)
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep")
    p = advisor(tmp_path, "--out", out, script)
    assert p.returncode == 1 and p.stderr.startswith("advisor: error:") and "--force" in p.stderr
    (out / "run.json").write_text('{"mine": 1}')
    p = advisor(tmp_path, "--force", "--out", out, script)
    assert p.returncode == 1 and "run.json, which advisor did not write" in p.stderr
    assert (out / "run.json").read_text() == '{"mine": 1}'
    assert sorted(os.listdir(out)) == ["notes.txt", "run.json"]
    p = advisor(tmp_path, "missing.py")
    assert p.returncode == 1 and "no such script" in p.stderr


def test_module_mode_and_sys_exit_code(tmp_path: Path) -> None:
    _write(tmp_path / "pkg", "__init__.py", "")
    _write(tmp_path / "pkg", "util.py", "N = 5\n")
    _loop(
        tmp_path / "pkg",
        "train.py",
        steps=4,
        exit="from .util import N\nprint('ARGS', sys.argv[1:], __name__)\nsys.exit(N - 2)",
    )
    p = advisor(tmp_path, *FAST, "--out", "o", "-m", "pkg.train", "--out", "x", "--force")
    assert p.returncode == 3, p.stderr
    assert "ARGS ['--out', 'x', '--force'] __main__" in p.stdout
    run, _ = outputs(tmp_path / "o")
    assert run["module"] == "pkg.train" and run["argv"] == ["--out", "x", "--force"]
    assert run["end_reason"] == "sys-exit" and run["exit_code"] == 3 and run["ended_early"]
    assert run["trace_scope"] == "partial-window" and run["window_steps"] == [3, 4]


def test_uncaught_exception_exits_1_with_users_traceback(tmp_path: Path) -> None:
    _loop(tmp_path, steps=3, exit="def fail():\n    raise ValueError('bad input 7')\nfail()")
    p = advisor(tmp_path, "--out", "o", "loop.py")
    assert p.returncode == 1
    tb = p.stderr[p.stderr.index("Traceback (most recent call last):") :]
    assert tb.splitlines()[1].startswith(f'  File "{tmp_path / "loop.py"}", line ')
    assert "ValueError: bad input 7" in tb and "advisor/profile" not in tb
    run, findings = outputs(tmp_path / "o")
    assert run["end_reason"] == "exception" and run["error"] == "ValueError: bad input 7"
    assert run["trace_scope"] == "pre-window" and findings["run"]["ended_early"] is True
    assert any("ValueError" in n for n in run["notes"])


@pytest.mark.parametrize(
    ("sig", "code", "reason"),
    [(signal.SIGINT, 130, "keyboard-interrupt"), (signal.SIGTERM, 143, "sigterm")],
)
def test_signal_writes_outputs(tmp_path: Path, sig: int, code: int, reason: str) -> None:
    _loop(tmp_path, steps=100_000, ready_at=5, sleep=0.01)
    args = ["--wait", "0", "--warmup", "0", "--active", "100000", "--out", "o", "loop.py"]
    proc = subprocess.Popen(
        _cmd(*args),
        cwd=tmp_path,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    watchdog = threading.Timer(HANG_S, proc.kill)  # readline() must not hang the suite
    watchdog.start()
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "READY" in line, proc.stderr.read() if proc.stderr else line
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=HANG_S)
    finally:
        watchdog.cancel()
        proc.kill()
    assert proc.returncode == code, err
    run, findings = outputs(tmp_path / "o")
    assert run["end_reason"] == reason and run["ended_early"] is True
    assert run["trace_scope"] == "partial-window" and findings["run"]["steps_profiled"] >= 3


SITECUSTOMIZE = """
import builtins, torch
builtins.CUDA_QUERIED = []
for name in ("is_available", "device_count", "get_device_properties", "init"):
    orig = getattr(torch.cuda, name)
    def spy(*a, _orig=orig, _name=name, **k):
        builtins.CUDA_QUERIED.append(_name)
        return _orig(*a, **k)
    setattr(torch.cuda, name, spy)
"""


def test_advisor_step_without_optimizer_and_tensorboard(tmp_path: Path) -> None:
    # the script must be able to set CUDA_VISIBLE_DEVICES itself: nothing may query CUDA first
    _write(tmp_path / "site", "sitecustomize.py", SITECUSTOMIZE)
    _write(
        tmp_path,
        "infer.py",
        """
        import builtins
        assert builtins.CUDA_QUERIED == [], builtins.CUDA_QUERIED
        import torch, advisor
        model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU()).eval()
        with torch.no_grad():
            for _ in range(50):
                model(torch.randn(16, 32))
                advisor.step()
        print("FINISHED")
    """,
    )
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(REPO)])}
    p = advisor(tmp_path, *FAST, "--out", "o", "--tensorboard", "tb", "infer.py", env=env)
    assert p.returncode == 0, p.stderr
    run, findings = outputs(tmp_path / "o")
    assert run["step_source"] == "advisor.step" and run["trace_scope"] == "window"
    assert run["forward"]["eval_with_grad"] == [] and steps_marked(findings["run"]) == 2
    names = os.listdir(tmp_path / "tb")
    assert any(n.endswith(".pt.trace.json.gz") for n in names)
    assert any(n.startswith("events.out.tfevents") for n in names)


def test_script_without_steps_is_one_step_bounded(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "nostep.py",
        """
        import time, torch
        x = torch.randn(32, 32)
        t0 = time.time()
        while time.time() - t0 < 30:
            x = torch.tanh(x @ x)
            time.sleep(0.02)
        print("FINISHED")
    """,
    )
    p = advisor(tmp_path, "--max-seconds", "1", "--out", "o", "nostep.py")
    assert p.returncode == 0, p.stderr
    assert "FINISHED" not in p.stdout  # stopped long before its 30 s loop ended (not timed:
    # a loaded machine stretches the analysis)
    run, findings = outputs(tmp_path / "o")
    assert run["no_steps"] is True and run["trace_scope"] == "whole-run"
    assert run["max_seconds_hit"] is True and run["end_reason"] == "window-captured"
    assert findings["run"]["steps_synthetic"] is True
    # the advisor's own limit is named, not the script
    assert any(n.startswith("No step came within --max-seconds (1 s)") for n in run["notes"])


def test_script_using_torch_profiler_itself(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "own.py",
        """
        import torch
        from torch.profiler import profile, ProfilerActivity
        model = torch.nn.Linear(16, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        def step():
            model(torch.randn(8, 16)).sum().backward(); opt.step(); opt.zero_grad()
        for _ in range(3):
            step()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(3):
                step()
        print("OWN", len(prof.key_averages()) > 0)
    """,
    )
    p = advisor(tmp_path, *FAST, "--out", "o", "own.py")
    assert p.returncode == 0, p.stderr
    assert "OWN True" in p.stdout
    assert "your script starts torch.profiler itself (at step 3)" in p.stderr
    assert "advisor.on_trace_ready(DIR)" in p.stderr and "advisor.capture(out=DIR)" in p.stderr
    run, _ = outputs(tmp_path / "o")
    assert run["foreign_profiler"] is True and run["foreign_profiler_step"] == 3
    assert run["end_reason"] == "completed" and run["trace_scope"] == "partial-window"
