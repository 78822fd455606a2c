"""Evaluation and inference phases profiled without code changes (issue 15, part 2).

Real ``advisor profile`` runs on the CPU: a script that trains then validates with autograd
on (a second window in the validation loop: ``inference-without-no-grad`` at the validation
line), an inference-only script with neither an optimizer nor ``advisor.step()`` (steps are
its model's calls), and a training script whose evaluation never comes within
``--eval-wait``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor import record
from advisor.analysis.pipeline import analyze_path
from tests.conftest import steps_marked
from tests.test_profile import FAST, _line, _write, advisor, outputs

pytestmark = pytest.mark.slow

TRAIN_THEN_VALIDATE = """
import torch
from torch import nn

layers = []
for _ in range(12):
    layers += [nn.Linear(32, 32), nn.ReLU()]
model = nn.Sequential(*layers)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(10):
    loss = model(torch.randn(16, 32)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()

model.eval()
total = 0.0
for i in range(40):
    out = model(torch.randn(16, 32))  # validation without torch.no_grad()
    total += float(out.mean())
print("VALIDATED", flush=True)
"""

INFERENCE_ONLY = """
import torch
from torch import nn

model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).eval()
loss_fn = nn.CrossEntropyLoss()  # a module without parameters: never the step module
with torch.inference_mode():
    for i in range(30):
        x = torch.randn(8, 32)
        out = model(x)
        loss = loss_fn(out, out.argmax(1))
print("INFERRED", flush=True)
"""

TRAIN_THEN_SLEEP = """
import time
import torch
model = torch.nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(8):
    model(torch.randn(8, 16)).sum().backward()
    opt.step()
