"""``advisor profile`` on the frameworks people train with (``examples/frameworks/``): a Hugging
Face Trainer, a Lightning ``fit`` and an accelerate loop, each skipped when its framework is not
installed (``pip install -e '.[frameworks]'``; CI does not install them: see README).

One run per framework, with 2 DataLoader workers (``--json``: stdout must be the findings
alone while the Trainer prints its logs): the training steps and the evaluation phase found,
the framework's setting named for its own syncs, the right DataLoader lines and batch sizes,
no preprocessing finding on the framework's bookkeeping.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples" / "frameworks"
pytestmark = pytest.mark.slow


def _have(*mods: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in mods)


def _lightning() -> bool:
    return _have("lightning") or _have("pytorch_lightning")


def _profile(tmp: Path, script: str, *args: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    """Run ``advisor profile --json`` on an example with 2 workers; (findings read from
    stdout, run.json, stderr)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(OMP_NUM_THREADS="1", NO_COLOR="1", CUDA_VISIBLE_DEVICES="", HF_HUB_OFFLINE="1")
    out = tmp / script
    p = subprocess.run(
        [sys.executable, "-m", "advisor", "profile", "--json", "--eval-wait", "120"]
        + ["--out", str(out), str(EXAMPLES / f"{script}.py"), "--steps", "12", "--workers", "2"]
        + list(args),
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    findings = json.loads(p.stdout)  # stdout holds the JSON alone
    run = json.loads((out / "run.json").read_text())
    return findings, run, p.stderr


def _phases(findings: dict[str, Any]) -> dict[str, int]:
    return {ph["phase"]: ph["steps_profiled"] for ph in findings["run"]["phases"]}


def _no_preprocessing_on_framework_work(findings: dict[str, Any]) -> None:
    for f in findings["findings"]:
        if f["id"] == "host-preprocessing":
            assert not f["title"].startswith("Preprocessing"), f["summary"]
            assert "num_workers" not in f["recommendation"]


@pytest.mark.skipif(not _have("transformers", "accelerate"), reason="transformers not installed")
def test_hf_trainer(tmp_path: Path) -> None:
    findings, run, err = _profile(tmp_path, "hf_trainer")
    assert "'loss'" in err  # the Trainer's own log lines went to stderr
    assert _phases(findings).get("train", 0) >= 3 and _phases(findings).get("eval", 0) >= 1
    syncs = [f for f in findings["findings"] if f["id"] == "sync-point"]
    assert syncs and "logging_nan_inf_filter=False" in syncs[0]["recommendation"]
    assert "transformers/trainer.py" in syncs[0]["summary"]  # the framework frame named
    _no_preprocessing_on_framework_work(findings)
    assert not findings["run"]["trace_quality"]  # the stop's optimizer step changes nothing


@pytest.mark.skipif(not _lightning(), reason="lightning not installed")
def test_lightning_fit(tmp_path: Path) -> None:
    findings, run, _ = _profile(tmp_path, "lightning_train")
    assert _phases(findings).get("train", 0) >= 3 and _phases(findings).get("eval", 0) >= 1
    syncs = [f for f in findings["findings"] if f["id"] == "sync-point" and "phase" not in f]
    assert syncs and "prog_bar=False" in syncs[0]["recommendation"]
    _no_preprocessing_on_framework_work(findings)
    # the sanity check iterates the validation loader before training: it is the eval loader
    src = (EXAMPLES / "lightning_train.py").read_text().splitlines()
    line = {r["phase"]: r["line"] for r in run["dataloaders"]}
    assert src[line["train"] - 1].strip().startswith("train_loader = DataLoader(")
    assert src[line["eval"] - 1].strip().startswith("val_loader = DataLoader(")


@pytest.mark.skipif(not _have("accelerate"), reason="accelerate not installed")
def test_accelerate_loop(tmp_path: Path) -> None:
    findings, run, _ = _profile(tmp_path, "accelerate_loop")
    assert _phases(findings).get("train", 0) >= 3 and _phases(findings).get("eval", 0) >= 1
    src = (EXAMPLES / "accelerate_loop.py").read_text().splitlines()
    rows = {r["phase"]: r for r in run["dataloaders"]}
    # the prepared loaders are named at the user's DataLoader(...) lines, with the batch size
    assert src[rows["train"]["line"] - 1].strip().startswith("train_loader = DataLoader(")
    assert src[rows["eval"]["line"] - 1].strip().startswith("eval_loader = DataLoader(")
    assert rows["train"]["batch_size"] == rows["eval"]["batch_size"] == 32
    _no_preprocessing_on_framework_work(findings)
