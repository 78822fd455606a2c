"""The unit of work in a trace without step markers (advisor.derive.iterations, used through
advisor.derive.steps by every command): built traces whose iterations are known by
construction, and the shared traces whose markers must keep their units."""

from __future__ import annotations

import pytest

from advisor.analysis.pipeline import Options, analyze_trace
from advisor.analysis.summary import inspect_trace
from advisor.derive.kind import trace_kind
from advisor.derive.steps import steady_steps
from advisor.output.header import header
from advisor.trace import load_trace
from tests.conftest import shared_trace
from tests.tracebuilder import TraceBuilder

H100 = "NVIDIA H100 80GB HBM3"
RUNNER = "vllm/v1/worker/gpu_model_runner.py"


def _module(b: TraceBuilder, name: str, ts: float, dur: float, parent=None):  # noqa: ANN001, ANN202
    f = b.frame("torch/nn/modules/module.py", 1, "_call_impl", ts, dur, parent=parent)
    f["name"] = f"nn.Module: {name}"
    return f


def _gemms(
    b: TraceBuilder, ts: float, n: int, every: float, gpu_dur: float = 40.0, kernel: str = "gemm"
) -> None:
    for i in range(n):
        t = ts + i * every
        op = b.op("aten::mm", t, 10)
        b.launch(op, "cudaLaunchKernel", t + 2, 5, kernel=kernel, gpu_ts=t + 8, gpu_dur=gpu_dur)


def engine_frames() -> TraceBuilder:
    """Shape 1: a serving engine whose step exists only as a Python frame
    (``.../gpu_model_runner.py(1002): execute_model``): a 91 ms prefill, then 9 decodes of
    18.7 ms; each holds three top-level module calls (the model, the logits, the sampler). The
    prefill runs its own attention kernel (varlen), the decodes theirs (paged)."""
    b = TraceBuilder(cc=(9, 0), gpu_name=H100)
    t = 0.0
    for i in range(10):
        dur = 91_000.0 if i == 0 else 18_700.0
        step = b.frame(RUNNER, 1002, "execute_model", t, dur - 100)
        parts = (0.85, 0.02, 0.1)
        s = t + 10
        for name, share in zip(("Model_0", "LogitsProcessor_0", "Sampler_0"), parts, strict=True):
            m = _module(b, name, s, share * dur, parent=step)
            attn = "flash_fwd_varlen" if i == 0 else "paged_attention_decode"
            _gemms(b, s + 5, 4, share * dur / 5, gpu_dur=share * dur / 6, kernel=attn)
            s += share * dur + 10
            assert m
        t += dur
    return b


def test_engine_step_carried_by_a_python_frame() -> None:
    t = engine_frames().load()
    k = trace_kind(t)
    assert k.kind == "serving" and "10 engine step" in k.why
    ss = steady_steps(t)
    # 10 engine steps (not 30 module calls); the prefill is other work, not a cold decode
    assert ss.source == "engine step" and ss.unit == f"{RUNNER}(1002): execute_model"
    assert len(ss.steps) == 10 and ss.median_ms() == pytest.approx(18.7, abs=0.05)
    assert not [e for e in ss.excluded if e.step is not None]


def test_inspect_counts_the_steps_analyze_counts() -> None:
    t = engine_frames().load()
    rep = analyze_trace(t, None, Options())
    s = inspect_trace(engine_frames().load())
    assert s["steps"]["count"] == rep.run.steps_profiled == 10
    assert s["step_ms_median"] == pytest.approx(rep.run.step_ms_median)
    assert s["step_unit"] == rep.run.step_unit == f"{RUNNER}(1002): execute_model"
    assert rep.run.step_unit_evidence and "engine step" in rep.run.step_unit_evidence
    notes = [n["text"] for n in header(rep, "now")["notes"]]  # type: ignore[attr-defined, index, union-attr]
    assert any(n.startswith(f"Step unit: {RUNNER}(1002): execute_model (10 engine") for n in notes)


def compiled_iterations() -> TraceBuilder:
    """Shape 2: three top-level calls of one compiled function on one thread, one per
    iteration: 43.5 ms cold (its kernels' modules loaded on first launch), then 5.2 and 5.0 ms;
    recompiled once (``0/1``) for the last."""
    b = TraceBuilder(cc=(9, 0), gpu_name=H100)
    t = 0.0
    for i, dur in enumerate((43_500.0, 5_200.0, 5_000.0)):
        b.op("TorchDynamo Cache Lookup", t, 5)
        b.op(f"Torch-Compiled Region: 0/{0 if i < 2 else 1}", t + 10, dur - 20)
        g = b.op("CompiledFunction", t + 20, dur - 40)
        if i == 0:
            b.runtime("cuModuleLoadData", t + 25, 30_000)
        _gemms(b, t + (30_100 if i == 0 else 30), 10, 400, gpu_dur=350)
        assert g
        t += dur
    return b


