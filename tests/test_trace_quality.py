"""Trace quality (advisor.derive.quality): holes in the timeline are named in run.trace_quality,
no idle/busy figure rests on them, and the findings that depend on them lose confidence."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.analysis.pipeline import Options, analyze_trace
from advisor.derive.quality import trace_quality
from advisor.multirank.analyze import analyze_files
from advisor.trace import load_trace
from tests.conftest import shared_trace
from tests.detector_helpers import finding
from tests.mr_helpers import rank_builder, write_ranks
from tests.tracebuilder import TraceBuilder


def _graph_steps(record_all: bool) -> TraceBuilder:
    """3 steps of 2 ms: a 100 us kernel, then a graph replay running 100-1900 us on the GPU; the
    trace records only its first and last 50 us kernels unless ``record_all``."""
    b = TraceBuilder()
    for s in range(3):
        t = s * 2000.0
        b.step(s + 1, t, 2000)
        op = b.op("aten::add", t + 1, 10)
        b.launch(op, "cudaLaunchKernel", t + 2, 5, kernel="k_a", gpu_ts=t + 10, gpu_dur=90)
        g = b.runtime("cudaGraphLaunch", t + 20, 30)
        corr = g["args"]["correlation"]
        times = (
            [(t + 100 + i * 50, 50) for i in range(36)]
            if record_all
            else [(t + 100, 50), (t + 1850, 50)]
        )
        for ts, dur in times:
            b.kernel("graph_kernel", ts, dur, corr=corr)
    return b


def test_graph_replay_with_few_recorded_kernels_is_a_hole() -> None:
    t = _graph_steps(record_all=False).load()
    (issue,) = trace_quality(t)
    assert issue.kind == "graph" and "3 CUDA-graph replays" in issue.what
    assert "cover 6% of the replay spans" in issue.what  # 100 of 1800 us
    assert "--cuda-graph-trace=node" in issue.effect
    rep = analyze_trace(t, None, Options())
    assert rep.run.trace_quality[0].what == issue.what
    # busy % only outside the replays: 90 us of kernel in 200 us of step outside them
    assert rep.run.gpu_busy_pct == pytest.approx(45.0, abs=0.5)
    # the unrecorded replay is not idle time: gpu-idle sees only the 200 us outside it
    f = finding(rep, "gpu-idle")
    assert f is None or (f.confidence == "low" and "counted as busy" in " ".join(f.assumptions))


def test_fully_recorded_graph_replay_is_fine() -> None:
    t = _graph_steps(record_all=True).load()
    assert trace_quality(t) == []
    assert analyze_trace(t, None, Options()).run.trace_quality == ()


def test_dropped_events_and_launches_without_gpu_work() -> None:
    b = TraceBuilder()
    b.step(1, 0, 5000)
    for i in range(12):  # launch calls whose kernels are not in the trace
        b.runtime("cudaLaunchKernel", 10 + i * 100, 5)
    b.op("aten::add", 3000, -5)  # negative duration: dropped by the loader
    whats = [i.what for i in trace_quality(b.load())]
    assert any("events were dropped" in w for w in whats)
    assert any("12 of 12 launch calls have no GPU work" in w for w in whats)


def test_gpu_work_before_its_launch_is_clock_disagreement() -> None:
    b = TraceBuilder()
    b.step(1, 0, 1000)
    op = b.op("aten::add", 100, 50)
    b.launch(op, "cudaLaunchKernel", 110, 5, kernel="k", gpu_ts=60, gpu_dur=10)  # 50 us early
    (issue,) = trace_quality(b.load())
    assert issue.kind == "clock" and "start before the call that launched them" in issue.what


def test_clock_skew_between_ranks(tmp_path: Path) -> None:
    # rank 1's clock runs 50 ms ahead: the same all-reduces (3 ms) end 50 ms apart
    b = {0: rank_builder(0, 2), 1: rank_builder(1, 2, base_ts=1_050_000.0)}
    report, _ = analyze_files(write_ranks(tmp_path, b), Options(), tmp_path, jobs=1)
    (q,) = [q for q in report.run.trace_quality if "clocks disagree" in q.what]
    assert "50.000 ms apart" in q.what


def test_negative_queue_trace_graph_replays() -> None:
    t = load_trace(shared_trace("hta/negative_queue_length_values_check/rank0.json.gz"))
    (issue,) = [i for i in trace_quality(t) if i.kind == "graph"]
    assert "70 CUDA-graph replays" in issue.what and "1-20 recorded kernels" in issue.what
    assert "cover 26% of the replay spans" in issue.what
    rep = analyze_trace(t, None, Options())
    for f in rep.findings:
        if f.id in ("gpu-idle", "comm-overlap", "sync-point"):
            assert f.confidence == "low"
