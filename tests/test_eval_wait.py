"""The wait for the evaluation phase is counted in the script's own steps and epochs, not in
seconds alone (advisor/profile/evalwait.py): a loaded machine slows the steps and the wait with
them; an epoch that cannot end within the wait, or a next epoch begun without evaluating, ends
it at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.profile.evalwait import EVAL_WAIT_MAX_S, EVAL_WAIT_STEPS, Epochs, EvalWait, pace_s
from tests.conftest import HANG_S
from tests.test_profile import FAST, _write, advisor, outputs


def test_the_pace_is_the_median_gap_since_the_wait() -> None:
    times = [0.0, 5.0, 5.1, 5.2, 9.0, 10.0, 11.0, 12.5]  # steps 1-8; the wait began after 4
    assert pace_s(times, 4) == 1.0
    assert pace_s(times, 7) is None  # one step since: no gap
    wait = EvalWait(t0_s=8.9, g0=4, floor_s=10.0)
    assert wait.pace(times) == 1.0
    assert wait.pace(times[:5]) == pace_s(times[:4], 0)  # before two steps: the steps before


def test_the_budget_is_steps_at_the_pace_at_least_the_floor() -> None:
    slow = [float(i) for i in range(10)]  # 1 s a step (a loaded machine)
    fast = [i / 1000 for i in range(10)]  # 1 ms a step
    assert EvalWait(0.0, 5, 10.0).budget_s(slow) == EVAL_WAIT_STEPS * 1.0
    assert EvalWait(0.0, 5, 10.0).budget_s(fast) == 10.0
    assert EvalWait(0.0, 5, 10.0, by_steps=False).budget_s(slow) == 10.0  # --eval-wait given
    glacial = [60.0 * i for i in range(10)]
    assert EvalWait(0.0, 5, 10.0).budget_s(glacial) == EVAL_WAIT_MAX_S
    # the same script twice as slow waits twice as long: the same number of its steps
    half = [2.0 * t for t in slow]
    assert EvalWait(0.0, 5, 10.0).budget_s(half) == 2 * EvalWait(0.0, 5, 10.0).budget_s(slow)


def test_an_epoch_out_of_reach() -> None:
    times = [float(i) for i in range(12)]  # 1 s a step; the wait began at 5 s after step 5
    wait = EvalWait(5.0, 5, 10.0)
    assert not wait.epoch_out_of_reach(11.0, times, 150)  # ends at 161 s: within 205 s
    assert wait.epoch_out_of_reach(11.0, times, 300)
    assert not wait.epoch_out_of_reach(11.0, times, None)  # no length known
    assert not wait.epoch_out_of_reach(6.0, times[:6], 300)  # no pace measured since yet


def test_epochs_follow_the_training_loader() -> None:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    train = DataLoader(TensorDataset(torch.zeros(10, 1)), batch_size=2)
    other = DataLoader(TensorDataset(torch.zeros(4, 1)), batch_size=2)
    ep = Epochs()
    it = iter(train)
    ep.on_iter(train, it, "window")
    next(it)
    next(it)
    assert ep.left() == 3
    ep.on_iter(other, iter(other), "await-eval")  # another loader: no new epoch
    assert not ep.next_epoch
    ep.on_iter(train, iter(train), "await-eval")
    assert ep.next_epoch


EPOCHS = """
import time
import torch
from torch.utils.data import DataLoader, TensorDataset

model = torch.nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
train = DataLoader(TensorDataset(torch.randn(BATCHES * 4, 16)), batch_size=4)
for epoch in range(3):
    for (x,) in train:
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
        time.sleep(SLEEP)
    if EVALUATE:
        model.eval()
        with torch.no_grad():
            out = model(torch.randn(4, 16))
            value = out.sum().item()  # EVAL ITEM
        model.train()
print("DONE", flush=True)
"""


@pytest.mark.slow
def test_an_epoch_longer_than_the_default_seconds_is_waited_for(tmp_path: Path) -> None:
    """About 40 steps of 0.3 s after the window: longer than the 10 s the wait lasted before."""
    script = _write(tmp_path, "ep.py", EPOCHS, BATCHES=45, SLEEP=0.3, EVALUATE=True)
    p = advisor(tmp_path, *FAST, "--no-memory", "-o", "out", script.name, timeout=HANG_S)
    assert p.returncode == 0, p.stderr
    run, findings = outputs(tmp_path / "out")
    ev = run["eval"]
    assert ev["trace_written"] and ev["missing"] is None, ev
    assert ev["wait"]["by_steps"] and ev["wait"]["steps"] >= 35 and ev["wait"]["seconds"] > 10
    assert [p["phase"] for p in findings["run"]["phases"]] == ["train", "eval"]
    # the evaluation phase's .item() is named at its own line, not at the model call above it
    item = EPOCHS.splitlines().index("            value = out.sum().item()  # EVAL ITEM") + 1
    (sync,) = [f for f in findings["findings"] if (f["id"], f["phase"]) == ("sync-point", "eval")]
    assert (sync["locations"][0]["line"], sync["locations"][0]["line_is"]) == (item, "call")


@pytest.mark.slow
def test_an_epoch_out_of_reach_ends_the_wait_at_once(tmp_path: Path) -> None:
    script = _write(tmp_path, "ep.py", EPOCHS, BATCHES=3000, SLEEP=0.02, EVALUATE=True)
    p = advisor(tmp_path, *FAST, "--no-memory", "-o", "out", script.name, timeout=HANG_S)
    assert p.returncode == 0, p.stderr
    run, findings = outputs(tmp_path / "out")
    ev = run["eval"]
    assert ev["missing"] == "epoch-left" and ev["epoch_left"] > EVAL_WAIT_STEPS, ev
    assert ev["wait"]["steps"] < 10  # judged at the second step since the window
    row = findings["run"]["phases"][1]
    assert row["missing"] == "epoch-left" and "more steps than the wait" in row["why"]


@pytest.mark.slow
def test_a_next_epoch_without_evaluation_ends_the_wait(tmp_path: Path) -> None:
    # (the script says "model.eval()" in its text: the wait is not skipped for want of eval code)
    script = _write(tmp_path, "ep.py", EPOCHS, BATCHES=8, SLEEP=0.0, EVALUATE=False)
    p = advisor(tmp_path, *FAST, "--no-memory", "-o", "out", script.name, timeout=HANG_S)
    assert p.returncode == 0, p.stderr
    run, findings = outputs(tmp_path / "out")
    assert run["eval"]["missing"] == "next-epoch", run["eval"]
    assert "DONE" not in p.stdout  # stopped there, not run to its end
    assert findings["run"]["phases"][1]["missing"] == "next-epoch"
