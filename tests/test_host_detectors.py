"""host-overhead, allocator-churn and optimizer-host-time: registered and documented, and silent
where nothing is wrong (the CPU-only sample traces, the num_workers=4 ResNet-50 traces)."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.analysis.detection import all_detectors
from advisor.analysis.pipeline import Options, analyze_trace
from advisor.detect.thresholds import THRESHOLDS
from advisor.trace import load_trace
from tests.conftest import shared_trace
from tests.detector_helpers import found

IDS = frozenset({"host-overhead", "allocator-churn", "optimizer-host-time"})
SAMPLES = sorted((Path(__file__).parent.parent / "sample_traces").glob("*.cpu.json.gz"))  # CPU-only
NW4 = [
    "kineto/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz",
    "kineto/resnet50_num_workers_4/worker0.1623213129365.pt.trace.json.gz",
]


def test_gpu_only_with_thresholds() -> None:
    """(Their docs, modules and README rows: tests/test_detector_contract.py.)"""
    dets = [d for d in all_detectors() if d.id in IDS]
    assert len(dets) == len(IDS) and all(d.gpu_only for d in dets)
    for d in dets:
        assert any(k.startswith(d.id.replace("-", "_") + ".") for k in THRESHOLDS)


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
