"""pageable-memcpy: host-to-device copies from pageable memory."""

from __future__ import annotations

import pytest

from tests.detector_helpers import analyze, found, htod, one, skip_reason
from tests.tracebuilder import TraceBuilder

ID = "pageable-memcpy"
MB16 = 16_000_000


def _trace(
    src: str = "Pageable",
    nbytes: int = MB16,
    dur: float = 3000.0,
    steps: int = 3,
    pinned_probe: float | None = None,
    cc: tuple[int, int] = (8, 0),
) -> TraceBuilder:
    b = TraceBuilder(cc=cc)
    for i in range(steps):
        t0 = i * 10_000.0
        b.step(i + 1, t0, 10_000)
        htod(b, t0 + 100, nbytes, dur, src=src, shape=[1000, 4000])
        if pinned_probe is not None:
            htod(b, t0 + 5000, MB16, pinned_probe, src="Pinned", call_dur=10, sync=False)
    return b


def test_fires_with_assumed_pinned_bandwidth() -> None:
    f = one(analyze(_trace().load(), ID), ID)
    # pageable 16 MB / 3 ms = 5.33 GB/s; assumed pinned 2x = 10.67 GB/s (below the 24 GB/s cap)
    pinned_us = 10 + MB16 / (2 * MB16 / 3000.0 / 1000.0) / 1000.0
    assert f.est_savings_ms == pytest.approx((3000 - pinned_us) / 1000, abs=0.002)
    assert f.confidence == "medium"
    assert "1 host-to-device copy" in f.summary and "16.0 MB" in f.summary
    assert f.evidence[0].count == 3 and f.evidence[0].total_ms == pytest.approx(9.0)
    assert any("2x the measured pageable" in a for a in f.assumptions)


def test_pinned_bandwidth_measured_in_the_trace_wins() -> None:
    f = one(analyze(_trace(pinned_probe=800.0).load(), ID), ID)
    assert f.confidence == "high"
    assert f.est_savings_ms == pytest.approx((3000 - 810) / 1000, abs=0.002)
    assert any("measured on 3 pinned copies" in a for a in f.assumptions)


def test_link_cap_by_gpu_generation() -> None:
    # V100 (7.0): pinned capped at 12 GB/s -> 16 MB takes 1.333 ms + 10 us
    f = one(analyze(_trace(dur=2000.0, cc=(7, 0)).load(), ID), ID)
    assert f.est_savings_ms == pytest.approx(2.0 - 1.3433, abs=0.002)


def test_run_json_names_the_unpinned_dataloader() -> None:
    run = {
        "dataloaders": [
            {
                "pin_memory": False,
                "num_workers": 0,
                "batch_size": 32,
                "file": "train.py",
                "line": 17,
            }
        ]
    }
    f = one(analyze(_trace().load(), ID, run), ID)
    assert f.locations[0].file == "train.py" and f.locations[0].line == 17
    assert "pin_memory=False" in f.summary


def test_no_finding_for_pinned_or_small_copies() -> None:
    assert not found(analyze(_trace(src="Pinned").load(), ID), ID)
    assert not found(analyze(_trace(nbytes=256, dur=2.0).load(), ID), ID)


def test_no_finding_when_pageable_copies_already_run_at_pinned_speed() -> None:
    # measured pinned copies are no faster than the pageable ones: nothing to gain
    assert not found(analyze(_trace(pinned_probe=3000.0).load(), ID), ID)


def test_threshold_override() -> None:
    rep = analyze(_trace().load(), ID, overrides={"pageable_memcpy.min_bytes_per_step": 1e9})
    assert not found(rep, ID)


def test_cpu_only_trace_is_skipped() -> None:
    b = TraceBuilder(cc=None)
    b.step(1, 0, 1000)
    b.op("aten::to", 10, 100, dims=[[1000, 4000]])
    rep = analyze(b.load(), ID)
    assert not found(rep, ID)
    assert skip_reason(rep, ID) == "no GPU activity in this trace"
