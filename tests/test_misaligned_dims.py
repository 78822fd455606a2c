"""misaligned-dims: GEMM/conv dimensions that are not multiples of 8 (16-bit) or 4 (TF32)."""

from __future__ import annotations

import pytest
from advisor.detectors._matmul import gemm_dims, pad_to

from advisor.analysis.pipeline import Options, analyze_trace
from tests.detector_helpers import analyze, finding, skip_reason
from tests.tracebuilder import TraceBuilder

HALF = ["c10::Half", "c10::Half", "c10::Half", "Scalar", "Scalar"]
TC16 = "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x3_nn"
HALF_SIMT = "void gemmSN_NN_kernel<__half, 256, 4, 2, 8, 3, 4>(cublasGemmSmallNParams)"
TF32 = "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4>(Params)"


def _addmm(
    k: int,
    n: int,
    types: list[str],
    kernel: str,
    cc: tuple[int, int] | None = (8, 0),
    shapes: bool = True,
) -> TraceBuilder:
    """3 steps of 2 ms; per step nn.Linear(k, n) on a batch of 4096: linear > addmm > kernel,
    which the host then waits for (the kernel is on the step's critical path)."""
    b = TraceBuilder(cc=cc)
    for s in range(3):
        t = s * 2000.0
        b.step(s + 1, t, 2000)
        b.frame("model.py", 21, "forward", t + 5, 100)
        dims = [[n], [4096, k], [k, n], [], []] if shapes else None
        lin = b.op(
            "aten::linear",
            t + 9,
            60,
            dims=[[4096, k], [n, k], [n]] if shapes else None,
            types=types[:3],
        )
        o = b.op("aten::addmm", t + 10, 50, dims=dims, types=types)
        assert lin
        if kernel:
            b.launch(o, "cudaLaunchKernel", t + 20, 5, kernel=kernel, gpu_ts=t + 30, gpu_dur=400)
            b.runtime("cudaDeviceSynchronize", t + 70, 365)
    return b


def test_half_vocab_size_is_padded_to_a_multiple_of_8() -> None:
    f = finding(
        analyze(_addmm(1024, 30001, HALF, TC16).load(), "misaligned-dims"), "misaligned-dims"
    )
    assert f is not None
    assert "N=30001 -> 30008" in f.evidence[0].what and f.evidence[0].count == 3
    assert f.evidence[0].total_ms == pytest.approx(1.2)
    # the kernel already runs on Tensor Cores: padding buys at most 5% of its 0.4 ms per step
    assert f.est_savings_ms == pytest.approx(0.05 * 0.4)
    assert f.locations[0].line == 21 and "30008" in f.snippet


def test_a_kernel_off_the_tensor_cores_gains_more_from_padding() -> None:
    f = finding(
        analyze(_addmm(1024, 30001, HALF, HALF_SIMT).load(), "misaligned-dims"), "misaligned-dims"
    )
    assert f is not None
    assert f.est_savings_ms == pytest.approx(0.2 * 0.4)  # 20% of 0.4 ms of kernels per step
    assert f.est_savings_range_ms == pytest.approx((0.1 * 0.4, 0.5 * 0.4), abs=0.002)


def test_fp32_as_tf32_uses_multiples_of_4() -> None:
    f32 = ["float", "float", "float", "Scalar", "Scalar"]
    f = finding(analyze(_addmm(2798, 64, f32, TF32).load(), "misaligned-dims"), "misaligned-dims")
    assert f is not None and "K=2798 -> 2800" in f.evidence[0].what
    # 100 is a multiple of 4: fine for TF32 (it would not be for 16-bit)
    assert (
        finding(analyze(_addmm(100, 64, f32, TF32).load(), "misaligned-dims"), "misaligned-dims")
        is None
    )
    # FP32 on CUDA cores (no TF32): alignment is fp32-matmul's concern, not claimed here
    assert (
        finding(
            analyze(_addmm(2798, 64, f32, "ampere_sgemm_128x64_nn").load(), "misaligned-dims"),
            "misaligned-dims",
        )
        is None
    )
    # FP32 before compute capability 8.0: no TF32 at all
    assert (
        finding(
            analyze(
                _addmm(2798, 64, f32, "volta_sgemm_128x64_nn", cc=(7, 0)).load(), "misaligned-dims"
            ),
            "misaligned-dims",
        )
        is None
    )


def test_unaligned_kernel_variants_are_left_to_kernel_efficiency() -> None:
    # the same shape on CUTLASS's align1 variant: kernel-efficiency names the cause and values
    # padding from the device's limits; the kernel is claimed in that one row
    f32 = ["float", "float", "float", "Scalar", "Scalar"]
    tr = _addmm(2798, 64, f32, TF32.replace("align4", "align1")).load()
    rep = analyze_trace(tr, None, Options(only=frozenset({"misaligned-dims", "kernel-efficiency"})))
    assert finding(rep, "misaligned-dims") is None
    f = finding(rep, "kernel-efficiency")
    assert f is not None and "dims not multiples of 4 (K=2798)" in f.summary


def test_aligned_and_tiny_dims_do_not_fire() -> None:
    assert (
        finding(
            analyze(_addmm(1024, 30008, HALF, TC16).load(), "misaligned-dims"), "misaligned-dims"
        )
        is None
    )
    assert (
        finding(analyze(_addmm(1024, 5, HALF, TC16).load(), "misaligned-dims"), "misaligned-dims")
        is None
    )


def test_missing_shapes_and_cpu_only() -> None:
    rep = analyze(_addmm(1024, 30001, HALF, TC16, shapes=False).load(), "misaligned-dims")
    assert "record_shapes" in (skip_reason(rep, "misaligned-dims") or "")
    cpu = _addmm(1024, 30001, ["float", "float", "float", "Scalar", "Scalar"], "", cc=None)
    f = finding(analyze(cpu.load(), "misaligned-dims"), "misaligned-dims")
    assert f is not None and f.severity == "info" and f.est_savings_ms == 0
    assert "N=30001 -> 30008" in f.evidence[0].what and "Tensor Core" in f.summary


def test_gemm_dims_and_padding() -> None:
    assert gemm_dims("aten::mm", [[8, 30], [30, 16]]) == {"M": 8, "K": 30, "N": 16}
    assert gemm_dims("aten::bmm", [[4, 8, 30], [4, 30, 16]]) == {"M": 8, "K": 30, "N": 16}
    assert gemm_dims("aten::conv2d", [[32, 3, 224, 224], [64, 3, 7, 7], [64]]) == {
        "C_in": 3,
        "C_out": 64,
    }
    # depthwise convolution (groups = channels): not one GEMM, not judged
    assert gemm_dims("aten::conv2d", [[32, 64, 56, 56], [64, 1, 3, 3]]) is None
    assert gemm_dims("aten::mm", [[8], [30, 16]]) is None
    assert pad_to(30001, 8) == 30008 and pad_to(2798, 4) == 2800 and pad_to(64, 8) == 64
