"""host-overhead, allocator-churn and optimizer-host-time stay silent where nothing is wrong:
the CPU-only sample traces and the num_workers=4 ResNet-50 traces (issue 17)."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.pipeline import Options, analyze_trace
from advisor.trace import load_trace
from tests.checklist_a_helpers import found
from tests.conftest import shared_trace

IDS = frozenset({"host-overhead", "allocator-churn", "optimizer-host-time"})
SAMPLES = sorted((Path(__file__).parent.parent / "sample_traces").glob("*.json.gz"))
NW4 = [
    "kineto/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz",
    "kineto/resnet50_num_workers_4/worker0.1623213129365.pt.trace.json.gz",
]


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
