"""data-parallel on built traces: positive, negative and missing-data cases."""

from __future__ import annotations

import pytest

from tests.detector_helpers import analyze, finding, skip_reason
from tests.tracebuilder import TID, TraceBuilder

BW_TID = TID + 1


DP = "data-parallel"


def dp_trace(names: tuple[str, ...] = ("Broadcast", "Scatter", "Gather")) -> TraceBuilder:
    b = TraceBuilder()
    durs = {"Broadcast": 2000.0, "Scatter": 500.0, "Gather": 300.0}
    for s in range(2):
        t0 = s * 10_000.0
        b.step(s + 1, t0, 10_000)
        b.frame("train.py", 55, "main", t0 + 1, 9_000)
        t = t0 + 10
        for n in names:
            b.op(n, t, durs[n], seq=1)
            b.op("aten::copy_", t + 1, durs[n] / 2)  # nested work is not counted twice
            t += durs[n] + 10
        b.op("autograd::engine::evaluate_function: BroadcastBackward", t0 + 8000, 900, tid=BW_TID)
        b.op("BroadcastBackward", t0 + 8001, 890, tid=BW_TID)
        b.op("ReduceAddCoalesced", t0 + 8002, 800, tid=BW_TID)
    return b


def test_data_parallel_measures_replicate_scatter_gather() -> None:
    f = finding(analyze(dp_trace().load(), DP), DP)
    assert f is not None
    # Broadcast 2.0 + Gather 0.3 + half of Scatter 0.5 (DDP still copies its share; 2 GPUs)
    assert f.est_savings_ms == pytest.approx(2.55)
    assert "DistributedDataParallel" in f.recommendation and "DDP(" in f.snippet
    whats = " ".join(e.what for e in f.evidence)
    assert "Broadcast" in whats and "not counted" in whats
    red = [e for e in f.evidence if "not counted" in e.what][0]
    assert red.count == 2 and red.total_ms == pytest.approx(1.78)  # nested Reduce not added
    assert f.locations[0].file == "train.py"


def _dp_gpu(early_us: float = 0.0) -> TraceBuilder:
    """dp_trace on a GPU: a 500 us kernel waited for at +3012 us; ``early_us``: a kernel that
    long launched before the replication, which the same wait also waits for."""
    b = dp_trace()
    for s in range(2):
        t0 = s * 10_000.0
        end = t0 + 3010 + 500
        if early_us:
            op = b.op("aten::mm", t0 + 2, 6)
            b.launch(
                op, "cudaLaunchKernel", t0 + 3, 2, kernel="gemm", gpu_ts=t0 + 5, gpu_dur=early_us
            )
            end = max(end, t0 + 5 + early_us + 500)
        op = b.op("aten::mm", t0 + 3000, 10)
        b.launch(op, "cudaLaunchKernel", t0 + 3001, 5, kernel="gemm", gpu_ts=end - 500, gpu_dur=500)
        b.runtime("cudaDeviceSynchronize", t0 + 3012, end - (t0 + 3012))
    return b


def test_data_parallel_saving_is_replayed_on_a_gpu_trace() -> None:
    f = finding(analyze(_dp_gpu().load(), DP), DP)
    assert f is not None
    # host-bound: the replicate/scatter/gather host time comes off each step's critical path
    assert f.est_savings_ms == pytest.approx(2.55, abs=0.01)
    assert "Replayed:" in f.assumptions[0]
    # GPU-bound: the wait ends when the GPU finishes (+8505) whatever the host saved before it
    g = finding(analyze(_dp_gpu(early_us=8000).load(), DP), DP)
    assert g is not None and g.est_savings_ms < 0.01


def test_gather_backward0_and_nccl_broadcast_are_not_data_parallel() -> None:
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.op("aten::gather", 10, 10)
    b.op("GatherBackward0", 30, 10, tid=BW_TID)
    b.op("autograd::engine::evaluate_function: GatherBackward0", 29, 12, tid=BW_TID)
    b.annotation("nccl:broadcast", 50, 10)
    b.op("c10d::broadcast_", 50, 10)
    assert finding(analyze(b.load(), DP), DP) is None


def test_single_function_named_scatter_is_not_enough() -> None:
    assert finding(analyze(dp_trace(("Scatter",)).load(), DP), DP) is None


def test_data_parallel_over_one_gpu_is_information() -> None:
    b = dp_trace(("Scatter", "Gather"))
    b.kernel("gemm", 100, 5)
    f = finding(analyze(b.load(), DP), DP)
    assert f is not None and f.severity == "info" and f.est_savings_ms == 0.0
    assert "single device" in f.summary and "Gather/Scatter operators" in f.evidence[0].what


def test_scatter_counts_for_its_share_across_gpus() -> None:
    b = dp_trace()
    for dev in (0, 1, 2, 3):
        b.kernel("gemm", 100 + dev, 5, device=dev)
    f = finding(analyze(b.load(), DP), DP)
    assert f is not None
    assert f.est_savings_ms == pytest.approx(2.0 + 0.5 * 3 / 4 + 0.3)
    assert "3/4 of the Scatter range" in " ".join(f.assumptions)


def test_data_parallel_from_run_json_on_cpu_trace_is_information() -> None:
    b = TraceBuilder(cc=None)
    b.step(1, 0, 100)
    b.op("aten::mm", 1, 10)
    run = {
        "modules": {
            "data_parallel": True,
            "data_parallel_sites": [{"file": "train.py", "line": 12, "function": "main"}],
        }
    }
    f = finding(analyze(b.load(), DP, run), DP)
    assert f is not None and f.severity == "info" and f.est_savings_ms == 0.0
    assert f.locations[0].line == 12


def test_data_parallel_without_data_is_skipped() -> None:
    b = TraceBuilder()
    b.step(1, 0, 100)
    assert skip_reason(analyze(b.load(), DP), DP)
