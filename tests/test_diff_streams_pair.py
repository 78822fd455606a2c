"""advisor diff on GPUPuzzlers' streams pair (blocking -> non_blocking copies, the script
renamed between the two runs): the explanation names the syncs that went and the pinned
device-to-host copies, no finding is both new and resolved, and what is left is listed."""

from __future__ import annotations

import pytest

from advisor.analysis.pipeline import Options
from advisor.multirank.diff import diff_sides, load_side, near_pass
from tests.conftest import shared_trace


@pytest.mark.shared
def test_blocking_to_non_blocking_copies() -> None:
    a_path = shared_trace("gpupuzzlers/streams/blocking_streams.json.gz")
    b_path = shared_trace("gpupuzzlers/streams/non_blocking_streams.json.gz")
    opts = Options()
    a, b = load_side(a_path, opts), load_side(b_path, opts)
    d = diff_sides(a, b, near=near_pass(a_path, b_path, opts))
    st = d["step_ms_median"]
    assert st["a"] == pytest.approx(274.34, abs=0.01) and st["b"] == pytest.approx(196.96, abs=0.01)
    assert d["verdict"].startswith("B is 28.2% faster per step (274.34 -> 196.96 ms)")
    # the runtime calls: 200 stream syncs per step gone, device-to-host copies now pinned
    ch = d["runtime"]["changes"]
    assert any(
        c.startswith("syncs: 201 -> 1 per step (cudaStreamSynchronize 200 -> 0)") for c in ch
    )
    (moved,) = [c for c in ch if c.startswith("device-to-host copies moved from")]
    assert "Device -> Pageable (100 per step, 5.1 GB/s)" in moved
    assert "Device -> Pinned (100 per step, 12.5 GB/s)" in moved
    assert any(
        "host-to-device copies (Pageable -> Device) under compute: 0% -> 43%" in c for c in ch
    )
    # each run's bound is its report's (advisor.replay.bound), and a flip is said
    bound = d["bound"]
    assert (bound["a"], bound["b"]) == (a.report.run.bound.by, b.report.run.bound.by)  # type: ignore[union-attr]
    assert bound["flipped"] == (bound["a"] != bound["b"])
    assert ("the step was bound by" in d["verdict"]) == bound["flipped"]
    # the script was renamed (streams3_blocking.py -> streams3_non_blocking.py): no finding is
    # both new and resolved
    fd = d["findings"]
    new, resolved = {e["id"] for e in fd["new"]}, {e["id"] for e in fd["resolved"]}
    assert not new & resolved
    assert "sync-point" in resolved
    changed = {e["id"]: e for e in fd["changed"]}
    assert changed["fp32-matmul"]["a_location"] == "streams3_blocking.py:4"
    assert changed["pageable-memcpy"]["severity"] == {"a": "medium", "b": "info"}
    # what is left: the blocking host-to-device copies from pageable memory, listed
    left = fd["still_to_fix"]
    assert [e["id"] for e in left] == ["blocking-copy", "fp32-matmul"]
    assert left[0]["est_savings_ms"]["b"] == pytest.approx(56.1, abs=0.1)
    assert left[0]["listed_under"] == {"a": "sync-point", "b": None}
    assert d["verdict"].endswith("2 still to fix")
