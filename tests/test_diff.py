"""advisor diff: step time, categories, kernels/ops and findings before/after."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from advisor.analysis.pipeline import Options
from advisor.findings import Finding, Location
from advisor.multirank.diff import diff_sides, findings_diff, load_side, match_findings
from tests.conftest import HANG_S, SAMPLES, shared_trace
from tests.mr_helpers import rank_builder


def _f(id: str, ms: float, sev: str = "high", loc: tuple[str, int, str] | None = None) -> Finding:
    return Finding(
        id=id,
        title=id,
        severity=sev,
        est_savings_ms=ms,
        est_savings_pct=0.0,  # type: ignore[arg-type]
        confidence="high",
        summary=f"{id} {ms}",
        recommendation="",
        snippet="",
        locations=(Location(*loc),) if loc else (),
    )


def test_findings_resolved_new_changed_unchanged() -> None:
    a = [
        _f("dataloader-stall", 55.0, loc=("/a/train.py", 40, "main")),
        _f("sync-point", 3.0, "medium", loc=("/a/train.py", 52, "main")),
        _f("gpu-idle", 20.0),
        _f("fp32-matmul", 10.0, loc=("/a/model.py", 8, "forward")),
    ]
    b = [
        _f("sync-point", 3.05, "medium", loc=("/b/train.py", 52, "main")),  # same place
        _f("gpu-idle", 5.0, "medium"),  # changed
        _f("fp32-matmul", 10.0, loc=("/b/model.py", 11, "forward")),  # line moved, same function
        _f("pageable-memcpy", 2.0, "low", loc=("/b/train.py", 44, "main")),
    ]
    d = findings_diff(a, b)
    assert [(e["id"], e["location"]) for e in d["resolved"]] == [
        ("dataloader-stall", "train.py:40")
    ]
    assert [e["id"] for e in d["new"]] == ["pageable-memcpy"]
    assert [e["id"] for e in d["changed"]] == ["gpu-idle"]
    ch = d["changed"][0]
    assert ch["severity"] == {"a": "high", "b": "medium"}
    assert ch["est_savings_ms"] == {"a": 20.0, "b": 5.0}
    assert sorted(e["id"] for e in d["unchanged"]) == ["fp32-matmul", "sync-point"]
    assert d["resolved"][0]["severity"] == {"a": "high", "b": None}


def test_same_id_at_different_lines_do_not_pair() -> None:
    a = [_f("sync-point", 3.0, loc=("t.py", 10, "f")), _f("sync-point", 2.0, loc=("t.py", 20, "g"))]
    b = [_f("sync-point", 2.0, loc=("t.py", 20, "g"))]
    pairs, resolved, new = match_findings(a, b)
    assert [(x.locations[0].line, y.locations[0].line) for x, y in pairs] == [(20, 20)]
    assert [f.locations[0].line for f in resolved] == [10] and new == []


def _sides(tmp_path: Path):  # type: ignore[no-untyped-def]
    # A: 10 ms steps with 3 ms of exposed all-reduce; B: the all-reduce hidden under compute
    a = rank_builder(None, None, arrive_us=6_000, end_us=9_000).write(tmp_path / "a.json")
    b = rank_builder(
        None, None, step_us=8_000, arrive_us=2_000, end_us=5_000, compute_end_us=6_500
    ).write(tmp_path / "b.json")
    return load_side(a, Options()), load_side(b, Options())


def test_diff_of_two_traces(tmp_path: Path) -> None:
    sa, sb = _sides(tmp_path)
    d = diff_sides(sa, sb)
    assert d["step_ms_median"] == {"a": 10.0, "b": 8.0, "delta_ms": -2.0, "delta_pct": -20.0}
    cat = d["categories_ms"]
    assert set(cat) == {"compute", "communication", "memcpy", "idle", "dataloader", "host_only"}
    assert cat["communication"]["a"] == pytest.approx(3.0) and cat["communication"]["b"] == 0.0
    assert cat["compute"]["a"] + cat["communication"]["a"] + cat["idle"]["a"] == pytest.approx(10.0)
    (fe,) = d["findings"]["resolved"]
    assert fe["id"] == "comm-overlap"
    assert d["findings"]["new"] == []
    assert d["verdict"].startswith("B is 20.0% faster per step (10.00 -> 8.00 ms); 1 finding(s)")
    (k,) = d["kernels"]  # the all-reduce kept its time; the GEMM grew by 0.5 ms per step
    assert k["name"] == "volta_sgemm_128x64_nn" and k["delta_ms"] == pytest.approx(0.5)


def test_diff_command_json_and_text(tmp_path: Path) -> None:
    a = rank_builder(None, None, arrive_us=6_000, end_us=9_000).write(tmp_path / "a.json")
    b = rank_builder(
        None, None, step_us=8_000, arrive_us=2_000, end_us=5_000, compute_end_us=6_500
    ).write(tmp_path / "b.json")
    cmd = [sys.executable, "-m", "advisor", "diff", str(a), str(b)]
    p = subprocess.run([*cmd, "--json"], capture_output=True, text=True, timeout=HANG_S)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["step_ms_median"]["a"] == 10.0 and d["step_ms_median"]["b"] == 8.0
    assert set(d) >= {"a", "b", "categories_ms", "kernels", "ops", "findings", "verdict"}
    t = subprocess.run(cmd, capture_output=True, text=True, timeout=HANG_S)
    assert t.returncode == 0, t.stderr
    assert "Resolved (1):" in t.stdout and "comm-overlap" in t.stdout and "-20.0%" in t.stdout
    bad = subprocess.run([*cmd[:-1], str(tmp_path / "nope.json")], capture_output=True, text=True)
    assert bad.returncode == 1 and "no such file" in bad.stderr


def test_diff_breakdown_is_the_reports() -> None:
    """The V100 sample diffed with itself: the categories are the report's step breakdown."""
    from advisor.analysis.pipeline import analyze_path

    path = SAMPLES / "resnet50_v100.kineto.json.gz"
    side = load_side(path, Options())
    d = diff_sides(side, side)
    _, report = analyze_path(path)
    one = report.views.one_trace
    assert one is not None
    for cat, v in d["categories_ms"].items():
        mean = sum(getattr(r, f"{cat}_ms") for r in one.steps) / len(one.steps)
        assert v["a"] == pytest.approx(mean, abs=0.001) and v["delta_ms"] == 0.0
    assert d["categories_ms"]["dataloader"]["a"] == pytest.approx(59.26, abs=0.01)
    assert d["categories_ms"]["idle"]["a"] == pytest.approx(17.63, abs=0.01)
    assert d["a"]["gpu_busy_pct"] == report.run.gpu_busy_pct