def test_compiled_region_calls_are_the_iterations_and_the_cold_one_is_left_out() -> None:
    t = compiled_iterations().load()
    ss = steady_steps(t)
    assert ss.source == "compiled region" and ss.unit == "Torch-Compiled Region: 0/0"
    assert len(ss.steps) == 2  # not one 53.7 ms step
    assert ss.median_ms() == pytest.approx(5.1, abs=0.05)
    warm = [e for e in ss.excluded if e.step is not None]
    assert len(warm) == 1 and "module-load" in warm[0].reason


def loop_inside_one_call(variants: int = 4) -> TraceBuilder:
    """Shape 3: a benchmark of ``variants`` functions, each called once for about 1.8 ms of
    GPU work; the first runs 18 LayerNorm module calls in a Python loop (the others call
    functional ops)."""
    b = TraceBuilder(cc=(9, 0), gpu_name=H100)
    t = 0.0
    for v in range(variants):
        b.frame("bench.py", 10 + v, f"variant_{v}", t, 1_800)
        if v == 0:
            for i in range(18):
                _module(b, "LayerNorm_0", t + 5 + i * 99, 83)
                op = b.op("aten::layer_norm", t + 10 + i * 99, 20)
                b.launch(op, "cudaLaunchKernel", t + 15 + i * 99, 5, kernel="ln", gpu_dur=90)
        else:
            _gemms(b, t + 5, 18, 99, gpu_dur=90)
        t += 1_800
    return b


def test_a_unit_that_covers_little_of_the_work_is_not_a_step() -> None:
    t = loop_inside_one_call().load()
    ss = steady_steps(t)
    assert ss.synthetic and ss.unit == "the recording" and len(ss.steps) == 1
    assert ss.median_ms() == pytest.approx(7.2, abs=0.05)  # every variant stays in the step


def test_a_unit_repeating_inside_another_repeating_unit_is_not_a_step() -> None:
    # a loop wrapped in one range of the user's ("train_loop", not repeated: its calls are the
    # iterations) holds 3 ranges "iteration_N", each holding 4 calls of a model: the ranges
    # are the steps, not the 12 model calls
    b = TraceBuilder(cc=(9, 0), gpu_name=H100)
    b.annotation("train_loop", 0, 6_000)
    for it in range(3):
        t = it * 2_000.0
        b.annotation(f"iteration_{it}", t, 1_900)
        for m in range(4):
            _module(b, "Model_0", t + 10 + m * 450, 400)
            _gemms(b, t + 20 + m * 450, 2, 150)
    ss = steady_steps(b.load())
    assert ss.source == "user range" and ss.unit == "iteration_0" and len(ss.steps) == 3
    assert "inside iteration_0" in ss.why


@pytest.mark.parametrize(
    ("rel", "unit"),
    [
        ("hta/critical_path/alexnet", "forward"),
        ("kineto/resnet50_autograd_api_num_workers_0", "DataLoader.__next__"),
        ("tracelens/mi300/ddp_resnet18_no_pool/train_resnet18.json.gz", "Optimizer.step"),
        ("tracelens/serving/vllm_b200_eager_trace.json.gz", "engine step"),
        (
            "tracelens/serving/sglang_qwen3_30b_a3b_decode/B300-TP-0-DECODE.trace.json.gz",
            "engine step",
        ),
        ("kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz", "ProfilerStep"),
    ],
)
def test_shared_traces_with_markers_keep_their_units(rel: str, unit: str) -> None:
    p = shared_trace(rel)
    if p.is_dir():
        p = next(p.glob("*.json*"))
    ss = steady_steps(load_trace(p))
    assert ss.source == unit
    if rel.endswith("B300-TP-0-DECODE.trace.json.gz"):  # the engine's annotation, not run_batch
        assert ss.unit.startswith("execute_16_context_0") and len(ss.steps) == 1


def test_a_cold_first_iteration_without_recorded_set_up_is_left_out() -> None:
    # the compiled function's first call runs the same kernels and more (autotuning
    # candidates), 8x slower, with nothing the trace names as one-time work: cold
    b = TraceBuilder(cc=(9, 0), gpu_name=H100)
    t = 0.0
    for i, dur in enumerate((40_000.0, 5_000.0, 5_000.0, 5_000.0)):
        b.op("Torch-Compiled Region: 0/0", t + 10, dur - 20)
        if i == 0:
            _gemms(b, t + 20, 50, 700, gpu_dur=600, kernel="triton_mm_candidate")
        _gemms(b, t + (35_020 if i == 0 else 20), 10, 400, gpu_dur=350, kernel="triton_mm")
        t += dur
    ss = steady_steps(b.load())
    assert len(ss.steps) == 3 and ss.median_ms() == pytest.approx(5.0, abs=0.01)
    (cold,) = [e for e in ss.excluded if e.step is not None]
    assert cold.reason == "cold iteration (8.0x the median of the rest)"
