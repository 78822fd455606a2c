"""conv-bias-before-bn: a convolution with bias directly followed by BatchNorm."""

from __future__ import annotations

from typing import Any

import pytest

from tests.detector_helpers import analyze, found, one, skip_reason
from tests.tracebuilder import TraceBuilder

ID = "conv-bias-before-bn"
X = [8, 3, 32, 32]
W = [16, 3, 3, 3]
Y = [8, 16, 30, 30]


def _conv(
    b: TraceBuilder, ts: float, bias: bool, shapes: bool = True, gpu: bool = True, out_ch: int = 16
) -> None:
    """aten::conv2d > convolution > _convolution > cudnn_convolution (+ aten::add_ for bias)."""
    w = [out_ch, 3, 3, 3]
    dims: Any = [X, w, [out_ch] if bias else [], [], [], [], []] if shapes else None
    b.op("aten::conv2d", ts, 100, dims=dims)
    b.op("aten::convolution", ts + 2, 96, dims=dims)
    b.op("aten::_convolution", ts + 4, 92, dims=dims)
    c = b.op("aten::cudnn_convolution", ts + 6, 50, dims=[X, w, []] if shapes else None)
    if gpu:
        b.launch(
            c,
            "cudaLaunchKernel",
            ts + 10,
            5,
            kernel="implicit_gemm_conv",
            gpu_ts=ts + 200,
            gpu_dur=300,
        )
    if bias:
        a = b.op("aten::add_", ts + 60, 30, dims=[Y, [1, out_ch, 1, 1], []] if shapes else None)
        if gpu:
            b.launch(
                a,
                "cudaLaunchKernel",
                ts + 65,
                5,
                kernel="elementwise_add",
                gpu_ts=ts + 500,
                gpu_dur=40,
            )


def _bn(
    b: TraceBuilder, ts: float, shapes: bool = True, name: str = "aten::batch_norm", ch: int = 16
) -> None:
    b.op("aten::add_", ts, 5, dims=[[], [], []] if shapes else None)  # num_batches_tracked += 1
    y = [8, ch, 30, 30]
    b.op(name, ts + 10, 60, dims=[y, [ch], [ch], [ch], [ch], [], [], [], []] if shapes else None)


def _trace(
    bias: bool = True,
    shapes: bool = True,
    gpu: bool = True,
    follow: str = "bn",
    bn_ch: int = 16,
    sync: bool = False,
) -> TraceBuilder:
    b = TraceBuilder(cc=(8, 0) if gpu else None)
    for s in range(2):
        t0 = s * 2000.0
        b.step(s + 1, t0, 2000)
        _conv(b, t0 + 10, bias, shapes, gpu)
        if follow == "bn":
            _bn(b, t0 + 120, shapes, ch=bn_ch)
        else:
            b.op("aten::relu", t0 + 120, 20, dims=[Y] if shapes else None)
        if sync:  # the host then waits for the GPU: the add kernel is on the critical path
            b.runtime("cudaDeviceSynchronize", t0 + 200, 360)
    return b


def test_bias_add_kernels_before_batch_norm_are_measured() -> None:
    f = one(analyze(_trace().load(), ID), ID)
    assert f.confidence == "high" and f.severity != "info"
    # replayed: nothing waits for the GPU, so only the host's 30 us aten::add_ is saved
    assert f.est_savings_ms == pytest.approx(0.03, abs=0.001)
    assert any("Replayed:" in a for a in f.assumptions)
    assert "1 convolution(s) with a bias feed BatchNorm directly per step" in f.summary
    assert f.evidence[0].what.startswith("aten::conv2d weight [16, 3, 3, 3] with bias")
    assert f.evidence[0].total_ms == pytest.approx(0.08)


def test_without_shapes_the_bias_add_under_the_conv_is_the_signal() -> None:
    f = one(analyze(_trace(shapes=False).load(), ID), ID)
    assert f.confidence == "medium"
    assert f.est_savings_ms == pytest.approx(0.03, abs=0.001)


def test_when_the_host_waits_for_the_gpu_the_add_kernel_is_saved() -> None:
    f = one(analyze(_trace(sync=True).load(), ID), ID)
    # the host waits until the add kernel ends (+510..+550): without it the wait ends 40 us
    # earlier; the 30 us of host add_ ran while the GPU was busy anyway
    assert f.est_savings_ms == pytest.approx(0.04, abs=0.002)


def test_no_bias_or_no_batch_norm_or_other_channels_is_not_reported() -> None:
    assert not found(analyze(_trace(bias=False).load(), ID), ID)
    assert not found(analyze(_trace(follow="relu").load(), ID), ID)
    assert not found(analyze(_trace(bn_ch=32).load(), ID), ID)
    assert not found(analyze(_trace(bias=False, shapes=False).load(), ID), ID)


def test_cpu_run_is_informational() -> None:
    b = TraceBuilder(cc=None)
    b.step(1, 0, 2000)
    dims = [X, W, [16], [], [], [], []]
    b.op("aten::conv2d", 10, 100, dims=dims)
    b.op("aten::mkldnn_convolution", 12, 90, dims=dims)  # oneDNN adds the bias inside
    _bn(b, 120)
    f = one(analyze(b.load(), ID), ID)
    assert f.severity == "info" and f.est_savings_ms == 0
    assert "one add kernel per convolution" in f.summary


def test_run_json_pairs_alone_are_informational_with_locations() -> None:
    run = {
        "modules": {
            "conv_bias_before_bn": [
                {"conv": "Net.features.0", "bn": "Net.features.1", "file": "model.py", "line": 12}
            ]
        }
    }
    f = one(analyze(_trace(bias=False).load(), ID, run), ID)
    assert f.severity == "info"
    assert f.locations[0].file == "model.py" and "Net.features.0" in f.locations[0].function


def test_run_json_pairs_join_measured_trace_pairs() -> None:
    run = {
        "modules": {
            "conv_bias_before_bn": [
                {"conv": "Net.c1", "bn": "Net.b1", "file": "model.py", "line": 7}
            ]
        }
    }
    f = one(analyze(_trace().load(), ID, run), ID)
    assert f.severity != "info" and f.locations[0].line == 7
    assert "run.json lists 1" in f.summary


def test_no_ops_and_no_run_json_skips() -> None:
    b = TraceBuilder()
    b.step(1, 0, 100)
    b.launch(None, "cudaLaunchKernel", 10, 5, kernel="k", gpu_ts=20, gpu_dur=5)
    rep = analyze(b.load(), ID)
    assert "no CPU operator events" in (skip_reason(rep, ID) or "")
