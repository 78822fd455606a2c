"""The flagship detectors are registered, documented for the report, and declare thresholds."""

from __future__ import annotations

import pytest

from advisor.analysis.detection import all_detectors
from advisor.detect.thresholds import THRESHOLDS

IDS = [
    "sync-point",
    "tiny-kernels",
    "fp32-matmul",
    "misaligned-dims",
    "gpu-idle",
    "dataloader-stall",
]
SECTIONS = [
    "**What it detects.**",
    "**Why it costs time.**",
    "**How the saving is estimated.**",
    "**How to fix.**",
    "**Known false positives.**",
]


@pytest.mark.parametrize("det_id", IDS)
def test_registered_documented_with_thresholds(det_id: str) -> None:
    det = {d.id: d for d in all_detectors()}[det_id]
    for section in SECTIONS:
        assert section in det.doc, (det_id, section)
    mod = det_id.replace("-", "_")
    assert det.func.__module__ == "advisor.detectors." + mod
    assert any(k.startswith(mod + ".") for k in THRESHOLDS), det_id
    gpu_only = {"tiny-kernels", "fp32-matmul", "gpu-idle"}
    assert det.gpu_only == (det_id in gpu_only)
