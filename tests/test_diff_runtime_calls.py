"""advisor diff explains with the runtime calls: syncs, copies by direction and memory (their
bandwidth, the share under compute, the host time of their calls), launches, allocator calls."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.analysis.pipeline import Options
from advisor.derive.callstats import call_kind, runtime_calls
from advisor.derive.steps import steady_trace
from advisor.multirank.diff import diff_sides, load_side
from advisor.trace import load_trace
from tests.diff_builders import ab_run


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("cudaStreamSynchronize", "sync"),
        ("hipDeviceSynchronize", "sync"),
        ("cudaLaunchKernel", "launch"),
        ("hipExtModuleLaunchKernel", "launch"),
        ("cudaGraphLaunch", "graph-launch"),
        ("cudaMalloc", "alloc"),
        ("cudaHostAlloc", "alloc"),
        ("cudaMemcpyAsync", "copy"),
        ("cudaMallocAsync", None),  # stream-ordered: from a pool
        ("cudaEventRecord", None),
    ],
)
def test_call_kinds(name: str, kind: str | None) -> None:
    assert call_kind(name) == kind


def test_calls_and_copies_per_step(tmp_path: Path) -> None:
    t = steady_trace(load_trace(ab_run(tmp_path / "a.json")))
    rc = runtime_calls(t)
    calls = {(c.kind, c.name): c for c in rc.calls}
    assert calls[("sync", "cudaStreamSynchronize")].count == 1.0
    assert calls[("sync", "cudaStreamSynchronize")].host_ms == pytest.approx(0.5)
    assert calls[("launch", "cudaLaunchKernel")].count == 1.0
    (copy,) = rc.copies
    assert (copy.kind, copy.src, copy.dst) == ("DtoH", "Device", "Pageable")
    assert copy.bytes == 1 << 20 and copy.gpu_ms == pytest.approx(0.5)
    assert copy.overlap_pct == 0.0


def test_a_sync_count_change_and_pinned_copies_are_named(tmp_path: Path) -> None:
    """A: a pageable device-to-host copy then a stream sync each step; B: pinned, no sync."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = ab_run(tmp_path / "a" / "t.json")
    b = ab_run(tmp_path / "b" / "t.json", sync=False, dtoh="Pinned")
    d = diff_sides(load_side(a, Options()), load_side(b, Options()))
    rt = d["runtime"]
    syncs = {c["name"]: c for c in rt["calls"] if c["kind"] == "sync"}
    assert syncs["cudaStreamSynchronize"]["a"]["count"] == 1.0
    assert syncs["cudaStreamSynchronize"]["b"]["count"] == 0.0
    ch = rt["changes"]
    assert any(c.startswith("syncs: 1 -> 0 per step (cudaStreamSynchronize 1 -> 0)") for c in ch)
    moved = [c for c in ch if c.startswith("device-to-host copies moved from")]
    assert moved and "Device -> Pinned" in moved[0] and "10.5 GB/s" in moved[0]
    copies = {(c["src"], c["dst"]): c for c in rt["copies"]}
    assert copies[("Device", "Pageable")]["b"] is None
    assert copies[("Device", "Pinned")]["b"]["gbps"] == pytest.approx(10.49, abs=0.01)
    # the same run against itself: nothing to say
    same = diff_sides(load_side(a, Options()), load_side(a, Options()))
    assert same["runtime"]["changes"] == []
