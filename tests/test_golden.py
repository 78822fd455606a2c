"""Golden findings.json for every trace in sample_traces/ (regenerate: UPDATE_GOLDEN=1 pytest ...).

Volatile fields (the trace path, the advisor version) are normalized; everything else, the ranking,
savings and texts included, must match exactly, so a detector change shows up as a reviewable diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from advisor.analysis.pipeline import analyze_path
from tests.conftest import REPO, SAMPLES

GOLDEN = REPO / "tests" / "golden"
SAMPLE_FILES = sorted(SAMPLES.glob("*.json.gz"))


def normalized(path: Path) -> dict:
    _, report = analyze_path(path)
    data = json.loads(report.to_json())
    data["advisor_version"] = "X"
    data["run"]["trace"] = path.name
    return data


@pytest.mark.parametrize("sample", SAMPLE_FILES or [None], ids=lambda p: p.name if p else "none")
def test_golden_findings(sample: Path | None) -> None:
    if sample is None:
        pytest.skip("no sample traces")
    golden = GOLDEN / (sample.name.removesuffix(".json.gz") + ".findings.json")
    got = normalized(sample)
    assert got["errored"] == [], (
        "a detector errored on a sample trace; never bake that into a golden"
    )
    if os.environ.get("UPDATE_GOLDEN") or not golden.exists():
        if not os.environ.get("UPDATE_GOLDEN"):
            pytest.fail(f"missing golden file {golden.name}; run with UPDATE_GOLDEN=1")
        golden.write_text(json.dumps(got, indent=2, sort_keys=True) + "\n")
    want = json.loads(golden.read_text())
    assert got == want
