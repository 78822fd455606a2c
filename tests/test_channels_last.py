"""channels-last: conv nets in NCHW on Tensor Core GPUs (layout conversion kernels)."""

from __future__ import annotations

import pytest

from tests.detector_helpers import analyze, found, one, skip_reason
from tests.tracebuilder import TraceBuilder

ID = "channels-last"
TO_NHWC = (
    "void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, "
    "(cudnnKernelDataType_t)2>(cudnn::ops::nchw2nhwc_params_t<float>, float const*, float*)"
)
TO_NCHW = "void cudnn::ops::nhwcToNchwKernel<float, float, float, true, false>(float const*)"


def _trace(
    cc: tuple[int, int] | None = (8, 0),
    conv_us: float = 1000.0,
    xform_us: float = 150.0,
    under: str = "aten::cudnn_convolution",
    types: str = "float",
    steps: int = 2,
) -> TraceBuilder:
    b = TraceBuilder(cc=cc)
    for s in range(steps):
        t0 = s * 4000.0
        b.step(s + 1, t0, 4000)
        b.op(
            "aten::conv2d",
            t0 + 10,
            100,
            dims=[[8, 64, 56, 56], [64, 64, 3, 3], []],
            types=[types, types],
        )
        # the launching op: inside aten::conv2d, or (another op) after it
        c = b.op(under, t0 + 20 if "conv" in under else t0 + 120, 80)
        t1 = c["ts"] - b.base
        b.launch(
            c, "cudaLaunchKernel", t1 + 5, 5, kernel=TO_NHWC, gpu_ts=t0 + 300, gpu_dur=xform_us
        )
        # back to back on the stream; the host then waits for them (on the step's path)
        b.launch(
            c,
            "cudaLaunchKernel",
            t1 + 15,
            5,
            kernel="sm80_xmma_fprop_implicit_gemm_tf32",
            gpu_ts=t0 + 300 + xform_us,
            gpu_dur=conv_us,
        )
        end = t0 + 300 + xform_us + conv_us
        b.launch(
            c, "cudaLaunchKernel", t1 + 25, 5, kernel=TO_NCHW, gpu_ts=end, gpu_dur=xform_us / 2
        )
        b.runtime("cudaDeviceSynchronize", t1 + 35, end + xform_us / 2 + 5 - (t1 + 35))
    return b


def test_layout_conversions_around_convs_are_the_saving() -> None:
    f = one(analyze(_trace().load(), ID), ID)
    # the conversions take 150 + 75 us per step; replayed without them the convolution waits
    # a little for its own launch: the step loses 215 us
    assert f.est_savings_ms == pytest.approx(0.215, abs=0.005)
    assert f.confidence == "medium"
    assert "2 NCHW<->NHWC layout conversion kernels per step" in f.summary
    assert "18% of the convolutions' GPU time" in f.summary
    assert {e.what for e in f.evidence} == {
        "cudnn::ops::nchwToNhwcKernel (layout conversion)",
        "cudnn::ops::nhwcToNchwKernel (layout conversion)",
    }


def test_below_min_share_or_without_tensor_cores_is_not_reported() -> None:
    assert not found(analyze(_trace(xform_us=8.0).load(), ID), ID)  # 12 us of a 4 ms step
    assert not found(analyze(_trace(cc=(6, 1)).load(), ID), ID)


def test_conversions_not_launched_by_convs_are_not_counted() -> None:
    assert not found(analyze(_trace(under="aten::copy_").load(), ID), ID)


def test_run_json_only_with_amp_convs_gives_a_low_confidence_estimate() -> None:
    run = {"modules": {"channels_last": False}}
    f = one(analyze(_trace(xform_us=0.5, types="c10::BFloat16").load(), ID, run), ID)
    assert f.confidence == "low"
    # 8% of the conv kernel time (1000 us per step)
    assert f.est_savings_ms == pytest.approx(0.08, abs=0.001)


def test_run_json_only_fp32_or_channels_last_model_is_not_reported() -> None:
    assert not found(
        analyze(_trace(xform_us=0.5).load(), ID, {"modules": {"channels_last": False}}), ID
    )
    assert not found(
        analyze(
            _trace(xform_us=0.5, types="c10::Half").load(), ID, {"modules": {"channels_last": True}}
        ),
        ID,
    )


def test_cpu_only_trace_is_skipped() -> None:
    b = TraceBuilder(cc=None)
    b.step(1, 0, 1000)
    b.op("aten::conv2d", 10, 100)
    assert skip_reason(analyze(b.load(), ID), ID) == "no GPU activity in this trace"
