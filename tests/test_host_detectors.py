"""host-overhead, allocator-churn and optimizer-host-time: registered and documented, and silent
where nothing is wrong (the CPU-only sample traces, the num_workers=4 ResNet-50 traces)."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.analysis.detection import all_detectors
from advisor.analysis.pipeline import Options, analyze_trace
from advisor.detect.thresholds import THRESHOLDS
from advisor.trace import load_trace
from tests.checklist_a_helpers import found
from tests.conftest import shared_trace

IDS = frozenset({"host-overhead", "allocator-churn", "optimizer-host-time"})
SAMPLES = sorted((Path(__file__).parent.parent / "sample_traces").glob("*.cpu.json.gz"))  # CPU-only
NW4 = [
    "kineto/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz",
    "kineto/resnet50_num_workers_4/worker0.1623213129365.pt.trace.json.gz",
]


SECTIONS = [
    "**What it detects.**",
    "**Why it costs time.**",
    "**How the saving is estimated.**",
    "**How to fix.**",
    "**Known false positives.**",
]


@pytest.mark.parametrize("det_id", sorted(IDS))
def test_registered_documented_and_listed(det_id: str) -> None:
    det = {d.id: d for d in all_detectors()}[det_id]
    assert all(s in det.doc for s in SECTIONS), det_id
    mod = det_id.replace("-", "_")
    assert det.func.__module__ == "advisor.detectors." + mod and det.gpu_only
    assert any(k.startswith(mod + ".") for k in THRESHOLDS)
    readme = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
    assert f"| `{det_id}` |" in readme


@pytest.mark.parametrize("path", SAMPLES, ids=[p.name for p in SAMPLES])
def test_silent_on_cpu_only_samples(path: Path) -> None:
    rep = analyze_trace(load_trace(path), None, Options(only=IDS))
    assert not rep.errored
    assert not [f for f in rep.findings if f.id in IDS]
    assert {s.id for s in rep.skipped} >= IDS  # GPU-only checks: skipped with a reason


@pytest.mark.shared
@pytest.mark.parametrize("rel", NW4)
def test_silent_on_resnet50_num_workers_4(rel: str) -> None:
    rep = analyze_trace(load_trace(shared_trace(rel)), None, Options(only=IDS))
    assert not rep.errored
    for det in IDS:
        assert not found(rep, det), det
