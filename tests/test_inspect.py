"""advisor inspect: figures, stable JSON keys, HTA agreement, CPU-only traces."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from advisor.analysis.summary import inspect_trace
from advisor.trace import load_trace
from tests.conftest import SAMPLES, shared_trace
from tests.tracebuilder import TraceBuilder

STABLE_KEYS = {
    "devices",
    "steps",
    "step_ms_median",
    "gpu_busy_pct",
    "gpu_idle_pct",
    "kernels_top",
    "ops_top",
    "memcpy",
    "sync_calls",
}

# HTA 0.5.0 idle % (../shared/traces/hta/REFERENCE.md)
HTA_IDLE = {
    "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz": 2.6,
    "hta/nccl_parser_config/nccl_data.json.gz": 77.8,
    "hta/negative_queue_length_values_check/rank0.json.gz": 69.4,
    "hta/trace_filter/sampled_rank-0.json.gz": 53.6,
    "hta/trace_filter/sampled_rank-1.json.gz": 54.7,
    "hta/trace_diff/control/control.json.gz": 16.2,
    "hta/df_index_resolver/df_index_resolver.json.gz": 46.1,
    "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz": 99.5,
    "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz": 98.5,
}


def test_synthetic_busy_idle_and_tables() -> None:
    b = TraceBuilder()
    b.step(1, 0, 1000)
    op = b.op("aten::mm", 0, 100)
    b.launch(op, "cudaLaunchKernel", 10, 5, kernel="sgemm", gpu_ts=100, gpu_dur=300)
    b.launch(op, "cudaLaunchKernel", 20, 5, kernel="sgemm", gpu_ts=600, gpu_dur=100)
    b.launch(
        op,
        "cudaMemcpyAsync",
        30,
        5,
        memcpy=("Memcpy HtoD (Pinned -> Device)", 1024),
        gpu_ts=750,
        gpu_dur=50,
    )
    b.runtime("cudaStreamSynchronize", 40, 500)
    s = inspect_trace(b.load())
    assert STABLE_KEYS <= set(s)
    # busy 300 + 100 + 50 = 450 us of the 1000 us step: the report's GPU busy
    assert s["gpu_busy_pct"] == 45.0 and s["gpu_idle_pct"] == 55.0
    # the active span 100..800 us = 700 us (HTA's window): busy 450 us
    assert s["breakdown"]["busy_pct"] == pytest.approx(100 * 450 / 700, abs=0.01)
    assert s["breakdown"]["idle_pct"] == pytest.approx(100 * 250 / 700, abs=0.01)
    assert s["step_breakdown"] == {
        "steps": 1,
        "compute_ms": 0.4,
        "communication_ms": 0.0,
        "memcpy_ms": 0.05,
        "dataloader_ms": 0.0,
        "idle_ms": 0.55,
        "host_only_ms": 0.0,
    }
    assert s["kernels_top"][0] == {
        "name": "sgemm",
        "count": 2,
        "total_ms": 0.4,
        "mean_us": 200.0,
        "pct": 100.0,
    }
    assert s["memcpy"] == [
        {
            "kind": "HtoD",
            "src": "Pinned",
            "dst": "Device",
            "count": 1,
            "bytes": 1024,
            "total_ms": 0.05,
        }
    ]
    assert {r["name"] for r in s["sync_calls"]} == {"cudaStreamSynchronize", "cudaMemcpyAsync"}
    assert s["steps"]["count"] == 1 and s["step_ms_median"] == 1.0
    assert s["devices"][0]["compute_capability"] == "8.0"


def test_cpu_only_says_so() -> None:
    b = TraceBuilder(cc=None)
    b.step(1, 0, 100)
    b.op("aten::add", 1, 10)
    s = inspect_trace(b.load())
    assert s["gpu_busy_pct"] is None and s["gpu_idle_pct"] is None
    assert any("no GPU activity" in n for n in s["notes"])
    assert s["ops_top"][0]["name"] == "aten::add"


@pytest.mark.shared
@pytest.mark.parametrize("rel", sorted(HTA_IDLE))
def test_gpu_idle_agrees_with_hta_within_two_points(rel: str) -> None:
    s = inspect_trace(load_trace(shared_trace(rel)))
    assert abs(s["breakdown"]["idle_pct"] - HTA_IDLE[rel]) <= 2.0


@pytest.mark.shared
@pytest.mark.parametrize(
    "rel",
    [
        "hta/cupti_profiler/benchmark_result_924719_1679055439_trace.json.gz",
        "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    ],
)
def test_no_gpu_activity_traces(rel: str) -> None:
    s = inspect_trace(load_trace(shared_trace(rel)))
    assert s["gpu_idle_pct"] is None
    assert any("no GPU activity" in n for n in s["notes"])


@pytest.mark.shared
def test_cli_json_and_text() -> None:
    path = shared_trace(
        "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"
    )
    out = subprocess.run(
        [sys.executable, "-m", "advisor", "inspect", "--json", str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    data = json.loads(out.stdout)
    assert STABLE_KEYS <= set(data)
    assert data["devices"][0]["name"].startswith("NVIDIA A100")
    text = subprocess.run(
        [sys.executable, "-m", "advisor", "inspect", str(path)],
        capture_output=True,
        text=True,
        check=True,
        env={"NO_COLOR": "1", "PATH": "/usr/bin:/bin"},
    ).stdout
    assert "GPU busy" in text and "Top kernels" in text and "Memory copies" in text
    assert "Pageable" in text


def test_inspect_busy_and_breakdown_are_the_reports() -> None:
    """One GPU busy figure and one step breakdown: inspect shows the report's (V100 sample)."""
    from advisor.analysis.pipeline import analyze_path

    trace, report = analyze_path(SAMPLES / "resnet50_v100.kineto.json.gz")
    s = inspect_trace(trace)
    assert s["gpu_busy_pct"] == report.run.gpu_busy_pct == 56.02
    one = report.views.one_trace
    assert one is not None and s["step_breakdown"]["steps"] == len(one.steps)
    for key in ("compute_ms", "memcpy_ms", "dataloader_ms", "idle_ms"):
        mean = sum(getattr(r, key) for r in one.steps) / len(one.steps)
        assert s["step_breakdown"][key] == pytest.approx(mean, abs=0.001)
    assert s["breakdown"]["busy_pct"] == pytest.approx(60.6, abs=0.05)  # HTA's active span


