"""kernel-efficiency: achieved FLOP/s and bytes/s against the device's roofline."""

from __future__ import annotations

import pytest
from advisor.detectors._roofline import op_work

from advisor.analysis.pipeline import Options, analyze_trace
from advisor.trace import load_trace
from tests.conftest import SAMPLES, shared_trace
from tests.tracebuilder import TraceBuilder

ID = "kernel-efficiency"
ONLY = Options(only=frozenset({ID}))
H100 = "NVIDIA H100 80GB HBM3"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"
FLASH = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<96, 128, 64, 4>>(Flash_fwd_params)"
BF16 = ["c10::BFloat16", "c10::BFloat16"]


def _trace(
    op: str,
    dims: list,
    kernel: str,
    dur: float,
    n: int = 5,
    types: list | None = None,
    gpu_name: str = H100,
    shapes: bool = True,
):  # type: ignore[no-untyped-def]
    """3 GPU-bound steps: ``n`` op calls 30 us apart, their kernels (``dur`` us) back to back on
    the GPU, then a synchronize that waits for the last one."""
    b = TraceBuilder(cc=(9, 0), gpu_name=gpu_name)
    span = 100 + n * dur + 100
    for s in range(3):
        t0 = s * span
        b.step(s + 1, t0, span)
        for i in range(n):
            ts = t0 + 10 + i * 30
            o = b.op(
                op, ts, 20, dims=dims if shapes else None, types=(types or BF16) if shapes else None
            )
            b.launch(
                o,
                "cudaLaunchKernel",
                ts + 5,
                5,
                kernel=kernel,
                gpu_ts=t0 + 100 + i * dur,
                gpu_dur=dur,
            )
        sync_ts = t0 + 10 + n * 30
        b.runtime("cudaDeviceSynchronize", sync_ts, t0 + 100 + n * dur + 10 - sync_ts)
    return b.load()


def test_work_from_shapes() -> None:
    w = op_work("aten::addmm", [[96], [1024, 512], [512, 96]], "float32")
    assert w is not None and w.flops == 2 * 1024 * 96 * 512 and w.tiles == 8
    assert w.nbytes == 4 * (1024 * 512 + 512 * 96 + 1024 * 96)
    a = op_work("aten::_scaled_dot_product_flash_attention", [[2, 8, 1000, 72]] * 3, "bfloat16")
    assert a is not None and a.flops == 2 * 2 * 8 * 1000 * 1000 * 144 and a.dims["E"] == 72
    c = op_work("aten::conv2d", [[8, 64, 56, 56], [128, 64, 3, 3]], "float16", [8, 128, 28, 28])
    assert c is not None and c.flops == 2 * 8 * 28 * 28 * 128 * 64 * 9
    assert op_work("aten::conv2d", [[8, 64, 56, 56], [128, 64, 3, 3]], "float16") is None
    assert (
        op_work("aten::conv2d", [[8, 64, 56, 56], [64, 1, 3, 3]], "float16", [8, 64, 56, 56])
        is None
    )
    assert op_work("aten::mm", [[4, 5], [6, 7]], "float32") is None  # shapes that do not fit
    assert op_work("aten::mm", [[4, 5], [5, 7]], None) is None  # no dtype


def test_slow_large_gemm_is_reported() -> None:
    # 4096^3 bf16: 137.4 GFLOP, 139 us at 989.5 TFLOP/s; 1000 us per call = 14% of the roofline
    (f,) = analyze_trace(
        _trace("aten::mm", [[4096, 4096], [4096, 4096]], GEMM, 1000), None, ONLY
    ).findings
    assert "below 50% of the H100 SXM roofline" in f.summary
    assert "aten::mm [4096x4096 4096x4096] at 14%" in f.summary
    assert "a large, aligned shape whose kernel is slow" in f.summary
    # per call: 1000 - 138.9 / 0.5 = 722.2 us; 5 calls in the one step
    assert f.est_savings_ms == pytest.approx(3.611, abs=0.01)
    assert "137.4 TFLOP/s" in f.evidence[0].what and f.evidence[0].count == 15
    assert any(a.startswith("Replayed:") for a in f.assumptions)
    assert "max-autotune" in f.snippet


def test_attention_head_dim_and_query_blocks() -> None:
    tr = _trace("aten::_scaled_dot_product_flash_attention", [[2, 8, 500, 72]] * 3, FLASH, 500)
    (f,) = analyze_trace(tr, None, ONLY).findings
    what = f.evidence[0].what
    assert "head dim 72 padded to 96 by the kernel: 25% of the math is wasted" in what
    assert "too few query blocks: 64 (batch x heads x L/128) for 108 SMs" in what
    assert "head dims of 64 or 128" in f.recommendation


