"""activation-recompute, host-preprocessing, compile-graph-breaks and compile-recompiles are
registered, documented for the report (the five docstring sections) and listed in README.md,
examples/README.md and docs/savings.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.analysis.detection import all_detectors

REPO = Path(__file__).resolve().parent.parent
IDS = ["activation-recompute", "host-preprocessing", "compile-graph-breaks", "compile-recompiles"]
SECTIONS = [
    "**What it detects.**",
    "**Why it costs time.**",
    "**How the saving is estimated.**",
    "**How to fix.**",
    "**Known false positives.**",
]


@pytest.mark.parametrize("det_id", IDS)
def test_registered_documented_and_listed(det_id: str) -> None:
    det = {d.id: d for d in all_detectors()}[det_id]
    assert all(s in det.doc for s in SECTIONS), det_id
    assert det.func.__module__ == "advisor.detectors." + det_id.replace("-", "_")
    assert not det.gpu_only  # each fires on a CPU run of its example
    for doc in ("README.md", "examples/README.md", "docs/savings.md"):
        assert f"`{det_id}`" in (REPO / doc).read_text(encoding="utf-8"), (doc, det_id)