@pytest.mark.shared
def test_resnet_num_workers_0_vs_4() -> None:
    a = load_side(shared_trace("kineto/resnet50_num_workers_0"), Options())
    b = load_side(shared_trace("kineto/resnet50_num_workers_4"), Options())
    d = diff_sides(a, b)
    st = d["step_ms_median"]
    assert st["a"] > 150 and st["b"] < 135 and st["delta_pct"] < -15  # 161.8 -> 126.6 ms
    cat = d["categories_ms"]
    dl = cat["dataloader"]
    assert dl["a"] > 40 and dl["b"] < 5  # GPU idle in DataLoader.__next__: 47.4 -> 0.7 ms/step
    # the GPU idles 26 ms less per step in all (65.7 -> 39.7 ms: idle outside data loading grew)
    assert cat["idle"]["delta_ms"] + dl["delta_ms"] < -15
    # the DataLoader's range, renamed with the iterator's class, pairs with its new name
    top = d["ops"][0]
    assert top["name"].startswith("enumerate(DataLoader)#_MultiProcessingDataLoaderIter")
    assert top["a_name"].startswith("enumerate(DataLoader)#_SingleProcessDataLoaderIter")
    assert top["delta_ms"] < -40
    # num_workers=4 fixed the DataLoader stall: reported as resolved (at the same user line)
    (res,) = [e for e in d["findings"]["resolved"] if e["id"] == "dataloader-stall"]
    assert res["severity"] == {"a": "high", "b": None} and res["est_savings_ms"]["a"] > 40
    assert "dataloader-stall" not in {e["id"] for e in d["findings"]["new"]}
