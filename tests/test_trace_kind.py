"""What the trace is (run.trace_kind) and the step unit each kind gets."""

from __future__ import annotations

import pytest

from advisor.analysis.pipeline import Options, analyze_path, analyze_trace, for_capture
from advisor.derive.kind import is_engine_step, trace_kind
from advisor.derive.quality import trace_quality
from advisor.derive.steps import steady_steps
from advisor.detect.draft import Draft
from advisor.trace import load_trace
from tests.conftest import shared_trace
from tests.tracebuilder import TraceBuilder

H100 = "NVIDIA H100 80GB HBM3"


def _calls(b: TraceBuilder, name: str, n: int, t0: float = 0.0, every: float = 100.0) -> None:
    for i in range(n):
        ts = t0 + i * every
        op = b.op(name, ts, 30)
        b.launch(op, "cudaLaunchKernel", ts + 5, 5, kernel="k", gpu_ts=ts + 20, gpu_dur=40)


def test_engine_step_names() -> None:
    for n in (
        "execute_model",
        "execute_context_1(888_788544)_generation_0(0)",
        "execute_16_context_0(sq0sk0)_generation_16(sq16sk8193)",
        "step[DECODE bs=16]",
        "step[PREFILL bs=4]",
    ):
        assert is_engine_step(n), n
    for n in ("ProfilerStep#3", "Optimizer.step#AdamW.step", "aten::step", "stepper", "executor"):
        assert not is_engine_step(n), n


def test_serving_engine_step_is_the_step() -> None:
    b = TraceBuilder(cc=(9, 0), gpu_name=H100)
    b.annotation("execute_context_1(888_788544)_generation_0(0)", 0, 5000)
    for layer in range(4):  # layers inside one engine call are not steps
        b.op("vllm::moe_forward", 100 + layer * 1000, 800)
    _calls(b, "aten::mm", 40, t0=100, every=110)
    t = b.load()
    k = trace_kind(t)
    assert k.kind == "serving" and "1 engine step" in k.why
    ss = steady_steps(t)
    assert ss.source == "engine step" and len(ss.steps) == 1
    assert ss.median_ms() == pytest.approx(5.0, abs=0.01)


def test_micro_benchmark_is_one_step_of_iterations() -> None:
    b = TraceBuilder(cc=(9, 0), gpu_name=H100)
    _calls(b, "aten::mm", 10)
    b.runtime("cudaDeviceSynchronize", 1000, 50)
    t = b.load()
    k = trace_kind(t)
    assert (k.kind, k.iterations, k.op) == ("micro-benchmark", 10, "aten::mm")
    ss = steady_steps(t)
    assert ss.source == "micro-benchmark: 10 calls of aten::mm" and ss.synthetic
    assert len(ss.steps) == 1


def test_one_model_call_per_iteration_never_an_inner_module() -> None:
    b = TraceBuilder(cc=(9, 0), gpu_name=H100)
    for it in range(3):
        t0 = it * 2000.0
        outer = b.frame("nn.Module: Model_0", 0, "", t0, 1500)  # the profiler's module event
        outer["name"] = "nn.Module: Model_0"
        for blk in range(4):
            inner = b.frame("x", 0, "", t0 + 10 + blk * 300, 280, parent=outer)
            inner["name"] = f"nn.Module: Block_{blk}"
        _calls(b, "aten::linear", 4, t0=t0 + 20, every=300)
    t = b.load()
    assert trace_kind(t).kind == "inference"
    ss = steady_steps(t)
    assert ss.source == "model call" and len(ss.steps) == 3  # not 12 blocks


def test_custom_ops_named_forward_are_not_steps() -> None:
    b = TraceBuilder(cc=(9, 0), gpu_name=H100)
    for i in range(6):
        op = b.op("vllm::moe_forward", i * 100.0, 50)
        b.launch(
            op, "cudaLaunchKernel", i * 100.0 + 5, 5, kernel="k", gpu_ts=i * 100.0 + 20, gpu_dur=40
        )
        b.op("aten::add", i * 100.0 + 60, 10)
        b.op("aten::mul", i * 100.0 + 75, 10)
        b.op("aten::cat", i * 100.0 + 90, 5)
    ss = steady_steps(b.load())
    assert ss.source == "whole trace"


