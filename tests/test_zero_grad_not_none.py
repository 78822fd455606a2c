"""zero-grad-not-none: zero_grad() that writes zeros instead of setting gradients to None."""

from __future__ import annotations

import pytest

from tests.detector_helpers import analyze, found, kernel_op, one
from tests.tracebuilder import TraceBuilder

ID = "zero-grad-not-none"
ANN = "Optimizer.zero_grad#SGD.zero_grad"


def _gpu_trace(
    n_params: int = 4, steps: int = 2, zero_ops: bool = True, legacy: bool = False
) -> TraceBuilder:
    b = TraceBuilder()
    for s in range(steps):
        t0 = s * 10_000.0
        b.step(s + 1, t0, 10_000)
        kernel_op(b, "aten::mm", t0 + 10, 20, "sgemm", gpu_ts=t0 + 40, gpu_dur=1000)
        start = t0 + 2000
        if legacy:
            b.op(ANN, start, 50 * n_params + 20)
        else:
            b.annotation(ANN, start, 50 * n_params + 20)
        for i in range(n_params if zero_ops else 0):
            ts = start + 10 + 50 * i
            b.op("aten::zero_", ts, 40, dims=[[64, 64]])
            f = b.op("aten::fill_", ts + 2, 36, dims=[[64, 64], []])
            b.launch(
                f, "cudaLaunchKernel", ts + 5, 10, kernel="fill_kernel", gpu_ts=ts + 20, gpu_dur=3
            )
    return b


def test_zeroing_kernels_and_host_time_are_measured() -> None:
    f = one(analyze(_gpu_trace().load(), ID), ID)
    assert f.confidence == "high"
    assert "fills 4 gradient(s)" in f.summary and "4 kernels/memsets" in f.summary
    # per zero_ op: 40 us of host span, 3 us of it the fill kernel: 37 us idle + 3 us kernel
    assert f.est_savings_ms == pytest.approx(4 * 40 / 1000, abs=0.001)
    assert f.evidence[0].count == 8 and f.evidence[1].what.startswith("zeroing kernels")


def test_legacy_trace_with_zero_grad_as_an_op() -> None:
    f = one(analyze(_gpu_trace(legacy=True).load(), ID), ID)
    assert f.est_savings_ms == pytest.approx(0.16, abs=0.001)


def test_cpu_only_run_counts_the_host_time() -> None:
    b = TraceBuilder(cc=None)
    b.step(1, 0, 1000)
    b.annotation(ANN, 100, 300)
    for i in range(5):
        b.op("aten::zero_", 110 + 50 * i, 20, dims=[[1000, 1000]])
    f = one(analyze(b.load(), ID), ID)
    assert f.est_savings_ms == pytest.approx(0.1, abs=0.001)
    assert f.severity != "info"
    assert any("CPU-only run" in a for a in f.assumptions)


def test_set_to_none_and_zero_ops_elsewhere_are_not_reported() -> None:
    b = _gpu_trace(zero_ops=False)
    b.op("aten::zero_", 5000, 40, dims=[[64, 64]])  # outside zero_grad (e.g. a buffer reset)
    assert not found(analyze(b.load(), ID), ID)


def test_run_json_site_without_trace_evidence_is_latent() -> None:
    run = {"zero_grad": [{"owner": "Module", "set_to_none": False, "file": "train.py", "line": 33}]}
    f = one(analyze(_gpu_trace(zero_ops=False).load(), ID, run), ID)
    assert f.severity == "info" and f.est_savings_ms == 0
    assert f.locations[0].line == 33 and "Module.zero_grad" in f.locations[0].function


def test_run_json_site_is_named_with_measured_cost() -> None:
    run = {
        "zero_grad": [
            {"owner": "Optimizer", "set_to_none": False, "file": "train.py", "line": 40},
            {"owner": "Optimizer", "set_to_none": True, "file": "train.py", "line": 41},
        ]
    }
    f = one(analyze(_gpu_trace().load(), ID, run), ID)
    assert [loc.line for loc in f.locations][:1] == [40]
    assert all(loc.line != 41 for loc in f.locations)


def test_no_ops_no_run_json_no_finding() -> None:
    b = TraceBuilder()
    b.step(1, 0, 100)
    assert not found(analyze(b.load(), ID), ID)


def test_foreach_zero_counts_the_gradients_in_its_list() -> None:
    b = TraceBuilder()
    b.step(1, 0, 10_000)
    b.annotation(ANN, 100, 200)
    grads = [[64, 64], [64], [128, 64], [128]]
    z = b.op("aten::_foreach_zero_", 120, 100, dims=[grads])
    b.launch(
        z, "cudaLaunchKernel", 130, 10, kernel="multi_tensor_apply_kernel", gpu_ts=150, gpu_dur=20
    )
    f = one(analyze(b.load(), ID), ID)
    assert "fills 4 gradient(s)" in f.summary and "1 zeroing op(s) per step" in f.summary
    assert f.est_savings_ms == pytest.approx(0.1, abs=0.001)  # 20 us kernel + 80 us idle
