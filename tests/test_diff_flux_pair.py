"""advisor diff on xDiT Flux, aiter attention -> Sage attention: the same work, 5.6% slower,
explained by the kernels Sage attention adds; no finding appears on one side only because the
host's quiet frames were read differently (the crossing of a reporting floor itself is held by
tests/test_diff_findings_match.py on built reports)."""

from __future__ import annotations

import pytest

from advisor.analysis.pipeline import Options
from advisor.multirank.diff import diff_sides, load_side, near_pass
from tests.conftest import shared_trace


@pytest.mark.shared
def test_sage_attention_adds_its_quantization() -> None:
    xdit = "tracelens/xdit/flux_aiter"
    a_path = shared_trace(f"{xdit}_profile_trace_rank_0.json.gz")
    b_path = shared_trace(f"{xdit}_sage_profile_trace_rank_0.json.gz")
    opts = Options()
    d = diff_sides(
        load_side(a_path, opts), load_side(b_path, opts), near=near_pass(a_path, b_path, opts)
    )
    assert d["step_ms_median"]["delta_ms"] == pytest.approx(41.4, abs=0.1)
    assert d["workload"]["differs"] is False  # the same shapes: the same work
    fd = d["findings"]
    ids = {e["id"] for k in ("new", "resolved", "changed", "unchanged") for e in fd[k]}
    # reported on neither side: the host's quiet frames are read by what they do (_hostwork)
    assert "host-preprocessing" not in ids
    assert not fd["resolved"]
    # device copies grew far more than 2x: new
    assert "device-copies" in {e["id"] for e in fd["new"]}
    assert d["verdict"].startswith("B is 5.6% slower per step (742.43 -> 783.81 ms)")
