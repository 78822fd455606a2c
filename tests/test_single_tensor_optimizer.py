"""single-tensor-optimizer on built traces: positive, negative and missing-data cases (real
traces: test_optimizer_and_python_checks_real.py).
"""

from __future__ import annotations

import pytest

from tests.detector_helpers import analyze, finding, skip_reason
from tests.tracebuilder import TraceBuilder

OPT = "single-tensor-optimizer"


def optimizer_trace(
    cls: str = "SGD",
    op: str = "aten::add_",
    n: int = 60,
    gpu: bool = True,
    kernel: str = "vectorized_elementwise_kernel<4, add>",
    legacy: bool = False,
    busy_until: float = 0.0,
    launch: bool = True,
    sync_after: bool = False,
) -> TraceBuilder:
    b = TraceBuilder(cc=(8, 0) if gpu else None)
    for s in range(2):
        t0 = s * 10_000.0
        b.step(s + 1, t0, 10_000)
        b.frame("train.py", 77, "train", t0 + 1, 9_990)
        w0 = t0 + 5_000
        name = f"Optimizer.step#{cls}.step"
        if legacy:
            b.op(name, w0, 1_000)
        else:
            b.annotation(name, w0, 1_000)
        if busy_until:
            bw = b.op("aten::mm", w0 - 10, 5)
            b.launch(
                bw, "cudaLaunchKernel", w0 - 9, 2, kernel="gemm", gpu_ts=w0 - 5, gpu_dur=busy_until
            )
        for i in range(n):
            o = b.op(op, w0 + 5 + i * 16, 14)
            # behind a busy GPU the update kernels queue up and run back to back afterwards
            gpu_ts = w0 - 5 + busy_until + i * 2 if busy_until else w0 + 12 + i * 16
            if gpu and launch:
                b.launch(
                    o,
                    "cudaLaunchKernel",
                    w0 + 6 + i * 16,
                    5,
                    kernel=kernel,
                    gpu_ts=gpu_ts,
                    gpu_dur=2,
                )
        if sync_after:  # `loss.item()` after the step: the host waits for the GPU's queue
            end = max(w0 + 1_000, w0 - 5 + busy_until + n * 2)
            b.runtime("cudaDeviceSynchronize", w0 + 1_000, end - w0 - 1_000 + 5)
    return b


def test_single_tensor_optimizer_saving_is_gpu_idle_in_the_step() -> None:
    f = finding(analyze(optimizer_trace().load(), OPT), OPT)
    assert f is not None
    # range 5000..6000 us of host time, nothing waits for the GPU: 90% of it is saved
    assert f.est_savings_ms == pytest.approx(0.9, abs=0.01)
    assert "fused=True" in f.snippet and "torch.optim.SGD" in f.snippet
    assert "60 per-parameter ops" in f.summary
    assert f.locations[0].file == "train.py"


def test_optimizer_behind_a_busy_gpu_saves_only_the_idle_part() -> None:
    f = finding(analyze(optimizer_trace(busy_until=900, sync_after=True).load(), OPT), OPT)
    # backward kept the GPU busy through most of the range and the host waits for the GPU
    # right after it: the replayed step is hardly shorter
    assert f is None or f.est_savings_ms < 0.2


def test_foreach_fused_and_declared_optimizers_are_not_reported() -> None:
    foreach = optimizer_trace(
        op="aten::_foreach_add_", n=40, kernel="multi_tensor_apply_kernel<...>"
    )
    assert finding(analyze(foreach.load(), OPT), OPT) is None
    assert finding(analyze(optimizer_trace(cls="FusedAdam").load(), OPT), OPT) is None
    run = {"optimizers": [{"class": "SGD", "foreach": True, "fused": False}]}
    assert finding(analyze(optimizer_trace().load(), OPT, run), OPT) is None
    run = {
        "optimizers": [
            {"class": "SGD", "foreach": False, "fused": None, "file": "train.py", "line": 20}
        ]
    }
    f = finding(analyze(optimizer_trace().load(), OPT, run), OPT)
    assert f is not None and "foreach=False" in f.summary and f.locations[0].line == 20
    # ops that launch nothing (FusedAdam's step counters on the CPU) in a GPU trace
    quiet = optimizer_trace(launch=False)
    o = quiet.op("aten::mm", 1, 2)
    quiet.launch(o, "cudaLaunchKernel", 1, 1, kernel="gemm", gpu_ts=3, gpu_dur=5)
    assert finding(analyze(quiet.load(), OPT), OPT) is None
    assert finding(analyze(optimizer_trace(n=20).load(), OPT), OPT) is None  # too few


def test_optimizer_on_cpu_only_trace_is_information_only_when_foreach_was_turned_off() -> None:
    # torch loops per parameter by default on a CPU and uses foreach by default on CUDA
    assert finding(analyze(optimizer_trace(gpu=False).load(), OPT), OPT) is None
    default = {"optimizers": [{"class": "SGD", "foreach": None, "fused": None}]}
    assert finding(analyze(optimizer_trace(gpu=False).load(), OPT, default), OPT) is None
    forced = {"optimizers": [{"class": "SGD", "foreach": False, "fused": None}]}
    f = finding(analyze(optimizer_trace(gpu=False).load(), OPT, forced), OPT)
    assert f is not None and f.severity == "info" and f.est_savings_ms == 0.0
    assert "No GPU activity" in f.summary


def test_legacy_optimizer_operator_ranges_work() -> None:
    f = finding(analyze(optimizer_trace(legacy=True).load(), OPT), OPT)
    assert f is not None and f.est_savings_ms == pytest.approx(0.9, abs=0.01)


def test_no_optimizer_step_is_skipped() -> None:
    b = TraceBuilder()
    b.step(1, 0, 100)
    b.op("aten::mm", 1, 5)
    assert "Optimizer.step" in (skip_reason(analyze(b.load(), OPT), OPT) or "")
