"""advisor diff matches findings by what they are: through a renamed script, a renamed function,
generated files; a finding one run lists under another's row; new/resolved only when the value
crosses (the other run measured again with the value floors off); still to fix listed."""

from __future__ import annotations

from collections.abc import Sequence

from advisor.detect.thresholds import value_gates
from advisor.findings import Evidence, Finding, Location, Related
from advisor.multirank.diff_findings import file_keys, findings_diff, is_generated, match_findings

INDUCTOR_A = "/tmp/torchinductor_me/k3/ck3xqz7fzj4lq2rbd6p3h5v2m7wq6a4n.py"
INDUCTOR_B = "/tmp/torchinductor_me/p9/cp9w2n5x4ttd7b3k8r2v6m1q0zs5y7ha.py"


def _f(
    id_: str,
    ms: float,
    loc: tuple[str, int, str] | None = None,
    what: str = "",
    sev: str = "high",
    related: tuple[Related, ...] = (),
) -> Finding:
    return Finding(
        id=id_,
        title=id_,
        severity=sev,  # type: ignore[arg-type]
        est_savings_ms=ms,
        est_savings_pct=0.0,
        confidence="high",
        summary=f"{id_} {ms}",
        recommendation="",
        snippet="",
        evidence=(Evidence(what, 1, ms),) if what else (),
        locations=(Location(*loc),) if loc else (),
        related=related,
    )


def test_a_renamed_script_and_function_pair_by_what_they_claim() -> None:
    """streams3_blocking.py:4 streams2 -> streams3_non_blocking.py:5 streams1: the same GEMMs."""
    gemm = "ampere_sgemm_128x64_nn via aten::mm: FP32 on CUDA cores"
    a = [_f("fp32-matmul", 27.4, ("/x/streams3_blocking.py", 4, "streams2"), gemm)]
    b = [_f("fp32-matmul", 20.0, ("/y/streams3_non_blocking.py", 5, "streams1"), gemm)]
    pairs, resolved, new = match_findings(a, b)
    assert len(pairs) == 1 and resolved == [] and new == []
    d = findings_diff(a, b)
    (e,) = d["changed"]
    assert e["location"] == "streams3_non_blocking.py:5"
    assert e["a_location"] == "streams3_blocking.py:4"
    assert e["change"] == "shrank 27.40 -> 20.00 ms per step"
    # two files of other names are not one renamed script: the findings stay apart
    c = [_f("fp32-matmul", 24.7, ("/y/model.py", 5, "streams1"), gemm)]
    assert match_findings(a, c)[0] == []


def test_the_runs_scripts_are_one_file_whatever_their_names() -> None:
    a = [_f("sync-point", 3.0, ("/a/train_v1.py", 40, "main"))]
    b = [_f("sync-point", 2.0, ("/b/run.py", 41, "main"))]
    assert match_findings(a, b)[0] == []
    pairs, _, _ = match_findings(a, b, scripts=("/a/train_v1.py", "/b/run.py"))
    assert len(pairs) == 1


def test_generated_files_match_whatever_their_hash() -> None:
    assert is_generated(INDUCTOR_A) and is_generated("<eval_with_key>.12")
    assert not is_generated("/app/streams3_non_blocking.py")
    a = [_f("comm-overlap", 5.0, (INDUCTOR_A, 212, "call"))]
    b = [_f("comm-overlap", 4.0, (INDUCTOR_B, 230, "call"))]
    fka, fkb = file_keys(a, b)
    assert fka[INDUCTOR_A] == fkb[INDUCTOR_B]
    d = findings_diff(a, b)
    assert d["new"] == [] and d["resolved"] == [] and len(d["changed"]) == 1


def test_same_id_in_two_functions_of_one_file_stay_apart() -> None:
    a = [_f("sync-point", 3.0, ("t.py", 10, "f"), "x"), _f("sync-point", 2.0, ("t.py", 20, "g"))]
    b = [_f("sync-point", 2.0, ("t.py", 20, "g"))]
    pairs, resolved, new = match_findings(a, b)
    assert [(x.locations[0].line, y.locations[0].line) for x, y in pairs] == [(20, 20)]
    assert [f.locations[0].line for f in resolved] == [10] and new == []