def _capture() -> TraceBuilder:
    b = TraceBuilder(cc=(9, 4), gpu_name="AMD Instinct MI300X", total_mem=192 * 1024**3)
    b.step(1, 0, 3000)
    b.runtime("hipStreamBeginCapture", 10, 5)
    for i in range(30):
        op = b.op("aten::add", 20 + i * 80, 60)
        b.runtime("hipStreamGetCaptureInfo", 25 + i * 80, 1, op)
        b.runtime("hipLaunchKernel", 30 + i * 80, 5, op)  # recorded into the graph: no kernel
    b.runtime("hipStreamEndCapture", 2500, 5)
    b.runtime("hipGraphInstantiateWithFlags", 2510, 400)
    return b


def test_capture_trace() -> None:
    t = _capture().load()
    k = trace_kind(t)
    assert k.kind == "capture" and "30 of 30 launch calls" in k.why
    kinds = [q.kind for q in trace_quality(t)]
    assert "capture" in kinds and "lost-launch" not in kinds
    rep = analyze_trace(t, None, Options())
    assert rep.run.trace_kind == "capture"
    assert all(f.severity == "info" and f.est_savings_ms == 0 for f in rep.findings)


def test_capture_drafts() -> None:
    from advisor.derive.kind import TraceKind

    d = Draft(
        id="gpu-idle",
        title="t",
        est_savings_ms=3.0,
        summary="s",
        recommendation="r",
        confidence="high",
        snippet="",
    )
    m = Draft(
        id="misaligned-dims",
        title="t",
        est_savings_ms=1.0,
        summary="s",
        recommendation="r",
        confidence="high",
        snippet="",
    )
    kept, skipped = for_capture([d, m], TraceKind("capture", "x"))
    assert [x.id for x in kept] == ["misaligned-dims"] and kept[0].latent
    assert kept[0].est_savings_ms == 0 and skipped[0][0] == "gpu-idle"
    assert for_capture([d], TraceKind("training", "x")) == ([d], [])


SHARED_KINDS = [
    ("tracelens/microbench/gemm_01_compute_few_tiles.json.gz", "micro-benchmark"),
    ("tracelens/microbench/sdpa_03_short_seq_overhead.json.gz", "micro-benchmark"),
    ("tracelens/serving/vllm_b200_eager_trace.json.gz", "serving"),
    ("tracelens/serving/sglang_qwen3_30b_a3b_decode/B300-TP-0-DECODE.trace.json.gz", "serving"),
    ("tracelens/serving/capture/sglang_decode_bs_32_rank0.json.gz", "capture"),
    ("tracelens/serving/capture/vllm_decode_full_graph_capture_rank_0.pt.trace.json.gz", "capture"),
    ("tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz", "inference"),
    ("hta/df_index_resolver/df_index_resolver.json.gz", "training"),
]


@pytest.mark.shared
@pytest.mark.parametrize(
    ("rel", "kind"), SHARED_KINDS, ids=[k[0].split("/")[-1] for k in SHARED_KINDS]
)
def test_shared_kinds(rel: str, kind: str) -> None:
    assert trace_kind(load_trace(shared_trace(rel))).kind == kind


@pytest.mark.shared
def test_shared_vllm_eager_is_one_engine_step() -> None:
    t = load_trace(shared_trace("tracelens/serving/vllm_b200_eager_trace.json.gz"))
    ss = steady_steps(t)
    assert ss.source == "engine step" and len(ss.steps) == 1
    assert ss.median_ms() == pytest.approx(87.4, abs=1.0)  # not 36 layers of 1.9 ms


@pytest.mark.shared
@pytest.mark.parametrize(
    "rel",
    [
        "tracelens/serving/capture/sglang_decode_bs_32_rank0.json.gz",
        "tracelens/serving/capture/vllm_decode_full_graph_capture_rank_0.pt.trace.json.gz",
    ],
)
def test_shared_capture_claims_nothing(rel: str) -> None:
    _, rep = analyze_path(shared_trace(rel))
    assert all(f.severity == "info" for f in rep.findings)
    assert not any("CUDA graph" in f.recommendation for f in rep.findings)
    assert any(q.what.startswith("graph capture") for q in rep.run.trace_quality)
