"""Issue 31 item 4: nothing a plugin's detector does takes the analysis down. Each hostile
detector is given to a real ``advisor analyze --detector`` process: the command exits 0, writes
findings.json and report.html, and the detector lands under ``errored`` with a one-line reason;
the built-in findings are unchanged."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import HANG_S, SAMPLES
from tests.test_profile import _env

SAMPLE = SAMPLES / "sync_point.cpu.json.gz"
LIMIT_S = 2  # ADVISOR_PLUGIN_TIMEOUT for these runs

HEAD = '''"""A hostile plugin."""
import sys, time
from advisor.detect import Draft, detector

def draft(**kw):
    base = dict(id="evil", title="t", est_savings_ms=1.0, confidence="low", summary="s",
                recommendation="r", snippet="")
    base.update(kw)
    return Draft(**base)

@detector("evil", "A hostile plugin")
def detect(trace, ctx):
'''

CASES = {
    "returns-none": ("    return None\n", "returned NoneType, expected a list of Draft"),
    "returns-str": ("    return 'oops'\n", "returned str, expected a list of Draft"),
    "returns-ints": ("    return [1, 2, 3]\n", "item 0 is int, expected a Draft"),
    "sys-exit": ("    sys.exit(42)\n", "SystemExit: 42"),
    "base-exception": (
        "    class Boom(BaseException): pass\n    raise Boom('down')\n",
        "Boom: down",
    ),
    "sleeps": ("    time.sleep(10**6)\n", "still running after"),
    "yields-forever": (
        "    while True:\n        yield draft()\n",
        "returned generator, expected a list of Draft",
    ),
    "spins": ("    while True:\n        pass\n", "still running after"),
    "banana": ("    return [draft(confidence='banana')]\n", "confidence 'banana'"),
    "nan-saving": ("    return [draft(est_savings_ms=float('nan'))]\n", "est_savings_ms"),
    "other-id": ("    return [draft(id='sync-point')]\n", "id 'sync-point'"),
}


def _run(tmp: Path, body: str) -> tuple[subprocess.CompletedProcess[str], float]:
    det = tmp / "evil.py"
    det.write_text(HEAD + body)
    t0 = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "advisor", "analyze", str(SAMPLE), "--detector", str(det)]
        + ["--out", str(tmp / "o")],
        env={**_env(), "ADVISOR_PLUGIN_TIMEOUT": str(LIMIT_S)},
        capture_output=True,
        text=True,
        timeout=HANG_S,  # (a detector that sleeps for ever would hang it: the limit ends it)
    )
    return p, time.monotonic() - t0


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_hostile_detector_lands_in_errored(tmp_path: Path, case: str) -> None:
    body, message = CASES[case]
    p, _ = _run(tmp_path, body)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "o" / "report.html").is_file()
    doc = json.loads((tmp_path / "o" / "findings.json").read_text())
    errored = {e["id"]: e["error"] for e in doc["errored"]}
    assert message in errored.get("evil", ""), doc["errored"]
    assert "\n" not in errored["evil"]
    assert all(f["id"] != "evil" for f in doc["findings"])
    # the built-in findings are those of a run without the plugin
    ids = [f["id"] for f in doc["findings"]]
    assert ids.count("sync-point") == 1


def test_a_plugin_cannot_take_a_built_in_id(tmp_path: Path) -> None:
    det = tmp_path / "thief.py"
    det.write_text(
        "from advisor.detect import across_ranks, detector\n"
        "@detector('sync-point', 'Mine now')\n"
        "def detect(trace, ctx):\n    return []\n"
    )
    thief2 = tmp_path / "thief2.py"
    thief2.write_text(
        "from advisor.detect import across_ranks\n"
        "@across_ranks('sync-point')\n"
        "def check(drafts, digests, ctx):\n    return []\n"
    )
    p = subprocess.run(
        [sys.executable, "-m", "advisor", "analyze", str(SAMPLE), "--out", str(tmp_path / "o")]
        + ["--detector", str(det), "--detector", str(thief2)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert p.returncode == 0, p.stderr
    doc = json.loads((tmp_path / "o" / "findings.json").read_text())
    errored = {e["id"]: e["error"] for e in doc["errored"]}
    assert "'sync-point' is a built-in detector's id" in errored[str(det)]
    assert "'sync-point' is a built-in detector's id" in errored[str(thief2)]
    assert doc["views"]["detectors"]["sync-point"]["title"] != "Mine now"


def test_an_import_that_exits(tmp_path: Path) -> None:
    det = tmp_path / "exits.py"
    det.write_text("import sys\nsys.exit(3)\n")
    p = subprocess.run(
        [sys.executable, "-m", "advisor", "analyze", str(SAMPLE), "--out", str(tmp_path / "o")]
        + ["--detector", str(det)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert p.returncode == 0, p.stderr
    doc = json.loads((tmp_path / "o" / "findings.json").read_text())
    assert "SystemExit: 3" in {e["id"]: e["error"] for e in doc["errored"]}[str(det)]


def test_the_time_limit_ends_the_detector_not_the_run(tmp_path: Path) -> None:
    p, took = _run(tmp_path, "    time.sleep(10**6)\n")
    assert p.returncode == 0, p.stderr
    # it finished at all: the detector sleeps for 10**6 s and the limit stopped waiting for it
    assert took < 10**6
