"""``advisor try``'s sanity check: a measured saving larger than the whole cause the fix removes
(the most its findings' replays give back) is the machine changing, and the verdict says so
(mnist under load: 540 ms "saved" by DataLoader workers against a 150 ms estimate, 3-4x the whole
loader wait the before runs measured, was called "faster")."""

from __future__ import annotations

from advisor.findings import Finding
from advisor.profile.trial.compare import RunData, cause_ms, compare
from advisor.runcapture import Try
from advisor.tryresult import FASTER, MACHINE_CHANGED


def _stall(ms: float, high: float | None) -> Finding:
    return Finding.from_dict(
        {
            "id": "dataloader-stall",
            "title": "t",
            "severity": "high",
            "est_savings_ms": ms,
            "est_savings_pct": 10.0,
            "est_savings_range_ms": None if high is None else [ms / 2, high],
            "confidence": "high",
            "summary": "s",
            "recommendation": "r",
        }
    )


def _runs(before: list[float], after: list[float], found: list[Finding]) -> tuple[RunData, RunData]:
    b = RunData("before", (), findings=found)
    a = RunData("after", ("dataloader-stall",), trial=Try(counts={"dataloader-stall": {"n": 1}}))
    for rnd in (1, 2):
        b.add_steps(rnd, before)
        a.add_steps(rnd, after)
    return b, a


def test_a_saving_larger_than_its_cause_is_the_machine_changing() -> None:
    found = [_stall(150.0, 160.0)]
    b, a = _runs([1000.0, 1002.0, 998.0], [460.0, 461.0, 459.0], found)
    row = compare(b, a, {"dataloader-stall"}, 1e-3)
    assert row.measured_saving_ms == 540.0 and row.estimated_saving_ms == 150.0
    assert row.verdict == MACHINE_CHANGED
    assert "160.00 ms" in (row.verdict_why or "") and "machine" in (row.verdict_why or "")
    # the same fix saving what its cause takes is a plain "faster"
    b, a = _runs([1000.0, 1002.0, 998.0], [850.0, 851.0, 849.0], found)
    assert compare(b, a, {"dataloader-stall"}, 1e-3).verdict == FASTER


def test_the_cause_is_the_high_end_of_the_range_else_the_estimate_capped_at_the_step() -> None:
    assert cause_ms([_stall(150.0, 160.0)], {"dataloader-stall"}, 1000.0) == 160.0
    assert cause_ms([_stall(150.0, None)], {"dataloader-stall"}, 1000.0) == 150.0
    assert cause_ms([_stall(150.0, 160.0)] * 2, {"dataloader-stall"}, 200.0) == 200.0
    assert cause_ms([_stall(150.0, 160.0)], {"sync-point"}, 1000.0) is None


def test_noise_keeps_a_saving_near_its_cause_faster() -> None:
    """Within the noise band above the cause, the verdict is not overturned."""
    found = [_stall(10.0, 10.0)]
    b, a = _runs([100.0, 110.0, 90.0, 105.0, 95.0], [89.0, 99.0, 79.0, 94.0, 84.0], found)
    row = compare(b, a, {"dataloader-stall"}, 1e-3)
    assert row.measured_saving_ms == 11.0 and row.verdict == FASTER
