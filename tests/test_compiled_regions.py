"""The compiled-regions view: GPU time per torch.compile region and graph, by kernel kind."""

from __future__ import annotations

import pytest

from advisor.analysis.pipeline import Options, analyze_trace
from advisor.output.tables import compiled_rows
from advisor.trace import load_trace
from tests.conftest import shared_trace
from tests.tracebuilder import TraceBuilder

NONE = Options(only=frozenset({"kernel-efficiency"}))
GEMM = "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x192x64_MI16x16x1_SN_LDSB1_ISA942"
GRAPH = [
    ("triton_poi_fused_add_gelu_0", 20.0),
    (GEMM, 100.0),
    ("triton_red_fused_native_layer_norm_1", 30.0),
    ("aiter::fmha_fwd_hd128_bf16_rtz", 50.0),
    ("triton_per_fused_mean_2", 10.0),
]


def _trace():  # type: ignore[no-untyped-def]
    """3 steps: an eager add (40 us), then a Dynamo frame whose Inductor graph replays a HIP
    graph of five kernels (210 us)."""
    b = TraceBuilder(cc=(9, 4), gpu_name="AMD Instinct MI300X")
    for s in range(3):
        t0 = s * 1000.0
        b.step(s + 1, t0, 1000)
        o = b.op("aten::add", t0 + 5, 10, dims=[[1024, 1024], [1024, 1024]], types=["float"] * 2)
        b.launch(
            o,
            "hipLaunchKernel",
            t0 + 8,
            2,
            kernel="vectorized_elementwise_kernel",
            gpu_ts=t0 + 20,
            gpu_dur=40,
        )
        region = b.op("Torch-Compiled Region: 0/0", t0 + 30, 100)
        b.annotation("## Call CompiledFxGraph fabc123def456 ##", t0 + 40, 80)
        rt = b.runtime("hipGraphLaunch", t0 + 50, 20, region)
        g = t0 + 100
        for name, dur in GRAPH:
            b.kernel(name, g, dur, corr=rt["args"]["correlation"], ext=rt["args"]["External id"])
            g += dur
        b.runtime("hipDeviceSynchronize", t0 + 140, g - t0 - 130)
    return b.load()


def test_time_per_region_by_kind() -> None:
    c = analyze_trace(_trace(), None, NONE).views.compiled
    graph, eager = c.regions
    assert graph.region == "Torch-Compiled Region: 0/0 › graph fabc123def"
    assert graph.calls == 3 and graph.gpu_ms == pytest.approx(0.63)
    assert eager.region.startswith("eager") and eager.gpu_ms == pytest.approx(0.12)
    assert graph.share_pct + eager.share_pct == pytest.approx(100.0)
    assert c.compiled_pct == pytest.approx(84.0)
    kinds = {k.kind: k.ms for k in graph.by_kind}
    assert kinds == {
        "GEMM (hipBLASLt)": 0.3,
        "attention (aiter)": 0.15,
        "Triton reduction": 0.09,
        "Triton pointwise": 0.06,
        "Triton persistent reduction": 0.03,
    }
    (g,) = c.gemms
    assert g.family == "hipBLASLt" and g.tile == "256x192" and g.count == 3
    assert g.limit_pct is None  # replayed from a graph: no shapes, no grid
    rows = compiled_rows(c)
    assert rows is not None and rows["gemms"][0]["limit"] == "unknown (no shapes)"


def test_no_compiled_region_no_view() -> None:
    b = TraceBuilder()
    b.step(1, 0, 100)
    o = b.op("aten::add", 5, 10)
    b.launch(o, "cudaLaunchKernel", 8, 2, kernel="k", gpu_ts=20, gpu_dur=40)
    assert analyze_trace(b.load(), None, NONE).views.compiled is None


@pytest.mark.shared
def test_xdit_flux_compiled_regions() -> None:
    rel = "tracelens/xdit/flux_aiter_profile_trace_rank_0.json.gz"
    c = analyze_trace(load_trace(shared_trace(rel)), None, NONE).views.compiled
    # the four denoise steps replay one Inductor graph: 610 of 684 ms of GPU time
    top = c.regions[0]
    assert top.region.startswith("Torch-Compiled Region: 0/0 › graph ") and top.calls == 4
    assert c.compiled_pct > 85 and sum(r.share_pct for r in c.regions) >= 99.9
    kinds = {k.kind: k.ms for k in top.by_kind}
    assert kinds["GEMM (hipBLASLt)"] > 400 and kinds["attention (aiter)"] > 100
    assert {"Triton pointwise", "Triton reduction", "Triton persistent reduction"} <= set(kinds)
    gemms = c.gemms
    assert all(g.family == "hipBLASLt" and g.tile for g in gemms)
    # eager hipBLASLt GEMMs (text encoders, with shapes) get the share of the MI300X's limit
    eager = [g for g in gemms if g.region.startswith("eager")]
    assert eager and all(20 < g.limit_pct < 50 for g in eager)