time.sleep(60)
print("WOKE", flush=True)
"""


def test_validation_loop_gets_its_own_window(tmp_path: Path) -> None:
    script = _write(tmp_path, "tv.py", TRAIN_THEN_VALIDATE)
    p = advisor(tmp_path, *FAST, "--no-memory", "--eval-steps", "2", "-o", "out", script.name)
    assert p.returncode == 0, p.stderr
    assert "VALIDATED" not in p.stdout  # stopped after the evaluation window
    run, findings = outputs(tmp_path / "out")
    ev = run["eval"]
    assert ev["trace_written"] and ev["trace"] == "trace.eval.json.gz", ev
    # recorded from the phase's first call (a phase may be that short)
    assert ev["module"] == "Sequential" and ev["scope"] == "window" and ev["steps"] == [1, 2]
    assert (tmp_path / "out" / "trace.eval.json.gz").is_file()
    assert any("Evaluation phase" in n for n in run["notes"])
    phases = findings["run"]["phases"]
    assert [ph["phase"] for ph in phases] == ["train", "eval"]
    assert phases[1]["steps_profiled"] == 2 and phases[1]["step_ms_median"] > 0
    assert "inference-without-no-grad" not in phases[0]["findings"]
    assert "inference-without-no-grad" in phases[1]["findings"]
    inf = next(f for f in findings["findings"] if f["id"] == "inference-without-no-grad")
    assert inf["phase"] == "eval"
    val = _line(TRAIN_THEN_VALIDATE, "validation without torch.no_grad()")
    assert (inf["locations"][0]["line"], inf["locations"][0]["line_is"]) == (val, "call")
    # the main window's findings come first, without a phase; then the evaluation window's
    tagged = [f.get("phase") for f in findings["findings"]]
    assert tagged == [None] * len(phases[0]["findings"]) + ["eval"] * len(phases[1]["findings"])
    # advisor analyze on the run folder gives the same phases and findings
    _, again = analyze_path(tmp_path / "out")
    assert [(f.id, f.phase) for f in again.findings] == [
        (f["id"], f.get("phase")) for f in findings["findings"]
    ]
    assert record.dump(again.run)["phases"] == phases
    html = (tmp_path / "out" / "report.html").read_text()
    assert "eval phase" in html and "Eval step" in html


def test_phases_eval_records_only_the_validation_and_runs_to_end(tmp_path: Path) -> None:
    script = _write(tmp_path, "tv.py", TRAIN_THEN_VALIDATE)
    p = advisor(
        tmp_path, *FAST, "--no-memory", "--phases", "eval", "--run-to-end", "-o", "out", script.name
    )
    assert p.returncode == 0, p.stderr
    assert "VALIDATED" in p.stdout  # --run-to-end: the script finished
    run, findings = outputs(tmp_path / "out")
    assert run["phase"] == "eval" and run["eval"] is None and run["trace_scope"] == "window"
    assert run["window_steps"] == [1, 3] and run["end_reason"] == "completed"
    assert not (tmp_path / "out" / "trace.eval.json.gz").exists()
    phases = findings["run"]["phases"]
    assert [ph["phase"] for ph in phases] == ["eval", "train"]
    assert phases[1]["captured"] is False and phases[1]["missing"] == "not-requested"
    inf = next(f for f in findings["findings"] if f["id"] == "inference-without-no-grad")
    assert "phase" not in inf  # the main (and only) window
    val = _line(TRAIN_THEN_VALIDATE, "validation without torch.no_grad()")
    assert inf["locations"][0]["line"] == val


def test_inference_only_script_steps_on_its_model_calls(tmp_path: Path) -> None:
    script = _write(tmp_path, "inf.py", INFERENCE_ONLY)
    p = advisor(tmp_path, *FAST, "--no-memory", "-o", "out", script.name)
    assert p.returncode == 0, p.stderr
    run, findings = outputs(tmp_path / "out")
    assert run["step_source"] == "forward" and run["step_module"] == "Sequential"
    assert run["phase"] == "eval" and run["trace_scope"] == "window"
    assert run["window_steps"] == [3, 4] and run["eval"] is None
    assert steps_marked(findings["run"]) == 2 and not findings["run"]["steps_synthetic"]
    phases = findings["run"]["phases"]
    assert [ph["phase"] for ph in phases] == ["eval", "train"]
    assert phases[1]["missing"] == "no-training" and "trained nothing" in phases[1]["why"]
    assert "Train phase not captured" in p.stdout
    assert "INFERRED" not in p.stdout
    assert any("top-level calls of Sequential" in n for n in run["notes"])


def test_no_evaluation_within_eval_wait_is_said(tmp_path: Path) -> None:
    script = _write(tmp_path, "ts.py", TRAIN_THEN_SLEEP + "\n# model.eval() later\n")
    p = advisor(tmp_path, *FAST, "--no-memory", "--eval-wait", "1", "-o", "out", script.name)
    assert p.returncode == 0, p.stderr
    assert "WOKE" not in p.stdout
    run, findings = outputs(tmp_path / "out")
    assert run["eval"]["missing"] == "eval-wait" and not run["eval"]["trace_written"]
    assert run["end_reason"] == "window-captured" and run["trace_scope"] == "window"
    assert run["profile"]["eval_wait"] == 1 and run["profile"]["max_seconds"] == 60
    note = "Eval phase not captured: no evaluation phase"
    assert any(n.startswith(note) and "--eval-wait 1 s" in n for n in run["notes"])
    assert note in p.stdout  # the terminal says why
    row = findings["run"]["phases"][1]
    assert (row["phase"], row["captured"], row["missing"]) == ("eval", False, "eval-wait")
    assert "--eval-wait 1 s" in row["why"]
    assert "Eval phase not captured" in (tmp_path / "out" / "report.html").read_text()


def test_no_evaluation_code_means_no_wait(tmp_path: Path) -> None:
    """A script whose files never mention evaluation is not waited for: it is stopped right
    after the training window, and the report says why."""
    script = _write(tmp_path, "ts.py", TRAIN_THEN_SLEEP)
    p = advisor(tmp_path, *FAST, "--no-memory", "-o", "out", script.name)
    assert p.returncode == 0, p.stderr
    run, findings = outputs(tmp_path / "out")
    assert run["profile"]["eval_wait"] == 0 and run["eval"]["missing"] == "no-eval-code"
    assert run["end_reason"] == "window-captured" and "WOKE" not in p.stdout
    row = findings["run"]["phases"][1]
    assert row["missing"] == "no-eval-code" and "never mention evaluation" in row["why"]


def test_phases_option_is_checked(tmp_path: Path) -> None:
    _write(tmp_path, "x.py", "print('never')\n")
    p = advisor(tmp_path, "--phases", "train,test", "-o", "out", "x.py")
    assert p.returncode != 0 and "--phases" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "out").exists()
