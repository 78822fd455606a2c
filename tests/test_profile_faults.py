"""Faults during ``advisor profile``: SIGTERM (also with the script's own handler, and sent to
the whole process group), a DataLoader worker that dies, out of memory, a kill while the
outputs are written, a full disk and an unwritable ``--out``.

End-to-end runs (marked slow) use tiny CPU scripts in subprocesses; a ``sitecustomize`` on the
subprocess's path simulates what cannot be produced for real (a kill at an exact moment, a
full disk). The unit tests at the end check the pieces in-process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import HANG_S
from tests.test_profile import FAST, REPO, _cmd, _env, _write, advisor, outputs

slow = pytest.mark.slow  # the end-to-end runs; the unit tests at the end are fast

GROUP_TERM = """
import multiprocessing as mp, time, torch, torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

def helper():  # a forked child of the script's own, besides the DataLoader workers
    while True:
        time.sleep(0.05)

if __name__ == "__main__":
    mp.get_context("fork").Process(target=helper, daemon=True).start()
    model = nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(64, 16)), batch_size=4, num_workers=2,
                        persistent_workers=True)
    i = 0
    while True:
        for (x,) in loader:
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()
            i += 1
            if i == 5:
                print("READY", flush=True)
            time.sleep(0.01)
"""

OWN_HANDLER = """
import signal, sys, time, torch
stop = []
def on_term(signum, frame):
    stop.append(signum)
prev = signal.signal(signal.SIGTERM, on_term)
print("PREV_IS_DEFAULT", prev == signal.SIG_DFL, signal.getsignal(signal.SIGTERM) is on_term)
model = torch.nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
i = 0
while not stop:
    model(torch.randn(8, 16)).sum().backward()
    opt.step()
    opt.zero_grad()
    i += 1
    if i == 5:
        print("READY", flush=True)
    time.sleep(0.01)
print("CHECKPOINT SAVED", flush=True)
print("RESTORED", signal.signal(signal.SIGTERM, prev) is on_term, flush=True)
sys.exit(0)
"""


def _signal_run(tmp: Path, sig: int, *args: str, group: bool = False) -> tuple[int, str, str]:
    """Start ``advisor profile ARGS``, wait for READY on stdout, send ``sig`` (to the whole
    process group with ``group``, as a job scheduler does); returns (code, stdout, stderr)."""
    proc = subprocess.Popen(
        _cmd(*args),
        cwd=tmp,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=group,
    )
    watchdog = threading.Timer(HANG_S, proc.kill)  # readline() must not hang the suite
    watchdog.start()
    try:
        assert proc.stdout is not None
        before = [proc.stdout.readline()]
        while before[-1] and "READY" not in before[-1]:
            before.append(proc.stdout.readline())
        assert "READY" in before[-1], proc.stderr.read() if proc.stderr else before
        time.sleep(0.2)
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        out, err = proc.communicate(timeout=HANG_S)
    finally:
        watchdog.cancel()
        proc.kill()
    return proc.returncode, "".join(before) + out, err


LONG = ["--wait", "0", "--warmup", "0", "--active", "100000", "--out", "o"]


@slow
def test_sigterm_to_the_process_group(tmp_path: Path) -> None:
    """A scheduler's SIGTERM reaches the script, its DataLoader workers and its own forked
    child: the report is written, exit 143, and no child prints a traceback."""
    _write(tmp_path, "train.py", GROUP_TERM)
    code, out, err = _signal_run(tmp_path, signal.SIGTERM, *LONG, "train.py", group=True)
    assert code == 143, err
    assert "Traceback" not in err and "Terminated" not in err, err
    run, findings = outputs(tmp_path / "o")
    assert run["end_reason"] == "sigterm" and run["exit_code"] == 143 and run["ended_early"]
    assert findings["run"]["ended_early"] is True and findings["run"]["end_reason"] == "sigterm"
    assert run["trace_scope"] == "partial-window" and findings["run"]["steps_profiled"] >= 3
    assert any("terminated (SIGTERM)" in n for n in run["notes"])
    html = (tmp_path / "o" / "report.html").read_text()
    assert "The run ended early (sigterm)" in html and "terminated (SIGTERM)" in html
    assert "advisor: The run was terminated (SIGTERM)" in out


@slow
def test_scripts_own_sigterm_handler_runs(tmp_path: Path) -> None:
    """The script sees SIG_DFL as before, its handler runs and decides the exit code; the
    report still says the run was terminated."""
    _write(tmp_path, "own.py", OWN_HANDLER)
    code, out, err = _signal_run(tmp_path, signal.SIGTERM, *LONG, "own.py")
    assert code == 0, err
    assert "PREV_IS_DEFAULT True True" in out
    assert "CHECKPOINT SAVED" in out and "RESTORED True" in out
    run, _ = outputs(tmp_path / "o")
    assert run["end_reason"] == "sigterm" and run["exit_code"] == 0 and run["ended_early"]
    assert run["error"] == "SIGTERM (handled by the script)"
    assert any("the script's own handler ended it with exit code 0" in n for n in run["notes"])


DATALOADER_DIES = """
import os, signal, sys, torch, torch.nn as nn
from torch.utils.data import DataLoader, Dataset

