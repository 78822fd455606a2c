"""The recording window: host ranges that outlive it are cut at its end or left out, and say so."""

from __future__ import annotations

import pytest

from advisor.derive.quality import trace_quality
from advisor.trace import load_trace
from tests.conftest import shared_trace
from tests.tracebuilder import TraceBuilder


def _span(b: TraceBuilder, dur: float) -> None:
    b.events.append(
        {
            "ph": "X",
            "cat": "Trace",
            "name": "PyTorch Profiler (0)",
            "pid": "Spans",
            "tid": "PyTorch Profiler",
            "ts": b.base,
            "dur": dur,
            "args": {"Op count": 0},
        }
    )


def test_python_frames_past_the_recording_are_cut_or_left_out() -> None:
    b = TraceBuilder(cc=(9, 0), gpu_name="NVIDIA H100 80GB HBM3")
    _span(b, 2500)
    main = b.frame("bench.py", 10, "main", 0, 650_000)  # closed when the trace was written
    op = b.op("aten::add", 100, 50)
    b.launch(op, "cudaLaunchKernel", 110, 5, kernel="k", gpu_ts=200, gpu_dur=1000)
    b.frame("torch/profiler/profiler.py", 831, "__exit__", 640_000, 60, parent=main)
    t = b.load()
    assert t.steps["dur_ns"].iloc[0] == 1_200_000  # the recorded work, not the frames' 650 ms
    assert t.python["end_ns"].max() == 2_500_000 and len(t.python) == 1
    w = t.meta.window
    assert (w.clipped, w.dropped, w.source) == (1, 1, "profiler span")
    q = [i for i in trace_quality(t) if i.kind == "window"]
    assert q and "2 host events outlive the recording window" in q[0].what


def test_ranges_closing_with_the_work_are_left_alone() -> None:
    b = TraceBuilder(cc=(9, 0), gpu_name="NVIDIA H100 80GB HBM3")
    b.annotation("execute_model", 0, 1300)  # ends 0.1 ms after the last op
    op = b.op("aten::add", 100, 1100)
    b.launch(op, "cudaLaunchKernel", 110, 5, kernel="k", gpu_ts=200, gpu_dur=1000)
    t = b.load()
    assert t.meta.window.source == "last activity" and not t.meta.window.clipped
    assert t.annotations["end_ns"].max() == 1_300_000  # no boundary in the file: left alone
    assert not [i for i in trace_quality(t) if i.kind == "window"]


@pytest.mark.shared
def test_shared_python_tracer_frames_run_to_659_ms() -> None:
    t = load_trace(shared_trace("tracelens/microbench/sdpa_03_short_seq_overhead.json.gz"))
    assert t.median_step_ms() < 3.0  # 658.96 ms before
    assert t.meta.window.latest_ns > 650e6 and t.meta.window.dropped > 0


@pytest.mark.shared
def test_shared_step_marker_past_the_recording() -> None:
    t = load_trace(shared_trace("hta/triton_example/triton_example.json.gz"))
    assert t.median_step_ms() < 2.0  # the marker runs 13.3 s past a 1.7 ms recording
    name, _, end = t.meta.window.overruns[0]
    assert name == "ProfilerStep#1" and end > 13e9


def _compiled_step(compiled: bool) -> TraceBuilder:
    b = TraceBuilder(cc=(8, 0))
    _span(b, 2000)
    b.step(1, 100, 9_000_000)  # the step's marker runs on 9 s after the recording stopped
    name = "Torch-Compiled Region: 0/0" if compiled else "aten::add"
    op = b.op(name, 200, 1300)
    b.launch(op, "cudaLaunchKernel", 300, 5, kernel="triton_poi_fused_add_0", gpu_ts=400, gpu_dur=2)
    return b


def test_time_past_the_recording_around_a_compiled_region_is_one_time() -> None:
    from advisor.analysis.pipeline import Options, analyze_trace

    rep = analyze_trace(_compiled_step(True).load(), None, Options())
    f = next(f for f in rep.findings if f.id == "one-time-init")
    assert f.summary.startswith("ProfilerStep#1 ran 9.0 s past the end of the recording")
    assert f.severity == "info" and f.est_savings_ms == 0
    assert rep.run.step_ms_median < 2.0
    plain = analyze_trace(_compiled_step(False).load(), None, Options())
    assert not [f for f in plain.findings if f.id == "one-time-init"]


@pytest.mark.shared
def test_shared_triton_first_call_goes_to_one_time_init() -> None:
    from advisor.analysis.pipeline import analyze_path

    _, rep = analyze_path(shared_trace("hta/triton_example/triton_example.json.gz"))
    f = rep.findings[0]
    assert f.id == "one-time-init" and "13.3 s past the end of the recording" in f.summary
