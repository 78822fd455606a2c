"""Third-party detectors: a distribution with an entry point in the ``torch_advisor.detectors``
group is installed into a folder, and ``advisor analyze`` runs its detector (docs/plugins.md);
with ``ADVISOR_NO_PLUGINS=1`` (which the test suite sets) nothing of it shows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from advisor.analysis.detection import ENTRY_POINT_GROUP
from tests.conftest import HANG_S, REPO, SAMPLES

PLUGIN = '''\
"""Demo plugin: one finding per trace, naming how many kernels it holds.

**What it detects.** Nothing real: it shows that a plugin's detector runs.
"""

from advisor.detect import Draft, detector, register_threshold

register_threshold("demo_plugin.min", 1.0, "a threshold of the plugin's")


@detector("demo-plugin", "A detector from another distribution", needs=("shapes",))
def detect(trace, ctx):
    return [Draft(id="demo-plugin", title="Demo plugin ran", est_savings_ms=0.0,
                  confidence="low", summary=f"{len(trace.kernels)} kernels seen by the plugin.",
                  recommendation="Nothing to do.", snippet="")]
'''

BROKEN = "raise RuntimeError('this plugin is broken')\n"


def _package(root: Path, name: str, module: str, body: str, entry: str) -> Path:
    pkg = root / name
    pkg.mkdir()
    (pkg / f"{module}.py").write_text(body)
    (pkg / "pyproject.toml").write_text(
        textwrap.dedent(f"""\
        [build-system]
        requires = ["hatchling"]
        build-backend = "hatchling.build"

        [project]
        name = "{name}"
        version = "0.1"

        [project.entry-points."{ENTRY_POINT_GROUP}"]
        {entry} = "{module}"

        [tool.hatch.build.targets.wheel]
        include = ["{module}.py"]
        """)
    )
    return pkg


@pytest.mark.slow
def test_an_installed_plugin_detector_runs(tmp_path: Path) -> None:
    good = _package(tmp_path, "advisor-demo-plugin", "advisor_demo_plugin", PLUGIN, "demo")
    bad = _package(tmp_path, "advisor-broken-plugin", "advisor_broken_plugin", BROKEN, "broken")
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--no-build-isolation",
            "--target",
            str(target),
            str(good),
            str(bad),
        ],
        check=True,
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(target), str(REPO)]),
        "NO_COLOR": "1",
        "ADVISOR_NO_PLUGINS": "0",
    }
    sample = SAMPLES / "cat_in_loop.cpu.json.gz"  # its golden is compared below
    out = tmp_path / "out"
    r = subprocess.run(
        [sys.executable, "-m", "advisor", "analyze", str(sample), "--out", str(out)],
        env=env,
        text=True,
        capture_output=True,
        timeout=HANG_S,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "findings.json").read_text())
    found = [f for f in doc["findings"] if f["id"] == "demo-plugin"]
    assert len(found) == 1 and "kernels seen by the plugin" in found[0]["summary"]
    # a plugin that cannot be imported is reported, and the others still run
    errored = {e["id"]: e["error"] for e in doc["errored"]}
    assert "this plugin is broken" in errored["broken"]
    # --only knows the plugin's id like a built-in one
    only = subprocess.run(
        [
            sys.executable,
            "-m",
            "advisor",
            "analyze",
            str(sample),
            "--out",
            str(tmp_path / "only"),
            "--only",
            "demo-plugin",
        ],
        env=env,
        text=True,
        capture_output=True,
        timeout=HANG_S,
    )
    assert only.returncode == 0, only.stderr
    ids = [
        f["id"] for f in json.loads((tmp_path / "only" / "findings.json").read_text())["findings"]
    ]
    assert ids == ["demo-plugin"]
    # ignored: the findings.json of a plugin-free environment (the golden), nothing of the plugin
    quiet = subprocess.run(
        [sys.executable, "-m", "advisor", "analyze", str(sample), "--out", str(tmp_path / "q")],
        env={**env, "ADVISOR_NO_PLUGINS": "1"},
        text=True,
        capture_output=True,
        timeout=HANG_S,
    )
    assert quiet.returncode == 0, quiet.stderr
    text = (tmp_path / "q" / "findings.json").read_text()
    assert "demo" not in text and "broken" not in text
    golden = json.loads((REPO / "tests" / "golden" / "cat_in_loop.cpu.findings.json").read_text())
    got = json.loads(text)
    for key in ("findings", "skipped", "errored", "thresholds"):
        assert got[key] == golden[key], key
    assert got["views"]["detectors"] == golden["views"]["detectors"]
