"""compile-graph-breaks and compile-recompiles: builder traces shaped like torch.compile's
(``Torch-Compiled Region: N/M``, ``TorchDynamo Cache Lookup``, resume-function frames, compile
ranges with their compile ids), run.json's ``compile`` block, and the live recorder
(:mod:`advisor.profile.compilefacts`) on a tiny compiled function.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.detector_helpers import analyze, finding
from tests.tracebuilder import TraceBuilder

GB_ID = "compile-graph-breaks"
RC_ID = "compile-recompiles"


def break_trace(resume_frame: bool = True, kernel_us: float = 20.0) -> TraceBuilder:
    """3 steps of 1 ms: region 0/0 runs a graph (CompiledFunction, one kernel), eager code
    (``aten::gt``), a cache lookup and the resume function's region 1/0 nested in it (its own
    graph and kernel); the host then waits for the GPU."""
    b = TraceBuilder()
    for s in range(3):
        t = s * 1000.0
        b.step(s + 1, t, 1000)
        b.frame("model.py", 20, "forward", t + 2, 600)
        b.op("TorchDynamo Cache Lookup", t + 5, 4)
        b.op("Torch-Compiled Region: 0/0", t + 10, 560)
        g = b.op("CompiledFunction", t + 20, 180)
        b.launch(g, "cudaLaunchKernel", t + 30, 5, kernel="fused_0", gpu_dur=kernel_us)
        b.op("aten::gt", t + 210, 20)
        b.op("TorchDynamo Cache Lookup", t + 240, 15)
        b.op("Torch-Compiled Region: 1/0", t + 260, 300)
        if resume_frame:
            b.frame("model.py", 25, "torch_dynamo_resume_in_forward_at_25", t + 262, 290)
        g2 = b.op("CompiledFunction", t + 280, 200)
        b.launch(g2, "cudaLaunchKernel", t + 300, 5, kernel="fused_1", gpu_dur=kernel_us)
        b.runtime("cudaDeviceSynchronize", t + 600, 20)
    return b


BREAKS = {
    "compile": {
        "graph_breaks": [
            {
                "file": "/proj/model.py",
                "line": 25,
                "function": "forward",
                "type": "Data-dependent branching",
                "reason": "Data-dependent branching",
                "count": 1,
                "compile_ids": ["0/0"],
            },
            {  # the advisor's own frames are never reported
                "file": "/x/site-packages/advisor/profile/fwdsteps.py",
                "line": 49,
                "function": "_pre",
                "type": "Attempted to call function marked as skipped",
                "reason": "",
                "count": 1,
            },
        ],
        "frames": [
            {"compile_id": "0/0", "function": "forward", "file": "/proj/model.py", "resume": False},
            {
                "compile_id": "1/0",
                "function": "torch_dynamo_resume_in_forward_at_25",
                "file": "/proj/model.py",
                "resume": True,
            },
        ],
    }
}


def test_graph_break_from_run_json_with_reason_line_and_advice() -> None:
    f = finding(analyze(break_trace(resume_frame=False).load(), GB_ID, BREAKS), GB_ID)
    assert f is not None
    assert f.summary.startswith("1 graph break(s) per step in compiled code (model.py:25: ")
    assert "Data-dependent branching" in f.summary
    assert "torch.where" in f.recommendation
    assert [(loc.file, loc.line) for loc in f.locations] == [("/proj/model.py", 25)]
    # from the end of region 0/0's graph (t+200) to region 1/0's first child (t+280): 80 us,
    # replayed at half its length on a host-bound step
    assert f.est_savings_ms == pytest.approx(0.04, abs=0.005)
    assert f.confidence == "high"


def test_graph_break_from_the_trace_alone() -> None:
    f = finding(analyze(break_trace().load(), GB_ID), GB_ID)
    assert f is not None
    assert "model.py:25" in f.summary and f.confidence == "medium"
    assert f.est_savings_ms == pytest.approx(0.04, abs=0.005)


def test_no_resume_region_means_no_break() -> None:
    b = TraceBuilder()
    for s in range(3):
        t = s * 1000.0
        b.step(s + 1, t, 1000)
        b.op("TorchDynamo Cache Lookup", t + 5, 4)
        b.op("Torch-Compiled Region: 0/0", t + 10, 560)
        g = b.op("CompiledFunction", t + 20, 500)
        b.launch(g, "cudaLaunchKernel", t + 30, 5, kernel="fused_0", gpu_dur=20)
    assert finding(analyze(b.load(), GB_ID), GB_ID) is None


def test_graph_break_known_only_from_run_json_is_information() -> None:
    b = TraceBuilder()
    for s in range(3):
        b.step(s + 1, s * 1000.0, 1000)
        op = b.op("aten::mm", s * 1000.0 + 10, 10)
        b.launch(op, "cudaLaunchKernel", s * 1000.0 + 11, 5, kernel="gemm", gpu_dur=100)
    f = finding(analyze(b.load(), GB_ID, BREAKS), GB_ID)
    assert f is not None and f.severity == "info" and f.est_savings_ms == 0.0
    assert "no resume region" in f.summary


def recompile_trace(compile_us: float = 400.0, attempt: int = 1) -> TraceBuilder:
    """3 steps of 1 ms; in the first two, the compiled frame 0 is compiled again (a ``dynamo``
    range with its ``compile_id=0/N`` annotation) before its region runs."""
    b = TraceBuilder()
    for s in range(3):
        t = s * 1000.0
        b.step(s + 1, t, 1000)
        if s < 2:
            b.op("dynamo", t + 5, compile_us)
            b.annotation(f"dynamo_data: compile_id=0/{attempt + s}", t + 6, 0)
            b.op("_compile.compile_inner (dynamo_timed)", t + 7, compile_us - 5)
        b.op("Torch-Compiled Region: 0/" + str(attempt + min(s, 1)), t + 450, 100)
        g = b.op("CompiledFunction", t + 460, 80)
        b.launch(g, "cudaLaunchKernel", t + 470, 5, kernel="fused", gpu_dur=50)
        b.runtime("cudaDeviceSynchronize", t + 560, 20)
    return b


RECOMPILES: dict[str, Any] = {
    "compile": {
        "recompiles": [
            {
                "compile_id": f"0/{i}",
                "function": "forward",
                "file": "/proj/model.py",
                "line": 12,
                "reason": f"0/{i - 1}: tensor 'x' size mismatch at index 1. expected {i}, actual {i + 1}",
            }
            for i in (1, 2, 3)
        ]
    }
}


def test_recompiles_in_the_loop_with_the_failed_guard() -> None:
    f = finding(analyze(recompile_trace().load(), RC_ID, RECOMPILES), RC_ID)
    assert f is not None
    assert f.summary.startswith("3 recompilation(s) of compiled code (forward at model.py:12: ")
    assert "size mismatch at index 1" in f.summary
    assert "2 of them inside the steady steps" in f.summary
    assert "mark_dynamic" in f.recommendation
    # 400 us of compile time in 2 of the 3 steps: valued over the steps that have it, its mean
    # per step over all 3 (it was the median step's 0.4 ms)
    assert f.est_savings_ms == pytest.approx(0.4 * 2 / 3, abs=0.02)
    assert f.confidence == "high"
    assert [(loc.file, loc.line) for loc in f.locations] == [("/proj/model.py", 12)]


def test_recompiles_from_the_trace_alone() -> None:
    f = finding(analyze(recompile_trace().load(), RC_ID), RC_ID)
    assert f is not None and f.confidence == "medium"
    assert "would name the failed guards" in f.summary


def test_first_compiles_in_the_loop_are_not_recompiles() -> None:
    b = TraceBuilder()
    for s in range(3):
        t = s * 1000.0
        b.step(s + 1, t, 1000)
        if s == 0:  # frame 1 compiled for the first time (an evaluation function, say)
            b.op("dynamo", t + 5, 300)
            b.annotation("dynamo_data: compile_id=1/0", t + 6, 0)
        b.op("Torch-Compiled Region: 0/0", t + 450, 100)
    assert finding(analyze(b.load(), RC_ID), RC_ID) is None


def test_recompiles_before_the_window_are_information() -> None:
    b = TraceBuilder()
    for s in range(3):
        t = s * 1000.0
        b.step(s + 1, t, 1000)
        op = b.op("aten::mm", t + 10, 10)
        b.launch(op, "cudaLaunchKernel", t + 11, 5, kernel="gemm", gpu_dur=100)
    f = finding(analyze(b.load(), RC_ID, RECOMPILES), RC_ID)
    assert f is not None and f.severity == "info" and f.est_savings_ms == 0.0


def test_one_time_init_lists_compilation_inside_the_steps() -> None:
    rep = analyze(recompile_trace(compile_us=900).load(), "one-time-init")
    f = finding(rep, "one-time-init")
    assert f is not None and "inside the steady steps" in f.summary
    assert any("see compile-recompiles" in e.what for e in f.evidence)


@pytest.mark.slow
def test_live_recorder_names_the_break_line_and_the_failed_guard() -> None:
    """A tiny function compiled with backend="eager": one graph break on a data-dependent
    branch, one recompilation on a new size (dynamic=False)."""
    import torch

    from advisor.profile.compilefacts import CompileRecorder

    def fn(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        if y.sum() > 0:  # the break
            y = y + 1
        return y

    rec = CompileRecorder()
    cfn = torch.compile(fn, backend="eager", dynamic=False)
    rec.install()
    try:
        torch._dynamo.reset()
        cfn(torch.ones(4))
        cfn(torch.ones(5))  # size guard fails: recompile
        facts = rec.facts()
    finally:
        rec.uninstall()
        torch._dynamo.reset()
    line = fn.__code__.co_firstlineno + 2
    breaks = [b for b in facts.graph_breaks if b.file == __file__]
    assert breaks and breaks[0].line == line
    assert "Data-dependent" in (breaks[0].kind or "")
    rc = [r for r in facts.recompiles if r.file == __file__]
    assert rc and "size mismatch" in (rc[0].reason or "")
    assert any(f.resume for f in facts.frames)


def test_forward_hooks_stay_registered_but_inert_once_dynamo_is_in_use() -> None:
    """Removing the step-counting hooks would change the number of global module hooks, which
    compiled graphs guard on: every compiled module would recompile in the window."""
    import sys

    import torch
    import torch._dynamo  # noqa: F401 (torch.compile in use)

    from advisor.profile.fwdsteps import ForwardSteps

    calls: list[Any] = []
    fs = ForwardSteps(calls.append)
    hooks = torch.nn.modules.module._global_forward_hooks
    before = len(hooks)
    fs.install()
    try:
        lin = torch.nn.Linear(2, 2)
        lin(torch.ones(1, 2))
        assert calls == [lin]
        fs.remove()
        assert "torch._dynamo" in sys.modules and len(hooks) == before + 1
        lin(torch.ones(1, 2))
        assert calls == [lin] and not fs.installed
        fs.install()  # the hooks come back to life for an evaluation phase
        lin(torch.ones(1, 2))
        assert len(calls) == 2
    finally:
        while fs._handles:
            fs._handles.pop().remove()
    assert len(hooks) == before


def test_cpu_samples_recorded_by_advisor_profile() -> None:
    """The traces of examples/compile_graph_break.py (aot_eager) and compile_recompile.py
    (eager, without Python stacks), analysed without their run.json."""
    from advisor.trace import load_trace
    from tests.conftest import SAMPLES

    f = finding(analyze(load_trace(SAMPLES / "compile_graph_break.cpu.json.gz"), GB_ID), GB_ID)
    assert f is not None and f.est_savings_ms > 0
    assert ("compile_graph_break.py", 25) in {(loc.file, loc.line) for loc in f.locations}
    r = finding(analyze(load_trace(SAMPLES / "compile_recompile.cpu.json.gz"), RC_ID), RC_ID)
    assert r is not None and r.est_savings_ms > 0
    assert "2 of them inside the steady steps" in r.summary
