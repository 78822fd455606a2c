"""What the analysis reads of a draft beside its saving are typed fields of ``Draft``
(advisor/detect/draft.py): ``claims``, ``steps_seen``, ``related``. A plugin's draft that still
hands them over in ``extra`` (before they were fields) has them read once, as those fields
(advisor/analysis/isolation.py); a value of another type in a field is refused."""

from __future__ import annotations

import numpy as np
import pytest

from advisor.analysis.isolation import check_drafts
from advisor.analysis.merge import one_row_per_cause
from advisor.analysis.ranking import finalize
from advisor.detect import Draft
from advisor.detect.thresholds import Thresholds
from advisor.findings import Finding, Related
from advisor.multirank.merge import _as_draft
from advisor.replay.claims import Claims
from tests.tracebuilder import TraceBuilder


def _draft(**kw: object) -> Draft:
    fields: dict[str, object] = {"est_savings_ms": 2.0, **kw}
    return Draft(
        "p", "title", confidence="medium", summary="s.", recommendation="r", snippet="", **fields
    )


ROW = Related("q", "other", 1.0, "its summary", 80.0)


def test_the_fields_default_to_nothing_and_extra_stays_empty() -> None:
    d = _draft()
    assert (d.claims, d.steps_seen, d.related, d.extra) == (None, None, (), {})


def test_steps_seen_below_the_minimum_claims_nothing_per_step() -> None:
    f = finalize(_draft(steps_seen=1), 10.0, Thresholds({}))
    assert f.est_savings_ms == 0.0 and f.severity == "info"
    assert "Seen in 1 steady step:" in f.summary
    assert finalize(_draft(steps_seen=5), 10.0, Thresholds({})).est_savings_ms == 2.0


def test_related_reaches_the_finding() -> None:
    assert finalize(_draft(related=(ROW,)), 10.0, Thresholds({})).related == (ROW,)


def test_claims_given_by_the_draft_are_the_ones_merged() -> None:
    """A draft without a fix but with claims of its own takes part in one row per cause."""
    b = TraceBuilder()
    for s in range(3):
        b.step(s + 1, s * 1000.0, 1000)
        op = b.op("aten::mm", s * 1000.0 + 5, 8)
        b.launch(op, "cudaLaunchKernel", s * 1000.0 + 6, 4, "k", s * 1000.0 + 50, 400)
    trace = b.load()
    rows = np.arange(len(trace.kernels), dtype=np.int64)
    wide = _draft(claims=Claims(kernels=rows), est_savings_ms=3.0)
    narrow = Draft(
        "q",
        "other",
        est_savings_ms=1.0,
        confidence="medium",
        summary="s.",
        recommendation="r",
        snippet="",
        claims=Claims(kernels=rows),
    )
    (lead,) = one_row_per_cause(trace, [wide, narrow], Thresholds({}))
    assert lead.id == "p" and [r.id for r in lead.related] == ["q"]
    assert "related" not in lead.extra


def test_a_findings_related_rows_come_back_as_the_drafts_field() -> None:
    f = Finding(
        id="p",
        title="t",
        severity="low",
        est_savings_ms=1.0,
        est_savings_pct=1.0,
        confidence="medium",
        summary="s",
        recommendation="r",
        snippet="",
        related=(ROW,),
    )
    d = _as_draft(f)
    assert d.related == (ROW,) and d.extra == {}


def test_the_fields_given_in_extra_are_read_as_the_fields() -> None:
    """The deprecated hand-off: read once, in check_drafts, and gone from ``extra``."""
    claims = Claims(kernels=np.arange(2))
    extra = {"steps_seen": 1, "claims": claims, "related": [ROW, "not a row"], "k": 1}
    (d,), problem = check_drafts("p", [_draft(extra=extra)])
    assert problem is None
    assert d.steps_seen == 1 and d.claims is claims and d.related == (ROW,)
    assert d.extra == {"k": 1}
    # a field the draft sets itself wins; a value of another type in extra is ignored
    (d,), _ = check_drafts("p", [_draft(steps_seen=4, extra={"steps_seen": 1})])
    assert d.steps_seen == 4 and d.extra == {}
    (d,), _ = check_drafts("p", [_draft(extra={"steps_seen": "1", "claims": 3})])
    assert d.steps_seen is None and d.claims is None and d.extra == {}


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("steps_seen", "2", "steps_seen '2' is not a whole number"),
        ("steps_seen", 2.5, "steps_seen 2.5 is not a whole number"),
        ("claims", {"kernels": []}, "claims is dict, expected Claims"),
        ("related", ("q",), "related is not a tuple of Related"),
    ],
)
def test_a_field_of_another_type_is_refused(field: str, value: object, says: str) -> None:
    _, problem = check_drafts("p", [_draft(**{field: value})])
    assert problem is not None and says in problem
