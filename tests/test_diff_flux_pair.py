"""advisor diff on xDiT Flux, aiter attention -> Sage attention: a finding B reports that A had
just under its reporting floor is a change of its value, not a new finding."""

from __future__ import annotations

import pytest

from advisor.analysis.pipeline import Options
from advisor.multirank.diff import diff_sides, load_side, near_pass
from tests.conftest import shared_trace


@pytest.mark.shared
def test_host_preprocessing_crossed_its_floor() -> None:
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
    assert "host-preprocessing" not in {e["id"] for e in fd["new"]}
    (hp,) = [e for e in fd["changed"] if e["id"] == "host-preprocessing"]
    assert hp["under_floor"] == "a" and hp["severity"]["a"] is None
    assert hp["est_savings_ms"]["a"] < hp["est_savings_ms"]["b"]
    assert hp["change"].startswith("grew ") and hp["change"].endswith("in B only")
    # device copies grew far more than 2x: new
    assert "device-copies" in {e["id"] for e in fd["new"]}
    assert d["verdict"].startswith("B is 5.6% slower per step (742.43 -> 783.81 ms)")
