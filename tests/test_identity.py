"""Which GPU a trace ran on: deviceProperties, else kernel names, else what the user says."""

from __future__ import annotations

import pytest

from advisor.analysis.pipeline import Options, analyze_trace
from advisor.errors import AdvisorError
from advisor.output.terminal import device_label
from advisor.runfacts import RunFacts
from advisor.trace import load_trace
from advisor.trace.identity import kernel_arch, with_device
from tests.conftest import shared_trace
from tests.tracebuilder import TraceBuilder

TENSILE = "Cijk_Ailk_Bljk_BBS_BH_MT256x128x64_MI16x16x16x1_SN_ISA942_IU1_K1_WG64_4_1"


def test_kernel_arch_from_names() -> None:
    assert kernel_arch([TENSILE]) == ("gfx942", "ISA tag 942 in 1 kernel name(s)", True)
    assert kernel_arch(["ck_fmha_fwd_gfx950_kernel"])[:2] == (
        "gfx950",
        "ISA tag 950 in 1 kernel name(s)",
    )  # type: ignore[index]
    # sm90a/sm100a code runs on its own generation only: exact
    assert kernel_arch(["sm90_xmma_gemm_bf16bf16", "cutlass_80_tensorop_s1688gemm"])[::2] == (  # type: ignore[index]
        "sm_90",
        True,
    )
    assert kernel_arch(["cutlass3x_sm100_tensorop_gemm"])[::2] == ("sm_100", True)  # type: ignore[index]
    # older tags and kernel families are lower bounds: sm80 code runs on sm86, sm89, sm90...
    assert kernel_arch(["ampere_sgemm_128x64_nn", "sm80_xmma_gemm_f32"])[::2] == ("sm_80", False)  # type: ignore[index]
    assert kernel_arch(["volta_sgemm_128x64_nn"])[::2] == ("sm_70", False)  # type: ignore[index]
    assert kernel_arch(["void at::native::vectorized_elementwise_kernel<4>()", "summary90"]) is None


def _unlisted(kernel: str) -> TraceBuilder:
    b = TraceBuilder(cc=None)
    b.step(1, 0, 1000)
    op = b.op("aten::mm", 10, 500, dims=[[4096, 4096], [4096, 4096]], types=["c10::BFloat16"] * 2)
    b.launch(op, "hipLaunchKernel", 20, 5, kernel=kernel, gpu_ts=30, gpu_dur=900)
    return b


def test_device_inferred_from_kernel_names_and_said() -> None:
    rep = analyze_trace(_unlisted(TENSILE).load(), None, Options(only=frozenset({"gpu-idle"})))
    run = rep.run
    assert run.device == "AMD Instinct MI300X"
    assert run.device_source.startswith("inferred from kernel names (ISA tag 942")
    assert "MI300X assumed" in run.device_source and run.compute_capability == "9.4"
    assert device_label(run) == "AMD Instinct MI300X (inferred)"
    # a lower bound names the architecture and no part: no peak figures
    t = _unlisted("ampere_sgemm_128x64_nn").load()
    d = t.device(0)
    assert d is not None and d.name == "NVIDIA GPU (sm_80 or newer)" and d.num_sms is None
    assert d.compute_capability == (8, 0)


def test_device_override() -> None:
    t = with_device(_unlisted(TENSILE).load(), "h100")
    d = t.device(0)
    assert d is not None and d.name == "NVIDIA H100 SXM" and d.source == "--device"
    assert d.num_sms == 132 and d.compute_capability == (9, 0)
    rep = analyze_trace(_unlisted(TENSILE).load(), None, Options(device="MI325X"))
    assert rep.run.device == "AMD Instinct MI325X" and rep.run.device_source == "--device"
    with pytest.raises(AdvisorError, match="unknown GPU 'GTX 480'"):
        with_device(_unlisted(TENSILE).load(), "GTX 480")
    with pytest.raises(AdvisorError, match="--device"):
        Options(device="GTX 480").validate()


def test_header_never_calls_a_gpu_trace_cpu_only() -> None:
    assert device_label(RunFacts(gpu_busy_pct=70.0)) == "unknown GPU"
    assert device_label(RunFacts(gpu_busy_pct=None)).startswith("no GPU activity")


@pytest.mark.shared
def test_shared_flow_linked_microbenchmark_is_an_mi300x() -> None:
    t = load_trace(shared_trace("tracelens/microbench/gemm_01_compute_few_tiles.json.gz"))
    d = t.meta.devices[0]
    assert d.name == "AMD Instinct MI300X" and d.source.startswith("inferred from kernel names")
    assert d.num_sms == 304 and t.meta.platform == "rocm"


@pytest.mark.shared
def test_shared_unnamed_rocm_device_is_named() -> None:
    rel = "tracelens/serving/capture/vllm_decode_full_graph_capture_rank_0.pt.trace.json.gz"
    d = load_trace(shared_trace(rel)).meta.devices[0]
    assert d.name == "AMD Instinct MI300X" and d.source.startswith("deviceProperties without")
