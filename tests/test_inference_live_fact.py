"""inference-without-no-grad with run.json's live fact: reported at any size (information when
the steps build few autograd nodes), and the memory kept for the unused graph from the trace's
``[memory]`` events."""

from __future__ import annotations

from tests.detector_helpers import analyze, finding
from tests.tracebuilder import TraceBuilder

INF = "inference-without-no-grad"
LIVE = {"forward": {"eval_with_grad": [{"module": "Tiny", "file": "infer.py", "line": 9}]}}


def small_trace(nodes: int = 6, memory: bool = False) -> TraceBuilder:
    """3 steps of a small model run with grad on: ``nodes`` linear ops, each allocating 1 MB
    kept until the step's end (as saved activations are)."""
    b = TraceBuilder(cc=None)
    seq = 100
    for s in range(3):
        t = s * 1000.0
        b.step(s + 1, t, 1000)
        b.frame("infer.py", 9, "evaluate", t + 5, 900)
        total = 10 * 2**20  # the model's weights, allocated before the step
        for i in range(nodes):
            b.op("aten::linear", t + 10 + i * 20, 15, seq=seq)
            if memory:
                total += 2**20
                b.memory(t + 12 + i * 20, 2**20, total, 64 * 2**20, device_type=0)
            seq += 1
        if memory:
            b.memory(t + 900, -nodes * 2**20, 10 * 2**20, 64 * 2**20, device_type=0)
    return b


def test_small_model_is_silent_from_the_trace_alone() -> None:
    assert finding(analyze(small_trace().load(), INF), INF) is None


def test_small_model_with_the_live_fact_is_information() -> None:
    f = finding(analyze(small_trace().load(), INF, LIVE), INF)
    assert f is not None and f.severity == "info"
    assert "5 autograd nodes built per step" in f.summary
    assert "reported from run.json as information" in f.summary
    assert f.locations[0].file == "infer.py" and f.locations[0].line == 9


def test_memory_held_for_the_unused_graph() -> None:
    f = finding(analyze(small_trace(memory=True).load(), INF, LIVE), INF)
    assert f is not None
    assert "rises up to 6.0 MB above each step's start" in f.summary
    assert any("peak of [memory] events" in a for a in f.assumptions)
