"""A window that records torch.compile compiling (trace kind ``compile``): its operators are
compilation, never a step's host overhead; and graph breaks counted from the compiled regions'
nesting when the trace has no Python stacks."""

from __future__ import annotations

import pytest

from advisor.analysis.pipeline import Options, analyze_trace
from advisor.derive.kind import trace_kind
from advisor.derive.steps import steady_steps
from tests.detector_helpers import analyze, finding
from tests.tracebuilder import TraceBuilder

H100 = "NVIDIA H100 80GB HBM3"


def _tracing(b: TraceBuilder, t0: float, n: int) -> None:
    """Operators dynamo and AOT autograd run on fake tensors while they trace: views at 30 us
    (60x their typical cost), and the backward graph traced too."""
    for i in range(n):
        b.op("aten::view", t0 + i * 40, 30)
        b.op("aten::empty", t0 + i * 40 + 32, 5)
    b.op("autograd::engine::evaluate_function: MmBackward0", t0 + n * 40, 50)


def compile_run() -> TraceBuilder:
    """Shape 6: the window records a compiled function's first call: 1.69 s of compile ranges
    (dynamo, then AOT autograd and Inductor) holding the tracing's operators, then the compiled
    region runs 3.4 ms of kernels with a few views at their typical cost."""
    b = TraceBuilder(cc=(9, 0), gpu_name=H100)
    b.op("TorchDynamo Cache Lookup", 0, 10)
    b.op("dynamo", 20, 1_690_000)
    b.op("_compile.compile_inner (dynamo_timed)", 30, 1_689_900)
    _tracing(b, 100, 400)
    b.op("compile_fx.<locals>.fw_compiler_base (dynamo_timed)", 900_000, 780_000)
    _tracing(b, 900_100, 200)
    t0 = 1_690_100.0
    b.op("Torch-Compiled Region: 0/0", t0, 3_600)
    for i in range(34):
        op = b.op("aten::view", t0 + 10 + i * 100, 1)
        mm = b.op("aten::mm", t0 + 12 + i * 100, 20)
        b.launch(mm, "cudaLaunchKernel", t0 + 15 + i * 100, 5, kernel="triton_mm", gpu_dur=100)
        assert op
    return b


def test_a_compile_run_is_its_own_kind() -> None:
    t = compile_run().load()
    k = trace_kind(t)
    assert k.kind == "compile" and "compile ranges take 1,690.0 of the 1,693.7 ms window" in k.why


def test_operators_inside_compile_ranges_are_never_host_overhead() -> None:
    t = compile_run().load()
    rep = analyze_trace(t, None, Options())
    assert rep.run.trace_kind == "compile"
    assert finding(rep, "host-overhead") is None  # was 60x on the tracing's views
    f = finding(rep, "one-time-init")
    assert f is not None and "torch.compile compilation 1.7 s" in f.summary
    # the step is the compiled call's work, the compilation left out
    assert steady_steps(t).median_ms() == pytest.approx(3.6, abs=0.2)


def test_compilation_inside_marked_steps_is_not_host_overhead() -> None:
    # two ProfilerSteps (both kept); the first compiles: its tracing's views are compilation,
    # the views of the compiled code run at their typical cost
    b = TraceBuilder(cc=(9, 0), gpu_name=H100)
    for s in range(2):
        t = s * 60_000.0
        b.step(s + 1, t, 60_000)
        if s == 0:
            b.op("dynamo", t + 10, 50_000)
            _tracing(b, t + 20, 400)
        for i in range(30):
            b.op("aten::view", t + 50_100 + i * 100, 1)
            mm = b.op("aten::mm", t + 50_102 + i * 100, 20)
            b.launch(mm, "cudaLaunchKernel", t + 50_105 + i * 100, 5, kernel="mm", gpu_dur=90)
    rep = analyze(b.load(), "host-overhead")
    assert finding(rep, "host-overhead") is None


def nested_regions(steps: int = 3) -> TraceBuilder:
    """Shape 8: every forward enters region 0/0, and inside it the resume functions' regions
    1/0, 2/0 and 3/0 (three graph breaks), each after its cache lookup; no Python stacks."""
    b = TraceBuilder(cc=(9, 0), gpu_name=H100)
    for s in range(steps):
        t = s * 2_000.0
        b.step(s + 1, t, 2_000)
        b.op("TorchDynamo Cache Lookup", t + 5, 4)
        b.op("Torch-Compiled Region: 0/0", t + 10, 1_800)
        for g in range(4):
            at = t + 20 + g * 440
            if g:
                b.op("aten::gt", at - 60, 20)  # the eager code at the break
                b.op("TorchDynamo Cache Lookup", at - 30, 15)
                b.op(f"Torch-Compiled Region: {g}/0", at - 10, 400)
            fn = b.op("CompiledFunction", at, 300)
            b.launch(fn, "cudaLaunchKernel", at + 10, 5, kernel=f"fused_{g}", gpu_dur=20)
    return b


def test_graph_breaks_counted_from_region_nesting_without_stacks() -> None:
    f = finding(analyze(nested_regions().load(), "compile-graph-breaks"), "compile-graph-breaks")
    assert f is not None
    assert f.summary.startswith("3 graph break(s) per step in compiled code (resume graph ")
    assert f.locations == ()  # no lines without stacks
    assert "no Python stacks" in f.recommendation
    assert f.est_savings_ms > 0


def test_graph_breaks_per_iteration_without_step_markers() -> None:
    # the same forwards with no ProfilerStep: the compiled function's calls are the iterations
    b = nested_regions()
    b.events = [e for e in b.events if not str(e["name"]).startswith("ProfilerStep#")]
    t = b.load()
    ss = steady_steps(t)
    assert ss.source == "compiled region" and len(ss.steps) == 3
    f = finding(analyze(t, "compile-graph-breaks"), "compile-graph-breaks")
    assert f is not None and f.summary.startswith("3 graph break(s) per step")