def test_a_finding_listed_under_another_row_pairs_with_that_entry() -> None:
    """A lists blocking-copy under sync-point (one cause, one row); B has it as its own row."""
    copies = Related("blocking-copy", "Blocking copies", 45.87, "blocking copies", 73.5)
    a = [_f("sync-point", 83.1, ("s.py", 4, "f"), related=(copies,))]
    b = [_f("blocking-copy", 56.1, ("s.py", 4, "f"))]
    d = findings_diff(a, b)
    assert [e["id"] for e in d["resolved"]] == ["sync-point"] and d["new"] == []
    (e,) = d["changed"]
    assert e["id"] == "blocking-copy" and e["listed_under"] == {"a": "sync-point", "b": None}
    assert e["est_savings_ms"] == {"a": 45.87, "b": 56.1}
    assert e["change"] == "grew 45.87 -> 56.10 ms per step"
    assert [x["id"] for x in d["still_to_fix"]] == ["blocking-copy"]


def _near(found: dict[str, Sequence[Finding]]):  # type: ignore[no-untyped-def]
    asked: list[tuple[str, frozenset[str]]] = []

    def near(side: str, ids: frozenset[str]) -> Sequence[Finding]:
        asked.append((side, ids))
        return found.get(side, ())

    return near, asked


def test_a_value_that_crossed_the_floor_is_changed_not_new() -> None:
    """Flux: host-preprocessing reported in B (31.2 ms) was 27.0 ms in A, under 5% of the step."""
    where = ("/app/flux.py", 124, "_run_pipe")
    a: list[Finding] = []
    b = [_f("host-preprocessing", 31.16, where, sev="medium")]
    near, asked = _near({"a": [_f("host-preprocessing", 27.03, where, sev="low")]})
    d = findings_diff(a, b, near)
    assert asked == [("a", frozenset({"host-preprocessing"}))]
    assert d["new"] == []
    (e,) = d["changed"]
    assert e["severity"] == {"a": None, "b": "medium"} and e["under_floor"] == "a"
    assert e["change"] == "grew 27.03 -> 31.16 ms per step, over its reporting floor in B only"
    # without the second measurement the same finding is new
    assert [x["id"] for x in findings_diff(a, b)["new"]] == ["host-preprocessing"]


def test_a_value_that_more_than_doubled_is_new_and_one_that_fell_is_resolved() -> None:
    where = ("/app/flux.py", 124, "_run_pipe")
    a = [_f("dataloader-stall", 57.0, ("r.py", 42, "main"))]
    b = [_f("device-copies", 11.14, where, sev="low")]
    near, asked = _near(
        {
            "a": [_f("device-copies", 1.68, where, sev="low")],
            "b": [_f("dataloader-stall", 0.7, ("r.py", 42, "main"), sev="low")],
        }
    )
    d = findings_diff(a, b, near)
    assert sorted(asked) == [
        ("a", frozenset({"device-copies"})),
        ("b", frozenset({"dataloader-stall"})),
    ]
    assert [e["id"] for e in d["new"]] == ["device-copies"]
    assert [e["id"] for e in d["resolved"]] == ["dataloader-stall"]
    assert d["changed"] == []


def test_still_to_fix_lists_b_findings_above_information_by_saving() -> None:
    a = [_f("sync-point", 83.1, ("s.py", 4, "f"))]
    b = [
        _f("fp32-matmul", 24.7, ("s.py", 5, "f"), "gemm"),
        _f("blocking-copy", 56.1, ("s.py", 5, "f"), "copies"),
        _f("pageable-memcpy", 0.0, ("s.py", 5, "f"), "copies", sev="info"),
    ]
    d = findings_diff(a, b)
    assert [e["id"] for e in d["still_to_fix"]] == ["blocking-copy", "fp32-matmul"]


def test_value_gates_are_the_floors_on_a_findings_own_figure() -> None:
    from advisor.analysis.detection import load_detectors

    load_detectors(())
    assert value_gates(["host-preprocessing"]) == ["host_preprocessing.min_pct"]
    assert value_gates(["sync-point"]) == ["sync_point.min_idle_ms", "sync_point.min_wait_ms"]
    gates = value_gates(["tiny-kernels", "device-copies"])
    assert "tiny_kernels.min_share_pct" in gates and "device_copies.min_ms" in gates
    assert "tiny_kernels.min_per_step" not in gates and "device_copies.min_per_step" not in gates
