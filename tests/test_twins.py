"""``advisor profile`` on small local twins of pytorch/examples scripts (``tests/twins/``), as a
new user runs them: the default options, the CPU, seconds per script.

- mnist-like: the evaluation phase (2 test batches, fewer than ``--eval-steps``) is captured
  whole, its findings name the test loader and the evaluation loop, and the Dataset's
  ``int(tensor)`` on CPU tensors is no host-device sync;
- imagenet ``--dummy``-like (an epoch of 40,000 steps): the profile ends within the training
  window + 15 s (the epoch is out of the wait's reach: said at once);
- word_language_model-like (no optimizer: steps are the model's calls): its evaluation phase is
  captured too;
- time_sequence_prediction-like (LBFGS, ``step(closure)``): see ``test_lbfgs_steps``.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.test_profile import _env

REPO = Path(__file__).resolve().parent.parent
TWINS = REPO / "tests" / "twins"
pytestmark = pytest.mark.slow


FAST = ["--wait", "1", "--warmup", "1", "--active", "2"]


def _profile(tmp: Path, script: str, *args: str, fast: bool = False) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "advisor", "profile", *(FAST if fast else ())]
    cmd += ["-o", str(tmp / "out"), str(TWINS / script)]
    return subprocess.Popen(
        [*cmd, *args],
        cwd=tmp,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _done(p: subprocess.Popen[str], timeout: float = 300) -> tuple[str, str]:
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, err[-3000:]
    return out, err


def _read(out: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    run = json.loads((out / "run.json").read_text(encoding="utf-8"))
    return run, json.loads((out / "findings.json").read_text(encoding="utf-8"))


def _function_lines(script: str) -> dict[str, range]:
    """Each top-level function's lines (and each method's, by name)."""
    tree = ast.parse((TWINS / script).read_text(encoding="utf-8"))
    return {
        n.name: range(n.lineno, (n.end_lineno or n.lineno) + 1)
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef)
    }


def _line(script: str, needle: str) -> int:
    lines = (TWINS / script).read_text(encoding="utf-8").splitlines()
    return next(i for i, ln in enumerate(lines, 1) if needle in ln)


def test_mnist_like_eval_phase(tmp_path: Path) -> None:
    out, err = _done(_profile(tmp_path, "mnist_like.py"))
    run, findings = _read(tmp_path / "out")
    ev = run["eval"]
    # 2 test batches, fewer than --eval-steps 3: the whole phase, recorded as it is
    assert ev["trace_written"] and ev["steps"] == [1, 2] and ev["scope"] == "window", ev
    assert ev["ended_by"] == "model.train()"  # the next epoch's model.train() ended it
    phases = findings["run"]["phases"]
    assert [p["phase"] for p in phases] == ["train", "eval"] and phases[1]["steps_profiled"] >= 1
    assert "the whole phase: 2 call(s)" in out
    # each phase names its own loader: the test loader was first iterated in evaluation
    loaders = {d["line"]: d["phase"] for d in run["dataloaders"]}
    test_loader, train_loader = (
        _line("mnist_like.py", f"{n} = DataLoader") for n in ("test_loader", "train_loader")
    )
    assert loaders == {train_loader: "train", test_loader: "eval"}
    fn = _function_lines("mnist_like.py")
    evals = [f for f in findings["findings"] if f.get("phase") == "eval"]
    assert evals, findings["findings"]
    for f in evals:  # nothing in the evaluation phase points into the training loop
        assert not any(loc["line"] in fn["train"] for loc in f["locations"]), f
    stall = next((f for f in evals if f["id"] == "dataloader-stall"), None)
    if stall is not None:  # on a loaded machine the forward may outweigh the fetch
        assert stall["title"] == "Evaluation loop waits for the DataLoader"
        assert stall["locations"][0]["line"] == test_loader
        assert any(loc["line"] in fn["test"] for loc in stall["locations"][1:])
    # the Dataset's int(self.targets[index]) reads CPU tensors: not a (latent) sync
    for f in findings["findings"]:
        if f["id"] == "sync-point":
            assert not any(loc["line"] in fn["__getitem__"] for loc in f["locations"]), f
            loop = _line("mnist_like.py", "for batch_idx, (data, target)")
            assert not any(loc["line"] == loop for loc in f["locations"]), f
    assert "USDT" not in out + err and "CPUAllocator" not in out + err  # torch's own lines


def test_never_ending_script_ends_soon_after_its_window(tmp_path: Path) -> None:
    p = _profile(tmp_path, "imagenet_dummy_like.py", "--dummy")
    trace = tmp_path / "out" / "trace.json.gz"
    t_trace = None
    while p.poll() is None:
        if t_trace is None and trace.exists():
            t_trace = time.monotonic()
        time.sleep(0.1)
    _done(p)
    assert t_trace is not None
    run, findings = _read(tmp_path / "out")
    # it has a validate(), after an epoch of 40,000 steps: out of the wait's reach, said at once
    assert run["end_reason"] == "window-captured" and run["eval"]["missing"] == "epoch-left"
    wait = run["profile"]["eval_wait"]
    assert wait > 0
    assert run["timings_s"]["eval_wait"] <= wait + 2, run["timings_s"]
    # (it ended at all: the script never ends by itself; how soon depends on the machine)
    assert findings["run"]["phases"][1]["missing"] == "epoch-left"


def test_word_lm_like_eval_phase_with_model_call_steps(tmp_path: Path) -> None:
    out, _ = _done(_profile(tmp_path, "word_lm_like.py"))
    run, findings = _read(tmp_path / "out")
    assert run["step_source"] == "forward" and run["phase"] == "train"
    assert run["eval"]["trace_written"], run["eval"]
    assert [p["phase"] for p in findings["run"]["phases"]] == ["train", "eval"]


def test_lbfgs_steps_and_a_bounded_window(tmp_path: Path) -> None:
    """LBFGS's step(closure) runs the model several times per step: its steps are the optimizer's
    (the post-step hook), and a window of long steps is ended by --max-window-seconds at a
    complete step, which run.json and the report's trace quality say."""
    args = ["--steps", "7", "--max-iter", "3", "--length", "20"]
    p = _profile(tmp_path, "time_seq_like.py", *args, fast=True)
    out, err = _done(p, timeout=900)
    run, findings = _read(tmp_path / "out")
    assert run["step_source"] == "optimizer" and run["steps_seen"] >= 5, run["notes"]
    assert run["trace_scope"] == "window" and findings["run"]["steps_profiled"] >= 1
    assert "USDT" not in out + err


def test_window_cut_by_its_time_limit_is_said(tmp_path: Path) -> None:
    args = ["--steps", "7", "--max-iter", "3", "--length", "20"]
    cmd = [sys.executable, "-m", "advisor", "profile", *FAST, "--max-window-seconds", "0.001"]
    r = subprocess.run(
        [*cmd, "-o", str(tmp_path / "out"), str(TWINS / "time_seq_like.py"), *args],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    run, findings = _read(tmp_path / "out")
    first = run["window_steps"][0]
    assert run["trace_scope"] == "window" and run["window_steps"] == [first, first]
    (cut,) = run["capture_limits"]
    assert (
        "ended after 1 of 2 active steps" in cut["what"] and "--max-window-seconds" in cut["what"]
    )
    assert any(q["what"] == cut["what"] for q in findings["run"]["trace_quality"])
    assert "--max-window-seconds" in (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
