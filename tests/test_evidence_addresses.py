"""Memory addresses in Python's names of objects (``object at 0x7f...``) never reach a finding's
evidence or summary: they differ from run to run and name nothing a user can find."""

from __future__ import annotations

from advisor.analysis.ranking import finalize
from advisor.detect.draft import Draft
from advisor.detect.thresholds import Thresholds
from advisor.findings import Evidence, without_addresses


def test_addresses_are_dropped_from_evidence_and_summary() -> None:
    name = "<built-in method round of numpy.ndarray object at 0x703a4a1ecff0>"
    d = Draft(
        id="host-preprocessing",
        title="t",
        est_savings_ms=1.0,
        confidence="low",
        summary=f"Most of it in {name}.",
        recommendation="r",
        snippet="",
        evidence=(Evidence(f"  inside it: {name}", 3, 1.0), Evidence("aten::mm 0x10", 1, 1.0)),
    )
    f = finalize(d, 10.0, Thresholds())
    assert f.evidence[0].what == "  inside it: <built-in method round of numpy.ndarray>"
    assert f.evidence[1].what == "aten::mm 0x10"  # a hex value that is no address stays
    assert f.summary == "Most of it in <built-in method round of numpy.ndarray>."


def test_other_address_forms() -> None:
    assert without_addresses("<function f at 0x7f0011223344>") == "<function f>"
    assert without_addresses("<Foo object at 0x7F00AB>") == "<Foo>"
    assert without_addresses("shape 0x10 at 0x") == "shape 0x10 at 0x"