def test_small_gemm_causes_and_one_row_with_misaligned_dims() -> None:
    tr = _trace("aten::addmm", [[100], [512, 1000], [1000, 100]], GEMM, 100)
    (f,) = analyze_trace(tr, None, ONLY).findings
    what = f.evidence[0].what
    assert "too few tiles: 4 128x128 output tiles for 108 SMs" in what
    assert "memory-bound" in what and "dims not multiples of 8: N=100 (see misaligned-dims)" in what
    # per call: 100 us - 5 us floor / 0.5 = 90 us of kernel time; replayed, the 30 us launch
    # cadence limits what the faster kernels give back
    assert f.est_savings_ms == pytest.approx(0.37, abs=0.005)
    # misaligned-dims claims the same kernels: one row, the larger saving leads (issue 25)
    both = Options(only=frozenset({"kernel-efficiency", "misaligned-dims"}))
    (row,) = analyze_trace(tr, None, both).findings
    assert row.id == "kernel-efficiency" and [r.id for r in row.related] == ["misaligned-dims"]


def test_efficient_or_short_kernels_are_not_reported() -> None:
    good = _trace("aten::mm", [[4096, 4096], [4096, 4096]], GEMM, 200)  # 69% of the roofline
    assert analyze_trace(good, None, ONLY).findings == ()
    short = _trace("aten::mm", [[64, 64], [64, 64]], GEMM, 8, n=200)  # under 10 us: tiny-kernels
    assert analyze_trace(short, None, ONLY).findings == ()


def test_missing_data_is_never_claimed() -> None:
    rep = analyze_trace(
        _trace("aten::mm", [[4096, 4096], [4096, 4096]], GEMM, 1000, shapes=False), None, ONLY
    )
    assert rep.findings == () and "no input shapes" in rep.skipped[0].reason
    rep = analyze_trace(
        _trace(
            "aten::mm", [[4096, 4096], [4096, 4096]], GEMM, 1000, gpu_name="NVIDIA GeForce GTX 1080"
        ),
        None,
        ONLY,
    )
    assert rep.findings == ()
    assert rep.skipped[0].reason.startswith("no peak figures for NVIDIA GeForce GTX 1080")
    cpu = TraceBuilder(cc=None)
    cpu.step(1, 0, 1000)
    cpu.op("aten::mm", 10, 500, dims=[[4096, 4096], [4096, 4096]], types=["float", "float"])
    rep = analyze_trace(cpu.load(), None, ONLY)
    assert rep.findings == () and rep.skipped[0].reason == "no GPU activity in this trace"


# ---- real traces


@pytest.mark.shared
def test_timesformer_h100_materialized_attention() -> None:
    rel = "tracelens/h100/facebook_timesformer-base-finetuned-k400__1016002.json.gz"
    (f,) = analyze_trace(load_trace(shared_trace(rel)), None, ONLY).findings
    # the unfused attention: a [8, 12, 3137, 3137] softmax at 660 GB/s of 3350, and its two bmm
    assert "aten::_softmax [8x12x3137x3137]" in f.summary and "at 20%" in f.summary
    assert "attention scores materialized" in f.evidence[0].what
    assert "660 GB/s" in f.evidence[0].what
    assert "aten::bmm [96x3137x64 96x64x3137]" in f.evidence[1].what
    assert "scaled_dot_product_attention" in f.recommendation + f.snippet
    assert "would take 58.7 ms less" in f.summary  # kernel time; the replay finds 57.8 ms
    assert 50.0 < f.est_savings_ms <= 58.7 and f.severity == "high"


@pytest.mark.shared
def test_control_a100_small_linear_layers() -> None:
    (f,) = analyze_trace(
        load_trace(shared_trace("hta/trace_diff/control/control.json.gz")), None, ONLY
    ).findings
    assert "A100 SXM 40GB roofline (108 SMs)" in f.summary
    small = [
        e.what for e in f.evidence if e.what.startswith("aten::addmm [512 1024x9375 9375x512]")
    ]
    assert small and "too few tiles: 32 128x128 output tiles for 108 SMs" in small[0]
    # 3.92 ms per step of kernel time above half the roofline, but the replay finds the host
    # limits these steps: information, not a saving
    assert "would take 3.92 ms less" in f.summary and "the host, not the GPU, limits" in f.summary
    assert f.severity == "info" and f.est_savings_ms < 0.1


QUIET = [
    "kineto/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz",
    "kineto/resnet50_num_workers_4/worker0.1623213129365.pt.trace.json.gz",
    "tracelens/mi300/ddp_resnet18_no_pool/train_resnet18.json.gz",
]


@pytest.mark.shared
@pytest.mark.parametrize("rel", QUIET)
def test_quiet_on_efficient_conv_nets(rel: str) -> None:
    rep = analyze_trace(load_trace(shared_trace(rel)), None, ONLY)
    assert rep.findings == () and not rep.errored and not rep.skipped


@pytest.mark.parametrize("path", sorted(SAMPLES.glob("*.json.gz")), ids=lambda p: p.name)
def test_quiet_on_cpu_sample_traces(path) -> None:  # type: ignore[no-untyped-def]
    rep = analyze_trace(load_trace(path), None, ONLY)
    assert rep.findings == () and not rep.errored