def test_run_summary_busy_counts_every_step() -> None:
    """findings.json's gpu_busy_pct is the busy share of all captured steps, the last one too."""
    from advisor.analysis.pipeline import run_summary

    b = TraceBuilder()
    for n, t0 in ((1, 0), (2, 1000)):
        b.step(n, t0, 1000)
        op = b.op("aten::mm", t0, 10)
        b.launch(op, "cudaLaunchKernel", t0 + 1, 2, kernel="sgemm", gpu_ts=t0 + 500, gpu_dur=500)
    assert run_summary(b.load(), None).gpu_busy_pct == 50.0


@pytest.mark.shared
def test_cli_prints_kind_and_device_source() -> None:
    path = shared_trace("tracelens/microbench/gemm_01_compute_few_tiles.json.gz")
    text = subprocess.run(
        [sys.executable, "-m", "advisor", "inspect", str(path)],
        capture_output=True,
        text=True,
        check=True,
        env={"NO_COLOR": "1", "PATH": "/usr/bin:/bin"},
    ).stdout
    assert "trace: micro-benchmark (10 top-level calls of 1 op(s) (aten::mm x10)" in text
    assert "AMD Instinct MI300X" in text and "inferred from kernel names (ISA tag 942" in text
    named = subprocess.run(
        [sys.executable, "-m", "advisor", "inspect", "--device", "MI325X", str(path)],
        capture_output=True,
        text=True,
        check=True,
        env={"NO_COLOR": "1", "PATH": "/usr/bin:/bin"},
    ).stdout
    assert "AMD Instinct MI325X" in named and "(--device)" in named