class Data(Dataset):
    def __len__(self):
        return 4000

    def __getitem__(self, i):
        if i == 40:  # batch 10, in one of the two workers
            if sys.argv[1] == "exit":
                os._exit(1)
            os.kill(os.getpid(), signal.SIGKILL)  # what the kernel's OOM killer does
        return torch.randn(16), torch.randn(4)

model = nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in DataLoader(Data(), batch_size=4, num_workers=2):
    ((model(x) - y) ** 2).mean().backward()
    opt.step()
    opt.zero_grad()
print("FINISHED")
"""


@slow
@pytest.mark.parametrize("how", ["exit", "kill"])
def test_dataloader_worker_dies(tmp_path: Path, how: str) -> None:
    _write(tmp_path, "dl.py", DATALOADER_DIES)
    p = advisor(
        tmp_path, "--wait", "1", "--warmup", "1", "--active", "100", "--out", "o", "dl.py", how
    )
    assert p.returncode == 1, p.stderr
    assert "FINISHED" not in p.stdout and "Traceback (most recent call last):" in p.stderr
    run, findings = outputs(tmp_path / "o")
    assert run["end_reason"] == "dataloader-worker-died" and run["ended_early"], run["error"]
    assert run["exit_code"] == 1 and run["trace_scope"] == "partial-window"
    assert findings["run"]["end_reason"] == "dataloader-worker-died"
    notes = " ".join(run["notes"])
    assert "A DataLoader worker process died" in notes and "num_workers=0" in notes
    assert (
        "The run ended early (dataloader-worker-died)" in (tmp_path / "o/report.html").read_text()
    )


@slow
def test_cuda_out_of_memory(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "oom.py",
        """
        import torch
        model = torch.nn.Linear(16, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for i in range(20):
            if i == 4:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            model(torch.randn(8, 16)).sum().backward()
            opt.step()
    """,
    )
    p = advisor(tmp_path, *FAST, "--out", "o", "oom.py")
    assert p.returncode == 1, p.stderr
    tb = p.stderr[p.stderr.index("Traceback (most recent call last):") :]
    assert "OutOfMemoryError: CUDA out of memory" in tb and "advisor/profile" not in tb
    run, findings = outputs(tmp_path / "o")
    assert run["end_reason"] == "out-of-memory" and run["ended_early"] and run["exit_code"] == 1
    assert run["error"] == "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert findings["run"]["end_reason"] == "out-of-memory"
    html = (tmp_path / "o" / "report.html").read_text()
    assert "The run ended early (out-of-memory)" in html and "ran out of memory" in html
    assert "lower the batch size" in html and "expandable_segments" in html


SITE_KILL_ON_RENAME = """
import os, signal
_replace = os.replace
def replace(src, dst, *a, **k):
    if os.path.basename(str(dst)) == "findings.json":
        os.kill(os.getpid(), signal.SIGKILL)  # killed in the middle of writing the outputs
    return _replace(src, dst, *a, **k)
os.replace = replace
"""


@slow
def test_killed_while_writing_leaves_no_partial_outputs(tmp_path: Path) -> None:
    _write(tmp_path / "site", "sitecustomize.py", SITE_KILL_ON_RENAME)
    _write(
        tmp_path,
        "loop.py",
        """
        import torch
        model = torch.nn.Linear(16, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(10):
            model(torch.randn(8, 16)).sum().backward()
            opt.step()
    """,
    )
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(REPO)])}
    p = advisor(tmp_path, *FAST, "--phases", "train", "--out", "o", "loop.py", env=env)
    assert p.returncode == -signal.SIGKILL, p.stderr
    names = sorted(os.listdir(tmp_path / "o"))
    # findings.json was complete in its temporary file, but never got its name; report.html
    # comes after it. What has its final name is complete.
    assert "findings.json" not in names and "report.html" not in names, names
    assert json.loads((tmp_path / "o" / "run.json").read_text())["end_reason"] == "window-captured"
    assert [n for n in names if n.endswith(".tmp")] == [n for n in names if n.startswith(".f")]
    # the next run with --force clears the leftovers and writes a complete set
    p = advisor(tmp_path, *FAST, "--force", "--out", "o", "loop.py")
    assert p.returncode == 0, p.stderr
    outputs(tmp_path / "o")  # also asserts that no temporary file is left


SITE_DISK_FULL = """
import errno, os
_replace = os.replace
def replace(src, dst, *a, **k):
    if os.path.basename(str(dst)) in ("run.json", "findings.json", "report.html"):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return _replace(src, dst, *a, **k)
os.replace = replace
"""


@slow
def test_disk_full_after_the_script_ran(tmp_path: Path) -> None:
    _write(tmp_path / "site", "sitecustomize.py", SITE_DISK_FULL)
    _write(
        tmp_path,
        "loop.py",
        """
        import sys, torch
        model = torch.nn.Linear(16, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            model(torch.randn(8, 16)).sum().backward()
            opt.step()
        sys.exit(5)
    """,
    )
    out = tmp_path / "o"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(REPO)])}
    p = advisor(tmp_path, *FAST, "--force", "--out", "o", "loop.py", env=env)
    assert p.returncode == 5, p.stderr  # the script's own code, though no report was written
    (line,) = [ln for ln in p.stderr.splitlines() if ln.startswith("advisor: error:")]
    assert f"{out}: cannot write run.json: No space left on device" in line
    assert "advisor analyze" in line and "Traceback" not in p.stderr
    assert sorted(os.listdir(out)) == ["notes.txt", "trace.json.gz"]  # no partial, no temp
    assert (out / "notes.txt").read_text() == "mine"


@slow
def test_unwritable_out_is_refused_before_the_script_runs(tmp_path: Path) -> None:
    target = Path("/sys/advisor-faults-test/out")  # sysfs refuses new folders, even to root
    try:
        target.parent.mkdir()
    except OSError:
        pass
    else:
        target.parent.rmdir()
        pytest.skip("/sys is writable here")
    _write(tmp_path, "s.py", "open('RAN', 'w').close()\n")
    p = advisor(tmp_path, "--out", target, "s.py")
    assert p.returncode == 1 and not (tmp_path / "RAN").exists()
    (line,) = p.stderr.strip().splitlines()
    assert line.startswith(f"advisor: error: {target}: cannot create output folder: ")


# ---------------------------------------------------------------- unit tests (fast, in-process)


def _raised(exc: BaseException, cause: BaseException | None = None) -> BaseException:
    try:
        try:
            if cause is not None:
                raise cause
        finally:
            raise exc
    except BaseException as got:  # noqa: BLE001
        return got


class OutOfMemoryError(RuntimeError):  # the class name torch.OutOfMemoryError has
    pass


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (MemoryError(), "out-of-memory"),
        (OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB"), "out-of-memory"),
        (
            RuntimeError(
                "[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate "
                "memory: you tried to allocate 99 bytes."
            ),
            "out-of-memory",
        ),
        (
            RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate"),
            "out-of-memory",
        ),
        (_raised(ValueError("training failed"), MemoryError()), "out-of-memory"),  # during handling
        (
            RuntimeError("DataLoader worker (pid 123) is killed by signal: Killed. "),
            "dataloader-worker-died",
        ),
        (
            RuntimeError("DataLoader worker (pid(s) 12, 13) exited unexpectedly"),
            "dataloader-worker-died",
        ),
        (
            RuntimeError("DataLoader worker (pid 9) exited unexpectedly with exit code 1."),
            "dataloader-worker-died",
        ),
        # the Dataset's own error re-raised from a worker: the user's bug, not a dead worker
        (
            KeyError("Caught KeyError in DataLoader worker process 0.\nOriginal Traceback..."),
            "exception",
        ),
        (ConnectionResetError(104, "Connection reset by peer"), "exception"),  # not in a DataLoader
        (RuntimeError("shape mismatch"), "exception"),
        (ValueError("memory layout"), "exception"),
    ],
)
def test_classify(exc: BaseException, reason: str) -> None:
    from advisor.profile.faults import classify

    assert classify(exc) == reason


def test_remedies_and_notes() -> None:
    from advisor.profile.capture import Capture, SessionConfig
    from advisor.profile.execute import Outcome
    from advisor.profile.runinfo import notes

    cap, cfg = Capture(scope="pre-window", steps_seen=2, window_steps=[1, 2]), SessionConfig()
    cpu = notes(Outcome("out-of-memory", 1, "MemoryError"), cap, cfg)
    assert cpu[0].startswith("The script ran out of memory (MemoryError) after 2 step(s)")
    assert "fewer DataLoader workers" in cpu[1] and "expandable_segments" not in cpu[1]
    cuda = notes(Outcome("out-of-memory", 1, "OutOfMemoryError: CUDA out of memory."), cap, cfg)
    assert "expandable_segments" in cuda[1] and "gradient accumulation" in cuda[1]
    term = notes(Outcome("sigterm", 0, "SIGTERM (handled by the script)"), cap, cfg)
    assert "own handler ended it with exit code 0" in term[0]
    assert "own handler" not in notes(Outcome("sigterm", 143, "SIGTERM"), cap, cfg)[0]
    assert Outcome("dataloader-worker-died", 1).ended_early
    assert Outcome("sigterm", 0).ended_early and not Outcome("sys-exit", 0).ended_early


def test_run_signals_view_and_restore() -> None:
    """What the script sees of SIGTERM is what plain Python shows; all is put back after."""
    from advisor.profile.execute import Terminated
    from advisor.profile.signals import RunSignals

    before_term = signal.getsignal(signal.SIGTERM)
    before_chld = signal.getsignal(signal.SIGCHLD)
    before_fns = (signal.signal, signal.getsignal)
    seen: list[int] = []

    def earlier_sigchld(signum: int, frame: object) -> None:  # an earlier DataLoader's
        pass

    signal.signal(signal.SIGCHLD, earlier_sigchld)  # the same whatever ran before in this process

    def script_handler(signum: int, frame: object) -> None:
        seen.append(signum)

    def torch_sigchld(signum: int, frame: object) -> None:
        raise RuntimeError("DataLoader worker (pid 1) is killed by signal: Terminated.")

    with RunSignals() as sigs:
        assert signal.getsignal(signal.SIGTERM) == before_term  # not the advisor's handler
        with pytest.raises(Terminated):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)  # the handler runs at the next bytecode
        assert signal.signal(signal.SIGTERM, script_handler) == before_term
        assert signal.getsignal(signal.SIGTERM) is script_handler
        signal.signal(signal.SIGCHLD, torch_sigchld)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        assert seen == [signal.SIGTERM] and sigs.sigterm_handled_by_script
        assert signal.signal(signal.SIGTERM, signal.SIG_DFL) is script_handler
        with pytest.raises(Terminated):  # "default" under the advisor: end the run, report
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
        sigs.finalizing()
        assert (signal.signal, signal.getsignal) == before_fns  # no wrapper while writing
        assert signal.getsignal(signal.SIGCHLD) == signal.SIG_DFL  # torch's set aside
        os.kill(os.getpid(), signal.SIGTERM)  # held off while the outputs are written
        time.sleep(0.05)
    assert signal.getsignal(signal.SIGTERM) == before_term
    assert signal.getsignal(signal.SIGCHLD) is torch_sigchld
    signal.signal(signal.SIGCHLD, before_chld)


class _Session:
    """The profiling session, as _run_script uses it (nothing captured)."""

    stop_requested: object = None

    def start(self) -> None:
        pass

    def finish(self) -> Any:
        from advisor.profile.capture import Capture

        return Capture()


class _Recorder:
    def __init__(self) -> None:
        from advisor.profile.loaders import LoaderWorkers

        self.loader_workers = LoaderWorkers()

    def install(self) -> None:
        pass

    def uninstall(self) -> None:
        pass

    def setup(self) -> object:
        from advisor.profile.context import SetUp

        return SetUp()


def test_sigterm_whose_exception_was_lost(tmp_path: Path) -> None:
    """Terminated raised where Python drops exceptions (a __del__, an at-fork hook) or caught
    by the script: the run still counts as terminated by SIGTERM (exit 143)."""
    from advisor.profile.execute import Target
    from advisor.profile.run import _run_script
    from advisor.profile.signals import RunSignals

    script = tmp_path / "swallow.py"
    script.write_text(
        "import os, signal, time\n"
        "try:\n    os.kill(os.getpid(), signal.SIGTERM)\n    time.sleep(2)\n"
        "except BaseException:\n    pass\n"
        "import builtins\nbuiltins.CONTINUED = True\n"
    )
    import builtins

    with RunSignals() as sigs:
        outcome, _, _ = _run_script(
            Target("script", str(script), ()), _Session(), _Recorder(), sigs
        )
    assert builtins.__dict__.pop("CONTINUED", False)
    assert (outcome.end_reason, outcome.exit_code, outcome.ended_early) == ("sigterm", 143, True)


def test_worker_death_while_the_script_ends(tmp_path: Path) -> None:
    """torch's SIGCHLD handler raises when a DataLoader worker died; the signal can arrive
    after the script's own exception, while the advisor looks at it (here: from the
    exception's ``__str__``). How the script ended stands, and nothing escapes the run (which
    would lose run.json and the report); the script's handler is put back afterwards."""
    from advisor.profile.execute import Target
    from advisor.profile.run import _run_script
    from advisor.profile.signals import RunSignals

    script = tmp_path / "late.py"
    script.write_text(
        "import os, signal\n"
        "def torch_sigchld(signum, frame):\n"
        "    raise RuntimeError('DataLoader worker (pid 1) exited unexpectedly')\n"
        "signal.signal(signal.SIGCHLD, torch_sigchld)\n"
        "class Boom(Exception):\n"
        "    def __str__(self):\n"
        "        os.kill(os.getpid(), signal.SIGCHLD)  # a worker dies just now\n"
        "        return 'boom'\n"
        "raise Boom()\n"
    )
    before_chld = signal.getsignal(signal.SIGCHLD)
    try:
        with RunSignals() as sigs:
            outcome, _, _ = _run_script(
                Target("script", str(script), ()), _Session(), _Recorder(), sigs
            )
        assert (outcome.end_reason, outcome.exit_code, outcome.error) == (
            "exception",
            1,
            "Boom: boom",
        )
        assert getattr(signal.getsignal(signal.SIGCHLD), "__name__", "") == "torch_sigchld"
    finally:
        signal.signal(signal.SIGCHLD, before_chld)


def test_interrupted_writes_leave_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that fails (disk full) or is interrupted half-way never leaves a partial file
    under the final name, leaves an earlier version as it was, and cleans its temporary."""
    import errno

    from advisor.output.outfiles import atomic_write

    target = tmp_path / "findings.json"
    target.write_bytes(b'{"earlier": "complete"}')

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space left") as err:
        atomic_write(target, b'{"new": ' + b"1" * 100_000)
    assert err.value.filename == str(target)  # names the file, not the temporary one
    assert target.read_bytes() == b'{"earlier": "complete"}'
    monkeypatch.undo()

    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt  # a second Ctrl-C in the middle of a write

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic_write(tmp_path / "report.html", b"<!DOCTYPE html>" + b"x" * 100_000)
    assert sorted(os.listdir(tmp_path)) == ["findings.json"]


def test_trace_export_failure_leaves_no_trace(tmp_path: Path) -> None:
    from advisor.profile.capture import export_trace

    class HalfWritten:
        def export_chrome_trace(self, path: str) -> None:
            Path(path).write_text('{"traceEvents": [')
            raise OSError(28, "No space left on device")

    class Fine:
        def export_chrome_trace(self, path: str) -> None:
            Path(path).write_text('{"traceEvents": []}')

    out = tmp_path / "trace.json.gz"
    assert "No space left" in (export_trace(HalfWritten(), out) or "")
    assert os.listdir(tmp_path) == []
    assert export_trace(Fine(), out) is None
    assert os.listdir(tmp_path) == ["trace.json.gz"]


def test_write_outputs_fails_half_way(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The report fails after findings.json is written: findings.json is complete, there is
    no report.html, and the caller gets one clear error naming the folder."""
    import errno

    import advisor.output.html as html
    from advisor.output.outfiles import write_error, write_json
    from advisor.profile.analysis import _analyze_and_write

    write_json(tmp_path / "run.json", {"script": "t.py", "argv": [], "end_reason": "completed"})

    def boom(*a: object, **k: object) -> str:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "report.html"))

    monkeypatch.setattr(html, "render_html", boom)
    with pytest.raises(Exception) as err:  # noqa: PT011 (AdvisorError from write_outputs)
        _analyze_and_write(tmp_path, tmp_path / "trace.json.gz", tmp_path / "run.json")
    assert sorted(os.listdir(tmp_path)) == ["findings.json", "run.json"]
    assert json.loads((tmp_path / "findings.json").read_text())["schema_version"] == 1
    msg = write_error(err.value, tmp_path, tmp_path / "trace.json.gz")
    assert (
        msg == f"{tmp_path}: cannot write report.html: No space left on device (disk full: "
        "free some space)"
    )


def test_out_dir_preflight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An existing folder that cannot be written (read-only, full) is refused before the run,
    and a nearly full disk is warned about."""
    import errno
    import shutil
    from collections import namedtuple

    from advisor.errors import AdvisorError
    from advisor.output.outfolder import check_out_dir

    out = tmp_path / "out"
    out.mkdir()
    real_open = open

    def read_only(path: object, *a: object, **k: object) -> object:
        if ".advisor-write-test-" in str(path):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, *a, **k)  # type: ignore[call-overload]

    monkeypatch.setattr("builtins.open", read_only)
    with pytest.raises(AdvisorError, match="output folder is not writable: Read-only file"):
        check_out_dir(out, force=False)
    monkeypatch.undo()
    assert os.listdir(out) == []
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**9, 10**9 - 10**6, 10**6))
    check_out_dir(out, force=False)  # allowed, with a warning
    assert os.listdir(out) == []
    assert f"advisor: warning: {out}: only 1 MB free" in capsys.readouterr().err
