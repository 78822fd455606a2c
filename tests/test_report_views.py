"""advisor/analysis/views.py: the chart and header data computed on the analysis side."""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from advisor.analysis.pipeline import analyze_trace
from advisor.analysis.views import CATEGORIES, step_rows
from advisor.derive.sources import read_snippet, read_sources
from advisor.derive.timeline import Intervals
from advisor.findings import Location
from advisor.report import Report
from advisor.viewdata import Snippet, StepRow
from tests.conftest import shared_trace
from tests.report_samples import GOLDEN, gpu_builder, sample_report
from tests.tracebuilder import TraceBuilder


def _parts(row: StepRow) -> float:
    return sum(getattr(row, f"{c}_ms") for c in CATEGORIES)


def test_step_breakdown_splits_each_step_by_priority():
    rows = step_rows(gpu_builder().load())
    assert [r.step for r in rows] == [1, 2, 3]
    s1, s2, s3 = rows
    # compute 400-700; comm 650-800 counts only outside compute; memcpy 800-850; loader 0-300
    assert (s1.compute_ms, s1.communication_ms, s1.memcpy_ms) == (0.3, 0.1, 0.05)
    assert (s1.dataloader_ms, s1.idle_ms, s1.host_only_ms) == (0.3, 0.25, 0.0)
    assert (s2.compute_ms, s2.idle_ms) == (0.8, 0.2)
    assert (s3.memcpy_ms, s3.compute_ms, s3.idle_ms) == (0.1, 0.1, 0.3)  # memset
    for r in rows:
        assert _parts(r) == pytest.approx(r.total_ms, abs=0.002)
    assert s1.ts_us == 1_000_000.0  # the file's own clock


def test_cpu_only_trace_is_host_only_and_data_loading():
    b = TraceBuilder(cc=None)
    b.step(1, 0, 1000)
    b.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 100, 400)
    b.op("aten::add", 600, 100)
    rows = step_rows(b.load())
    assert rows[0].dataloader_ms == 0.4 and rows[0].host_only_ms == 0.6
    assert rows[0].compute_ms == rows[0].idle_ms == 0.0


def test_data_loading_while_the_gpu_is_busy_is_not_a_stall():
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.annotation("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", 0, 500)
    op = b.op("aten::mm", 0, 10)
    b.launch(op, "cudaLaunchKernel", 1, 5, kernel="k", gpu_ts=0, gpu_dur=800)
    r = step_rows(b.load())[0]
    assert r.dataloader_ms == 0.0 and r.compute_ms == 0.8 and r.idle_ms == 0.2


def test_views_header_data_and_utilization():
    report = sample_report(gpu_builder().load())
    v = report.views
    one = v.one_trace
    assert one is not None
    assert one.device.name == "NVIDIA A100-SXM4-80GB"
    assert one.device.compute_capability == "8.0"
    assert one.device.peak_memory_bytes == 3 << 30
    assert one.device.total_memory_bytes == 80 * 1024**3
    assert one.trace.recorded_at == "2023-11-14 22:13:20 UTC"
    assert one.trace.window_us == (1_000_000.0, 1_002_500.0)
    u = one.utilization
    assert u is not None
    assert len(u.busy_pct) == 100 and u.bucket_ms == 0.025
    assert u.busy_pct[:16] == (0.0,) * 16  # 0-400 us: nothing on the GPU
    assert u.busy_pct[16:32] == (100.0,) * 16  # 400-800 us: compute then communication
    assert u.compute_pct[28:32] == (0.0,) * 4  # 700-800 us is communication only
    assert set(v.detectors) >= {"sync-point", "gpu-idle"}
    assert v.detectors["sync-point"].doc and v.detectors["gpu-idle"].doc is None


def test_no_gpu_no_utilization_and_run_ctx_peak_memory_wins():
    b = TraceBuilder(cc=None)
    b.step(1, 0, 100)
    report = sample_report(b.load(), run_ctx={"peak_memory_bytes": 12345})
    one = report.views.one_trace
    assert one is not None and one.utilization is None
    assert one.device.peak_memory_bytes == 12345
    assert one.device.name is None


def test_sources_read_only_python_files_near_the_line(tmp_path):
    src = tmp_path / "train.py"
    src.write_text("\n".join(f"line{i}" for i in range(1, 21)) + "\n")
    snip = read_snippet(src, 10)
    assert snip == Snippet(start=7, line=10, lines=tuple(f"line{i}" for i in range(7, 14)))
    first = read_snippet(src, 1)
    assert first is not None and first.lines[0] == "line1"
    assert read_snippet(src, 99) is None
    secret = tmp_path / "secret.txt"
    secret.write_text("password\n")
    assert read_snippet(secret, 1) is None  # a trace cannot pull arbitrary files into a report
    assert read_snippet(tmp_path / "missing.py", 1) is None


def test_sources_resolve_relative_files_and_no_source_keeps_them_out():
    trace = gpu_builder().load()
    report = sample_report(trace)
    sources = report.views.sources
    assert sources is not None
    assert sorted(sources) == ["train_example.py:12", "train_example.py:6"]
    hot = sources["train_example.py:12"]
    assert hot.lines[hot.line - hot.start].strip().startswith("print(loss.item())")
    assert sample_report(trace, no_source=True).views.sources is None
    rel = read_sources(report.findings, [GOLDEN])
    assert rel == sources
    assert (
        read_sources([report.findings[0].with_(locations=(Location("x.py", 1, "f"),))], [GOLDEN])
        == {}
    )


def test_findings_json_carries_views_and_round_trips():
    report = sample_report(gpu_builder().load())
    data = orjson.loads(report.to_json())
    assert data["views"]["steps"][0]["compute_ms"] == 0.3
    again = Report.load(data)
    assert again.views == report.views and again.run == report.run
    assert again.dump() == report.dump()


def test_pipeline_fills_views():
    report = analyze_trace(gpu_builder().load(), None)
    assert report.views.one_trace is not None
    assert report.views.one_trace.steps[0].dataloader_ms == 0.3
    assert report.views.sources is not None


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 200)), max_size=30),
    st.lists(st.integers(-50, 1300), min_size=1, max_size=10),
)
def test_coverage_matches_brute_force(intervals, points):
    s = np.array([a for a, _ in intervals], dtype=np.int64)
    e = np.array([a + d for a, d in intervals], dtype=np.int64)
    cov = Intervals.union_of(s, e)
    mask = np.zeros(1400, dtype=bool)
    for a, b in zip(s, e, strict=True):
        mask[a + 50 : b + 50] = True
    for t in points:
        assert int(cov.before(np.array([t]))[0]) == int(mask[: t + 50].sum())


def test_real_trace_breakdown_adds_up_and_shows_the_data_loader():
    from advisor.trace import load_trace

    trace = load_trace(
        shared_trace("kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz")
    )
    rows = step_rows(trace)
    assert len(rows) == 6
    for r in rows:
        assert _parts(r) == pytest.approx(r.total_ms, abs=0.01)
        # num_workers=0: about a third of each step waits on data (HTA-independent check)
        assert 0.25 < r.dataloader_ms / r.total_ms < 0.45
        assert r.compute_ms > r.memcpy_ms > 0
