"""memory-headroom on built traces: positive, negative and missing-data cases."""

from __future__ import annotations

from tests.detector_helpers import analyze, finding, skip_reason
from tests.tracebuilder import PID, TID, TraceBuilder

GB = 1024**3


MEM = "memory-headroom"


def memory_trace(alloc_gb: float, reserved_gb: float, total_gb: int = 80) -> TraceBuilder:
    b = TraceBuilder(total_mem=total_gb * GB)
    b.step(1, 0, 1000)
    b.memory(10, 1024, int(alloc_gb * GB / 2), int(reserved_gb * GB / 2))
    b.memory(20, 1024, int(alloc_gb * GB), int(reserved_gb * GB))
    b.memory(30, 1024, 10 * GB, 10 * GB, device_type=0, device_id=-1)  # CPU: ignored
    return b


def test_low_memory_use_suggests_a_larger_batch() -> None:
    f = finding(analyze(memory_trace(10, 12).load(), MEM), MEM)
    assert f is not None and f.severity == "info" and f.est_savings_ms == 0.0
    assert "12.0 GB reserved of 80.0 GB" in f.summary and "(15%)" in f.summary
    assert "larger batch" in f.summary
    assert f.evidence[0].example_ts_us is not None


def test_nearly_full_memory_suggests_checkpointing_and_amp() -> None:
    b = memory_trace(60, 75)
    b.op("autograd::engine::evaluate_function: AddmmBackward0", 500, 10)  # a training step
    f = finding(analyze(b.load(), MEM), MEM)
    assert f is not None and f.severity == "info"
    assert "autocast" in f.snippet and "checkpoint" in f.snippet
    assert "expandable_segments" in f.recommendation  # reserved well above allocated
    # no backward (inference): no activations kept for one, so no checkpointing
    g = finding(analyze(memory_trace(60, 75).load(), MEM), MEM)
    assert g is not None and "checkpoint" not in g.snippet and "inference_mode" in g.snippet


def test_run_json_peak_wins_over_the_profiled_window() -> None:
    run = {
        "memory": {"peak_allocated_bytes": 76 * GB, "peak_reserved_bytes": 78 * GB},
        "device": {"total_memory_bytes": 80 * GB},
    }
    f = finding(analyze(memory_trace(10, 12).load(), MEM, run), MEM)
    assert f is not None and "run.json" in f.evidence[0].what and "(98%)" in f.summary


def test_run_json_of_a_cpu_run_is_not_gpu_memory() -> None:
    run = {
        "memory": {"peak_allocated_bytes": None, "peak_reserved_bytes": None},
        "device": {"type": "cpu", "total_memory_bytes": 64 * GB},
    }
    b = TraceBuilder(cc=None)
    b.step(1, 0, 100)
    assert "no GPU memory data" in (skip_reason(analyze(b.load(), MEM, run), MEM) or "")
    run["memory"] = {"peak_allocated_bytes": 1 * GB, "peak_reserved_bytes": 1 * GB}
    assert "no GPU memory data" in (skip_reason(analyze(b.load(), MEM, run), MEM) or "")


def test_middling_memory_use_is_not_reported() -> None:
    assert finding(analyze(memory_trace(40, 48).load(), MEM), MEM) is None


def test_sizes_only_memory_events_give_a_lower_bound() -> None:
    b = TraceBuilder(total_mem=16 * GB)
    b.step(1, 0, 1000)
    for i, size in enumerate([8 * GB, 7 * GB, -2 * GB]):
        b.events.append(
            {
                "ph": "i",
                "s": "t",
                "cat": "cpu_instant_event",
                "name": "[memory]",
                "pid": PID,
                "tid": TID,
                "ts": b.base + 10 + i,
                "args": {"Bytes": size, "Device Type": 1, "Device Id": 0},
            }
        )
    f = finding(analyze(b.load(), MEM), MEM)
    assert f is not None and "at least 15.0 GB" in f.summary  # 15 of 16 GB: nearly full
    assert f.confidence == "medium"
    # the same events on an 80 GB GPU: a lower bound of 19% proves nothing about free memory
    b2 = TraceBuilder(total_mem=80 * GB)
    b2.step(1, 0, 1000)
    b2.events.extend(dict(e) for e in b.events if e.get("name") == "[memory]")
    rep = analyze(b2.load(), MEM)
    assert finding(rep, MEM) is None
    assert "cannot show" in (skip_reason(rep, MEM) or "")


def test_no_gpu_memory_data_is_skipped() -> None:
    b = TraceBuilder(cc=None)
    b.step(1, 0, 100)
    b.memory(10, 1024, GB, GB, device_type=0, device_id=-1)
    assert "no GPU memory data" in (skip_reason(analyze(b.load(), MEM), MEM) or "")
