"""Checklist-A detectors are registered and documented for the report."""

from __future__ import annotations

import pytest

from advisor.analysis.detection import all_detectors

IDS = [
    "pageable-memcpy",
    "blocking-copy",
    "host-tensor-creation",
    "zero-grad-not-none",
    "conv-bias-before-bn",
    "channels-last",
    "cudnn-benchmark",
]
SECTIONS = [
    "**What it detects.**",
    "**Why it costs time.**",
    "**How the saving is estimated.**",
    "**How to fix.**",
    "**Known false positives.**",
]


@pytest.mark.parametrize("det_id", IDS)
def test_registered_with_user_facing_doc(det_id: str) -> None:
    det = {d.id: d for d in all_detectors()}[det_id]
    for section in SECTIONS:
        assert section in det.doc, (det_id, section)
    assert det.func.__module__ == "advisor.detectors." + det_id.replace("-", "_")
