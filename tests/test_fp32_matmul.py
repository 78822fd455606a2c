"""fp32-matmul: FP32 matmul/conv kernels on CUDA cores of Tensor Core GPUs."""

from __future__ import annotations

import re

import pytest

from tests.detector_helpers import analyze, finding, skip_reason
from tests.tracebuilder import TraceBuilder

F32 = ["float", "float"]


def _mm(
    kernel: str,
    cc: tuple[int, int] | None = (8, 0),
    types: list[str] | None = None,
    name: str = "NVIDIA A100-SXM4-80GB",
    op: str = "aten::mm",
) -> TraceBuilder:
    """3 steps of 2 ms: one matmul op per step launching a 500 us kernel the host then waits
    for (the kernel's time is on the step's critical path)."""
    b = TraceBuilder(cc=cc, gpu_name=name)
    for s in range(3):
        t = s * 2000.0
        b.step(s + 1, t, 2000)
        b.frame("model.py", 12, "forward", t + 5, 100)
        o = b.op(op, t + 10, 50, dims=[[256, 512], [512, 256]], types=types or F32)
        b.launch(o, "cudaLaunchKernel", t + 20, 5, kernel=kernel, gpu_ts=t + 30, gpu_dur=500)
        b.runtime("cudaDeviceSynchronize", t + 40, 495)
    return b


def test_v100_recommends_fp16_autocast_not_tf32() -> None:
    f = finding(
        analyze(_mm("volta_sgemm_128x64_nn", cc=(7, 0), name="Tesla V100").load(), "fp32-matmul"),
        "fp32-matmul",
    )
    assert f is not None
    assert f.est_savings_ms == pytest.approx(0.25)  # 0.5 ms x (1 - 1/2)
    assert f.est_savings_range_ms == pytest.approx(
        (0.5 * (1 - 1 / 1.3), 0.5 * (1 - 1 / 3)), abs=1e-3
    )
    # an inference trace (no backward): fp16 autocast, and no gradients to scale
    assert "float16" in f.recommendation and "GradScaler" not in f.recommendation + f.snippet
    assert "set_float32_matmul_precision" not in f.recommendation + f.snippet
    assert "compute capability 7.0" in f.summary and f.locations[0].file == "model.py"


def test_a100_recommends_tf32_then_bf16_when_tf32_is_already_on() -> None:
    tr = _mm("ampere_sgemm_128x64_nn").load()
    f = finding(analyze(tr, "fp32-matmul"), "fp32-matmul")
    assert f is not None and 'set_float32_matmul_precision("high")' in f.recommendation
    ctx = {"backends": {"float32_matmul_precision": "high", "matmul_allow_tf32": True}}
    f2 = finding(analyze(tr, "fp32-matmul", ctx), "fp32-matmul")
    assert f2 is not None and "already allowed" in f2.recommendation
    assert "bfloat16" in f2.recommendation


def test_cublas_xmma_ffma_kernels_are_fp32_cuda_core() -> None:
    name = (
        "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_"
        "aligna4_alignc4_execute_kernel__5x_cublas"
    )
    f = finding(
        analyze(_mm(name, cc=(9, 0), name="NVIDIA H100").load(), "fp32-matmul"), "fp32-matmul"
    )
    assert f is not None and f.est_savings_ms == pytest.approx(0.25)


def test_conv_on_a100_points_at_bf16_and_cudnn_flag() -> None:
    b = _mm("cudnn_ampere_scudnn_128x64_relu_xregs_large_nn_v1", op="aten::conv2d")
    f = finding(analyze(b.load(), "fp32-matmul"), "fp32-matmul")
    assert f is not None and "convolution" in f.summary
    assert "cuDNN already allows TF32" in f.recommendation
    f2 = finding(
        analyze(b.load(), "fp32-matmul", {"backends": {"cudnn_allow_tf32": False}}), "fp32-matmul"
    )
    assert f2 is not None and "allow_tf32` is off" in f2.recommendation


@pytest.mark.parametrize(
    "kernel",
    [
        "ampere_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn",
        "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align1>(Params)",
        "sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x16",
        "volta_h884gemm_64x64_ldg8_nn",
    ],
)
def test_tensor_core_kernels_do_not_fire(kernel: str) -> None:
    assert finding(analyze(_mm(kernel).load(), "fp32-matmul"), "fp32-matmul") is None


def test_no_tensor_cores_half_inputs_and_amd_do_not_fire() -> None:
    pascal = _mm("maxwell_sgemm_128x64_nn", cc=(6, 1), name="Tesla P100")
    assert finding(analyze(pascal.load(), "fp32-matmul"), "fp32-matmul") is None
    half = _mm("gemm_kernel_generic", types=["c10::Half", "c10::Half"])
    assert finding(analyze(half.load(), "fp32-matmul"), "fp32-matmul") is None
    amd = _mm("Cijk_Ailk_Bljk_SB_MT64x64x16", cc=(9, 0), name="AMD Instinct MI250X")
    assert "AMD" in (skip_reason(analyze(amd.load(), "fp32-matmul"), "fp32-matmul") or "")


def test_missing_data() -> None:
    # no deviceProperties: the architecture comes from kernel names when they carry it
    inferred = finding(
        analyze(_mm("volta_sgemm_128x64_nn", cc=None).load(), "fp32-matmul"), "fp32-matmul"
    )
    assert inferred is not None and inferred.confidence == "low"
    assert "from kernel names" in inferred.summary and "float16" in inferred.recommendation
    unknown = analyze(_mm("gemm_kernel", cc=None).load(), "fp32-matmul")
    assert "unknown GPU architecture" in (skip_reason(unknown, "fp32-matmul") or "")
    cpu = TraceBuilder(cc=None)
    cpu.step(1, 0, 100)
    cpu.op("aten::mm", 1, 10, types=F32)
    assert (
        skip_reason(analyze(cpu.load(), "fp32-matmul"), "fp32-matmul")
        == "no GPU activity in this trace"
    )


def test_lowercase_pattern_twins_match_like_the_case_insensitive_patterns() -> None:
    from advisor.detectors._matmul import _LOWER, _found

    names = [
        "volta_SGEMM_128x64_NN",
        "sm80_XMMA_gemm_F32F32_F32F32_F32_tn_n_FFMA",
        "void cutlass::Kernel<cutlass_80_TensorOp_s1688gemm_bf16>",
        "Memset (Device)",
        "ampere_fp16_s16816gemm_fp16_256x128_ldg8_f2f_stages_32x3_nn",
        "",
        "kelvin_\u212a_sgemm",
        "long_\u017f_gemm",
        "h\u0130gemm",
    ]
    for rx, lower in _LOWER.items():
        assert rx.flags & re.IGNORECASE and rx.pattern == rx.pattern.lower() == lower.pattern
        for n in names:
            assert _found(rx, n) == bool(rx.search(n)), (rx.pattern, n)
