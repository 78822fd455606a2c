"""cudnn-benchmark: static-shape convolutions with torch.backends.cudnn.benchmark off."""

from __future__ import annotations

import pytest

from tests.detector_helpers import analyze, found, one, skip_reason
from tests.tracebuilder import TraceBuilder

ID = "cudnn-benchmark"
OFF = {"backends": {"cudnn_benchmark": False, "cudnn_deterministic": False}}


def _trace(
    steps: int = 3, vary: bool = False, shapes: bool = True, gpu: bool = True
) -> TraceBuilder:
    b = TraceBuilder(cc=(8, 0) if gpu else None)
    for s in range(steps):
        t0 = s * 5000.0
        b.step(s + 1, t0, 5000)
        n = 32 - (s if vary else 0)
        dims = [[n, 64, 56, 56], [64, 64, 3, 3], [], [], [], [], []] if shapes else None
        b.op("aten::conv2d", t0 + 10, 100, dims=dims)
        c = b.op("aten::cudnn_convolution", t0 + 20, 80)
        if gpu:
            b.launch(
                c,
                "cudaLaunchKernel",
                t0 + 30,
                5,
                kernel="implicit_gemm_fprop",
                gpu_ts=t0 + 200,
                gpu_dur=600,
            )
            b.runtime("cudaDeviceSynchronize", t0 + 40, 765)  # the GPU work is on the step's path
        bw = b.op("aten::convolution_backward", t0 + 1000, 100)
        if gpu:
            b.launch(
                bw,
                "cudaLaunchKernel",
                t0 + 1010,
                5,
                kernel="dgrad_engine",
                gpu_ts=t0 + 1200,
                gpu_dur=400,
            )
            b.runtime("cudaDeviceSynchronize", t0 + 1020, 585)
            mm = b.op("aten::mm", t0 + 2000, 50)  # not a convolution
            b.launch(
                mm, "cudaLaunchKernel", t0 + 2010, 5, kernel="sgemm", gpu_ts=t0 + 2100, gpu_dur=900
            )
    return b


def test_static_convs_with_benchmark_off() -> None:
    f = one(analyze(_trace().load(), ID, OFF), ID)
    # conv fwd + bwd GPU time: 1 ms per step; 1 - 1/1.27 and 1 - 1/1.70
    assert f.est_savings_ms == pytest.approx(1 - 1 / 1.27, abs=0.001)
    lo, hi = f.est_savings_range_ms or (0, 0)
    assert hi == pytest.approx(1 - 1 / 1.70, abs=0.001)
    assert f.confidence == "low"
    assert "the same 1 convolution shapes in each of 3 steps" in f.summary


def test_benchmark_on_deterministic_or_changing_shapes_is_not_reported() -> None:
    t = _trace().load()
    assert not found(analyze(t, ID, {"backends": {"cudnn_benchmark": True}}), ID)
    det = {"backends": {"cudnn_benchmark": False, "cudnn_deterministic": True}}
    assert not found(analyze(t, ID, det), ID)
    assert not found(analyze(_trace(vary=True).load(), ID, OFF), ID)


def test_unverifiable_shapes_are_said_so() -> None:
    f = one(analyze(_trace(shapes=False).load(), ID, OFF), ID)
    assert "could not be compared" in f.summary


def test_missing_run_json_or_flag_skips() -> None:
    t = _trace().load()
    assert "run.json" in (skip_reason(analyze(t, ID), ID) or "")
    assert skip_reason(analyze(t, ID, {"backends": {}}), ID) == (
        "run.json has no backends.cudnn_benchmark"
    )


def test_cpu_only_trace_is_skipped() -> None:
    rep = analyze(_trace(gpu=False).load(), ID, OFF)
    assert skip_reason(rep, ID) == "no GPU activity in this trace"
