"""Kernel names read tightly: a convolution is a convolution kernel, never a kernel whose name
holds "conv" in "convert" (cuDNN's ``convertTensor`` layout kernels, vLLM's RMSNorm with a
``_typeConvert`` template argument), cuDNN's BatchNorm or a pooling kernel over NCHW; the
causes ``kernel-efficiency`` names read the shape's size; the larger saving leads."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from advisor.detectors._kernelname import parse

from advisor.analysis.compiled import _kind
from advisor.analysis.pipeline import Options, analyze_trace
from advisor.trace import load_trace
from advisor.trace.kernelnames import is_convolution, is_layout_conversion, kernel_family
from advisor.trace.model import Trace
from tests.conftest import shared_trace
from tests.detector_helpers import analyze, finding
from tests.kineto2021 import load_2021
from tests.test_kernel_efficiency import gpu_bound_calls
from tests.tracebuilder import TraceBuilder

CONVERT = (
    "void cudnn::ops::convertTensor_kernel<float, float, float, (cudnnKernelDataType_t)0>"
    "(float, float const*, float, float*, unsigned long)"
)
RMSNORM = (
    "std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type "
    "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, long, c10::BFloat16*)"
)
BN = (
    "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1, true>"
    "(cudnnTensorStruct, float const*, cudnnTensorStruct, float*)"
)
POOL = "void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>(int)"
TO_NHWC = "void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true>(float const*)"
CONV_TF32 = "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16"
LOADERS: dict[str, Callable[[TraceBuilder], Trace]] = {
    "current": lambda b: b.load(),
    "kineto-2021": load_2021,
}


@pytest.mark.parametrize(
    ("name", "family"),
    [
        (CONVERT, "copy"),
        (RMSNORM, "normalization"),
        (BN, "normalization"),
        (POOL, "other"),
        (TO_NHWC, "copy"),
        (CONV_TF32, "convolution"),
        ("volta_scudnn_128x64_relu_interior_nn_v1", "convolution"),
        ("void implicit_convolve_sgemm<float, float, 1024, 5, 5>(int)", "convolution"),
        ("void cudnn::cnn::wgrad_alg0_engine<float, 128, 6, 7>(int)", "convolution"),
        ("igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt128x128x32", "convolution"),
        ("void cask_cudnn::computeOffsetsKernel(cask_cudnn::ComputeOffsetsParams)", "convolution"),
        ("void fft2d_r2c_32x32<float, false, 0u, false>(float2*, float const*)", "convolution"),
    ],
)
def test_families(name: str, family: str) -> None:
    assert kernel_family(name) == family
    assert is_convolution(name) == (family == "convolution")
    assert (parse(name).kind == "conv") == (family == "convolution")
    # the compiled-regions view's kind column
    assert (_kind(name) == "convolution") == (family == "convolution")
    assert is_layout_conversion(name) == (name in (CONVERT, TO_NHWC))


def _conv_net(kernels: list[tuple[str, float]]) -> TraceBuilder:
    """2 steps of 4 ms: an FP32 aten::conv2d on an A100 whose cudnn_convolution launches
    ``kernels`` (name, us) back to back; the host then waits for them."""
    b = TraceBuilder(cc=(8, 0))
    for s in range(2):
        t0 = s * 4000.0
        b.step(s + 1, t0, 4000)
        b.frame("model.py", 30, "forward", t0 + 5, 200)
        b.op(
            "aten::conv2d",
            t0 + 10,
            100,
            dims=[[8, 64, 56, 56], [64, 64, 3, 3], []],
            types=["float", "float"],
        )
        c = b.op("aten::cudnn_convolution", t0 + 20, 80, types=["float", "float"])
        gpu = t0 + 300
        for i, (name, us) in enumerate(kernels):
            b.launch(
                c, "cudaLaunchKernel", t0 + 25 + 10 * i, 5, kernel=name, gpu_ts=gpu, gpu_dur=us
            )
            gpu += us
        b.runtime("cudaDeviceSynchronize", t0 + 100, gpu + 5 - (t0 + 100))
    return b


@pytest.mark.parametrize("fmt", LOADERS)
def test_convert_tensor_is_no_fp32_convolution(fmt: str) -> None:
    # a TF32 convolution between two convertTensor<float> kernels: no FP32 convolution to report
    b = _conv_net([(CONVERT, 400.0), (CONV_TF32, 1000.0), (CONVERT, 400.0)])
    trace = LOADERS[fmt](b)
    assert finding(analyze(trace, "fp32-matmul"), "fp32-matmul") is None
    # the conversions are what channels-last names
    f = finding(analyze(trace, "channels-last"), "channels-last")
    assert f is not None and "layout conversion" in f.summary
    assert any("convertTensor_kernel" in e.what for e in f.evidence)


# ---- kernel-efficiency: the shape's size, and the larger saving leading

MI300X = "AMD Instinct MI300X"
TENSILE = "Cijk_Ailk_Bljk_BBS_BH_MT128x128x64_MI16x16x16x1_SN_AF0EM8_AF1EM8_ASEM8_ISA942"
AOTRITON = "attn_fwd.kd"
SDPA = "aten::_scaled_dot_product_flash_attention"
BF16 = ["c10::BFloat16", "c10::BFloat16"]


def _calls(op: str, dims: list, kernel: str, dur: float, n: int = 5) -> TraceBuilder:
    """3 GPU-bound steps on an MI300X: ``n`` calls whose kernels (``dur`` us) run back to back,
    then a synchronize."""
    b = TraceBuilder(cc=(9, 4), gpu_name=MI300X, total_mem=192 * 1024**3)
    b.header["deviceProperties"][0]["numSms"] = 304
    return gpu_bound_calls(b, op, dims, kernel, dur, n, BF16)


@pytest.mark.parametrize("fmt", LOADERS)
def test_one_wave_gemm_is_small_not_large(fmt: str) -> None:
    # M=512, N=8192, K=8192 bf16: 256 output tiles of 128x128 for 304 CUs, one wave 84% filled;
    # 68.7 GFLOP, 52.6 us at peak, 400 us taken (13%): nothing else explains it
    trace = LOADERS[fmt](_calls("aten::mm", [[512, 8192], [8192, 8192]], TENSILE, 400))
    (f,) = analyze_trace(trace, None, Options(only=frozenset({"kernel-efficiency"}))).findings
    assert f.title == "Shapes too small for the GPU: one wave of tiles per call"
    assert (
        "a small shape for the GPU: 256 output tiles of 128x128 make one wave on the 304 CUs"
        in (f.summary)
    )
    assert "(84% filled)" in f.summary and "large, aligned" not in f.summary
    assert "batch" in f.recommendation


@pytest.mark.parametrize("fmt", LOADERS)
def test_the_larger_saving_leads(fmt: str) -> None:
    # 1 x 8 x 8192 x 192 with AOTriton: head dim 192 padded to 256 (a quarter of 2000 us, 500 us
    # a call) and a slow backend (the gap to half the peak, far more): the backend leads
    dims = [[1, 8, 8192, 192]] * 3
    trace = LOADERS[fmt](_calls(SDPA, dims, AOTRITON, 2000))
    (f,) = analyze_trace(trace, None, Options(only=frozenset({"kernel-efficiency"}))).findings
    assert f.title == "Slow attention backend for these shapes"
    assert "head dim 192 padded to 256 by AOTriton" in f.summary  # named beside it
    assert f.est_savings_ms > 2.5  # more than the padding's 500 us x 5 calls


# ---- real traces: no convolution family from a non-convolution kernel

NON_CONV = ("bn_fw", "bn_bw", "nchwToNhwc", "nhwcToNchw", "max_pool", "rms_norm", "convertTensor")


@pytest.mark.parametrize(
    "rel",
    [
        "hta/nccl_parser_config/nccl_data.json.gz",
        "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
        "tracelens/serving/vllm_b200_eager_trace.json.gz",
        "kineto/resnet50_legacy_2020_num_workers_0/worker0.pt.trace.json.gz",
    ],
)
def test_shared_traces_name_no_convolution_from_other_kernels(rel: str) -> None:
    trace = load_trace(shared_trace(rel))
    names = [str(n) for n in trace.kernels["name"].cat.categories]
    others = [n for n in names if any(w.lower() in n.lower() for w in NON_CONV)]
    assert others  # the trace has such kernels
    assert not [n for n in others if kernel_family(n) == "convolution" or parse(n).kind == "conv"]
