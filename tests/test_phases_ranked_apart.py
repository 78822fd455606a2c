"""A run captured in two phases (training, then evaluation) ranks their findings apart: each
finding says its phase (findings.json ``phase``), and the terminal and the report show the
phases one after the other, each with its own heading, table and bar scale (its own median
step), so a saving per evaluation step is never set against one per training step."""

from __future__ import annotations

import dataclasses
import io
import re
from pathlib import Path

from advisor import runinfo
from advisor.analysis.phases import with_phases
from advisor.findings import Finding
from advisor.output.html import render_html
from advisor.output.terminal import print_summary
from advisor.output.viewmodel import build_viewmodel
from advisor.report import Report
from advisor.runfacts import RunFacts


def _f(fid: str, title: str, ms: float, step_ms: float, sev: str) -> Finding:
    return Finding(fid, title, sev, ms, round(100 * ms / step_ms, 2), "high", "s", "r", "")  # type: ignore[arg-type]


def _report(step_ms: float, findings: list[Finding]) -> Report:
    return Report(
        run=RunFacts(step_ms_median=step_ms, steps_profiled=5),
        findings=tuple(findings),
        skipped=(),
        errored=(),
        thresholds={},
    )


def _two_phases(tmp_path: Path) -> Report:
    train = _report(
        400.0,
        [
            _f("sync-point", "Host-device synchronization points", 30.0, 400.0, "medium"),
            _f("gpu-idle", "GPU idle", 10.0, 400.0, "low"),
        ],
    )
    ev = _report(
        2000.0, [_f("dataloader-stall", "Steps wait on the DataLoader", 1473.0, 2000.0, "high")]
    )
    (tmp_path / "trace.json.gz").write_bytes(b"")
    (tmp_path / "trace.eval.json.gz").write_bytes(b"")
    ctx = {"phase": "train", "eval": {"trace": "trace.eval.json.gz", "trace_written": True}}
    return with_phases(train, tmp_path / "trace.json.gz", runinfo.read(ctx), lambda p, c: ev)


def test_each_finding_says_its_phase(tmp_path: Path) -> None:
    r = _two_phases(tmp_path)
    assert [(f.id, f.phase) for f in r.findings] == [
        ("sync-point", "train"),
        ("gpu-idle", "train"),
        ("dataloader-stall", "eval"),
    ]
    assert [f.to_dict()["phase"] for f in r.findings] == ["train", "train", "eval"]


def test_terminal_has_a_table_per_phase(tmp_path: Path) -> None:
    out = io.StringIO()
    print_summary(_two_phases(tmp_path), {}, file=out)
    text = out.getvalue()
    train = text.index("Training phase (savings per training step, median 400")
    ev = text.index("Evaluation phase (savings per evaluation step, median 2,000")
    assert train < text.index("sync-point") < ev < text.index("dataloader-stall")


def test_report_has_a_block_per_phase_each_with_its_scale(tmp_path: Path) -> None:
    r = _two_phases(tmp_path)
    vm = build_viewmodel(r, "2026-01-02 03:04 UTC")
    groups = vm["phases"]
    assert [g["phase"] for g in groups] == ["train", "eval"]
    assert [[row["rank"] for row in g["rows"]] for g in groups] == [[1, 2], [3]]
    # each chart scaled to its own findings: the top bar of each phase spans most of its plot
    for g in groups:
        chart = g["chart"]
        assert chart["bars"][0]["w_pct"] > 50, (g["phase"], chart["bars"][0])
    html = render_html(r)
    assert html.count('class="phase-head"') == 2
    # same-titled rows are told apart: every row of the tables carries its phase
    rows = re.findall(r'<td class="ftcell"[^\n]*?<span class="badge phase">(\w+)</span>', html)
    assert rows == ["train", "train", "eval"]


def test_one_phase_has_no_headings(tmp_path: Path) -> None:
    r = _report(400.0, [_f("sync-point", "Sync", 30.0, 400.0, "medium")])
    vm = build_viewmodel(dataclasses.replace(r), "2026-01-02 03:04 UTC")
    assert [g["heading"] for g in vm["phases"]] == [""]
    assert 'class="phase-head"' not in render_html(r)
