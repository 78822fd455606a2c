"""trace.annotated.json.gz: the findings on their own timeline track."""

from __future__ import annotations

import dataclasses
import gzip
import json
import shutil

import orjson
import pandas as pd

from advisor.analysis.pipeline import analyze_trace, write_outputs
from advisor.output.annotate import CATEGORY, PROCESS_NAME, annotate, finding_events
from advisor.trace import load_trace
from advisor.viewdata import NO_VIEWS
from tests.conftest import shared_trace
from tests.report_samples import gpu_builder, sample_report

TABLES = (
    "kernels",
    "memcpy",
    "runtime",
    "cpu_ops",
    "python",
    "annotations",
    "syncs",
    "memory",
    "steps",
)


def _events(path) -> list[dict]:
    return orjson.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


def _report_for(path):
    trace = load_trace(path)
    return trace, dataclasses.replace(
        sample_report(trace), run=dataclasses.replace(sample_report(trace).run, trace=str(path))
    )


def _same_tables(a, b) -> None:
    for name in TABLES:
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), check_categorical=False)
    assert a.meta.unknown_categories == b.meta.unknown_categories
    assert a.meta.origin_us == b.meta.origin_us


def test_one_track_per_finding_at_the_evidence_timestamps(tmp_path):
    src = gpu_builder().write(tmp_path / "trace.json.gz")
    before = src.read_bytes()
    trace, report = _report_for(src)
    written = write_outputs(report, tmp_path / "out")
    assert src.read_bytes() == before  # the original is never modified
    evs = _events(written["annotated"])
    ours = [e for e in evs if e.get("cat") == CATEGORY]
    meta = [e for e in evs if e.get("ph") == "M"]
    pid = next(e["pid"] for e in meta if e["args"].get("name") == PROCESS_NAME)
    assert pid not in {e.get("pid") for e in evs if e.get("cat") != CATEGORY and e.get("ph") != "M"}
    threads = {
        e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name" and e["pid"] == pid
    }
    assert threads == {i: f"#{i} {f.title}" for i, f in enumerate(report.findings, 1)}
    sync = [e for e in ours if e["tid"] == 2]  # #2 is sync-point: 10 evidence rows
    assert [e["ts"] for e in sync] == sorted(ev.example_ts_us for ev in report.findings[1].evidence)
    assert all(a["ts"] + a["dur"] <= b["ts"] for a, b in zip(sync, sync[1:], strict=False))
    args = sync[0]["args"]
    assert (
        args["title"] == "Host waits on the device"
        and args["source"] == "train_example.py:12 (train)"
    )
    assert args["estimated saving"].startswith("0.200 ms/step (20.0%")
    # a finding without timestamps spans the captured window
    info = [e for e in ours if e["tid"] == 4]
    assert len(info) == 1 and info[0]["ts"] == trace.to_trace_us(0) and info[0]["dur"] == 2500.0


def test_annotated_trace_loads_to_the_same_tables_and_findings(tmp_path):
    src = gpu_builder().write(tmp_path / "trace.json.gz")
    trace, report = _report_for(src)
    out = write_outputs(report, tmp_path / "out")["annotated"]
    again = load_trace(out)
    _same_tables(trace, again)
    a = analyze_trace(trace, None).to_dict()
    b = analyze_trace(again, None).to_dict()
    for d in (a, b):
        d["run"].pop("trace")
        d["views"]["trace"].pop("file")
    assert a == b


def test_reannotating_replaces_the_old_track(tmp_path):
    src = gpu_builder().write(tmp_path / "trace.json.gz")
    _, report = _report_for(src)
    first = tmp_path / "a.json.gz"
    first.write_bytes(annotate(src, report))
    second = annotate(first, report)
    evs = orjson.loads(gzip.decompress(second))["traceEvents"]
    names = [e for e in evs if e.get("ph") == "M" and e["args"].get("name") == PROCESS_NAME]
    assert len(names) == 1
    assert sum(e.get("cat") == CATEGORY for e in evs) == sum(
        e.get("cat") == CATEGORY for e in _events(first)
    )


def test_fast_splice_equals_a_full_rewrite(tmp_path, monkeypatch):
    import advisor.output.annotate as ann

    for name, data in (
        ("d.json", json.dumps(gpu_builder().to_dict(), indent=1)),
        ("a.json", json.dumps(gpu_builder().events)),
        ("e.json", '{"schemaVersion": 1, "traceEvents" : [ ] }'),
    ):
        src = tmp_path / name
        src.write_text(data)
        _, report = _report_for(gpu_builder().write(tmp_path / "t.json"))
        fast = json.loads(gzip.decompress(annotate(src, report)))
        monkeypatch.setattr(ann, "_splice_at", lambda raw: None)
        slow = json.loads(gzip.decompress(annotate(src, report)))
        monkeypatch.undo()
        key = lambda e: json.dumps({**e, "pid": 0}, sort_keys=True)  # noqa: E731
        fe = fast["traceEvents"] if isinstance(fast, dict) else fast
        se = slow["traceEvents"] if isinstance(slow, dict) else slow
        assert sorted(map(key, fe)) == sorted(map(key, se)) and len(fe) > 10


def test_array_format_nan_and_unreadable_traces(tmp_path):
    b = gpu_builder()
    src = tmp_path / "t.json"
    src.write_text(json.dumps(b.events))  # the bare-array form of the Chrome trace format
    _, report = _report_for(src)
    evs = json.loads(gzip.decompress(annotate(src, report)))
    assert isinstance(evs, list) and any(e.get("cat") == CATEGORY for e in evs)
    nan = tmp_path / "nan.json"  # NaN is not JSON, but Python's json writes it
    nan.write_text(json.dumps(b.events).replace('"dur": 300', '"dur": 300, "x": NaN', 1))
    assert any(e.get("cat") == CATEGORY for e in json.loads(gzip.decompress(annotate(nan, report))))
    # a trace that cannot be read back is skipped, never fatal
    bad = dataclasses.replace(
        report, run=dataclasses.replace(report.run, trace=str(tmp_path / "gone.json"))
    )
    written = write_outputs(bad, tmp_path / "out")
    assert "annotated" not in written and written["report"].is_file()


def test_no_annotation_over_the_input_itself(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    src = gpu_builder().write(out / "trace.annotated.json.gz")
    before = src.read_bytes()
    _, report = _report_for(src)
    written = write_outputs(report, out)
    assert "annotated" not in written and src.read_bytes() == before


def test_events_without_a_window_or_findings():
    report = dataclasses.replace(sample_report(gpu_builder().load()), findings=(), views=NO_VIEWS)
    evs = finding_events(report, 5)
    assert [e["name"] for e in evs] == ["process_name", "process_sort_index"]


def test_real_trace_annotated_copy_analyzes_identically(tmp_path):
    src = shared_trace("kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz")
    local = tmp_path / src.name
    shutil.copyfile(src, local)
    trace, report = _report_for(local)
    written = write_outputs(report, tmp_path / "out")
    again = load_trace(written["annotated"])
    _same_tables(trace, again)
    assert again.meta.event_count == trace.meta.event_count + len(finding_events(report, 1))
