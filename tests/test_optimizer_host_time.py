"""optimizer-host-time: optimizer steps whose host time exceeds the GPU work they launch."""

from __future__ import annotations

import pytest
from advisor.detectors._opt_ranges import optimizer_ranges

from advisor.analysis.pipeline import Options, analyze_trace
from advisor.derive.steps import steady_trace
from advisor.trace import load_trace
from tests.conftest import shared_trace
from tests.detector_helpers import analyze, found, one, skip_reason
from tests.tracebuilder import TraceBuilder

ID = "optimizer-host-time"
BOTH = frozenset({ID, "single-tensor-optimizer"})


def _trace(
    cls: str = "Shampoo",
    op: str = "aten::_foreach_add_",
    n: int = 40,
    kernel: str = "multi_tensor_apply_kernel<...>",
    gpu_dur: float = 2.0,
    gpu: bool = True,
    range_us: float = 1000.0,
) -> TraceBuilder:
    """Two 10 ms steps, each with one optimizer range of ``range_us`` issuing ``n`` ops."""
    b = TraceBuilder(cc=(8, 0) if gpu else None)
    for s in range(2):
        t0 = s * 10_000.0
        b.step(s + 1, t0, 10_000)
        b.frame("train.py", 88, "train", t0 + 1, 9_990)
        w0 = t0 + 5_000
        b.annotation(f"Optimizer.step#{cls}.step", w0, range_us)
        for i in range(n):
            o = b.op(op, w0 + 5 + i * 16, 14)
            if gpu:
                b.launch(
                    o,
                    "cudaLaunchKernel",
                    w0 + 6 + i * 16,
                    5,
                    kernel=kernel,
                    gpu_ts=w0 + 12 + i * 16,
                    gpu_dur=gpu_dur,
                )
    return b


def test_host_bound_multi_tensor_optimizer_is_reported() -> None:
    f = one(analyze(_trace().load(), ID), ID)
    # per step: 1000 us of host, 40 x 2 us of GPU work; a fused step keeps one of the 40
    # operator calls of 14 us (560 us): 546 us go, the host-bound step is that much shorter
    # (range: half of it, to all of the range's host time but one call)
    assert f.est_savings_ms == pytest.approx(0.546, abs=0.002)
    assert f.est_savings_range_ms == pytest.approx((0.273, 0.986), abs=0.002)
    assert "the GPU idles 920 us per step inside them" in f.summary
    assert "Shampoo.step holds the host 1.00 ms per step (10% of the step)" in f.summary
    assert "launching 80 us of GPU work" in f.summary
    assert f.evidence[0].count == 2 and f.evidence[0].total_ms == pytest.approx(2.0)
    assert f.locations[0].file == "train.py" and f.locations[0].line == 88
    assert "precondition_frequency" in f.recommendation and "% k == 0" in f.snippet


def test_run_json_names_groups_and_where_the_optimizer_was_made() -> None:
    run = {
        "optimizers": [
            {
                "class": "Shampoo",
                "foreach": None,
                "fused": None,
                "param_tensors": 300,
                "param_groups": 12,
                "file": "train.py",
                "line": 21,
            }
        ]
    }
    f = one(analyze(_trace().load(), ID, run), ID)
    assert "300 parameter tensors in 12 group(s)" in f.summary
    assert "Merge its 12 parameter groups" in f.recommendation
    assert f.locations[0].line == 21


def test_per_parameter_loop_is_left_to_single_tensor_optimizer() -> None:
    b = _trace(cls="SGD", op="aten::add_", n=60, kernel="vectorized_elementwise_kernel")
    rep = analyze_trace(b.load(), None, Options(only=BOTH))
    assert not found(rep, ID)
    assert one(rep, "single-tensor-optimizer")


def test_gpu_bound_or_small_optimizer_is_not_reported() -> None:
    assert not found(analyze(_trace(gpu_dur=30).load(), ID), ID)  # 1.2 ms GPU > 1 ms host
    assert not found(
        analyze(_trace(range_us=700).load(), ID, overrides={"optimizer_host_time.min_pct": 8.0}), ID
    )


def test_missing_data() -> None:
    rep = analyze(_trace(gpu=False).load(), ID)  # CPU-only: no GPU work to compare with
    assert not found(rep, ID) and "GPU" in (skip_reason(rep, ID) or "")
    b = TraceBuilder()
    b.step(1, 0, 100)
    o = b.op("aten::mm", 1, 5)
    b.launch(o, "cudaLaunchKernel", 2, 1, kernel="gemm", gpu_ts=4, gpu_dur=5)
    assert "Optimizer.step" in (skip_reason(analyze(b.load(), ID), ID) or "")


TRACE_FILTER = [
    "hta/trace_filter/sampled_rank-0.json.gz",
    "hta/trace_filter/sampled_rank-1.json.gz",
]
NW0 = "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"


@pytest.mark.shared
def test_shampoo_on_trace_filter() -> None:
    rep = analyze_trace(load_trace(shared_trace(TRACE_FILTER[0])), None, Options(only=BOTH))
    f = one(rep, ID)
    # Shampoo + EMAOptimizer: 204 ms of host time in the first step, 212.5 in the second,
    # a third of the 615 ms step; the GPU work they launch is a quarter of that
    assert f.summary.startswith(
        "Shampoo.step and EMAOptimizer.step hold the host 208 ms per "
        "step (34% of the step) while launching 56.2 ms of GPU work"
    )
    assert f.evidence[0].total_ms / 2 == pytest.approx(195, rel=0.1)
    # replayed without the operators' host time (but one call); in the first step the
    # optimizer's kernels then wait on stream 7 for the backward thread's GPU work (a 36 ms
    # SendRecv and what follows it): 107 ms per step of the 208 ms
    assert f.est_savings_ms == pytest.approx(107, rel=0.1)
    assert not found(rep, "single-tensor-optimizer")


@pytest.mark.shared
def test_resnet50_sgd_is_reported_once_as_single_tensor_optimizer() -> None:
    # 18.8 ms of host per SGD step (483 per-parameter ops, 1.3 ms of GPU work): the finding is
    # single-tensor-optimizer's, whose fix (foreach/fused) removes that host time
    trace = steady_trace(load_trace(shared_trace(NW0)))
    stats = optimizer_ranges(trace)
    assert stats["dur_ns"].mean() / 1e6 == pytest.approx(18.8, rel=0.1)
    rep = analyze_trace(trace, None, Options(only=BOTH))
    assert not found(rep, ID)
    assert one(rep, "single-tensor-optimizer")


def _foreach_step(
    tensors: int = 50, child_us: float = 10.0, python_us: float = 300.0
) -> TraceBuilder:
    """Three 10 ms steps; each has one SGD.step range: ``python_us`` of Python, then two
    ``_foreach_*`` ops that each dispatch one ``aten::result_type`` per parameter tensor
    (``child_us`` each) and launch one multi-tensor kernel."""
    b = TraceBuilder()
    for s in range(3):
        t0 = s * 10_000.0
        b.step(s + 1, t0, 10_000)
        op_us = tensors * (child_us + 2) + 10
        w0 = t0 + 5_000
        b.annotation("Optimizer.step#SGD.step", w0, python_us + 2 * op_us + 10)
        at = w0 + python_us
        for name in ("aten::_foreach_mul_", "aten::_foreach_add_"):
            o = b.op(name, at, op_us)
            for i in range(tensors):
                b.op("aten::result_type", at + 2 + i * (child_us + 2), child_us)
            b.launch(
                o,
                "cudaLaunchKernel",
                at + op_us - 8,
                5,
                "multi_tensor_apply_kernel",
                at + op_us,
                20,
            )
            at += op_us + 5
    return b


def test_saving_comes_from_the_operators_host_time_per_tensor() -> None:
    f = one(analyze(_foreach_step().load(), ID), ID)
    # per step: 2 foreach ops of 610 us (50 tensors x 12 us of dispatch each); a fused step
    # keeps one operator call (10 us, the median innermost operator): 1.21 ms go; the 300 us
    # of Python stay
    assert f.est_savings_ms == pytest.approx(1.21, abs=0.01)
    assert "(50 tensors)" in f.summary
    assert any("one operator call" in a for a in f.assumptions)


@pytest.mark.shared
def test_nccl_parser_foreach_sgd() -> None:
    # its own row where the whole-step graph (gpu-idle's, which holds it) is not reported
    rep = analyze_trace(
        load_trace(shared_trace("hta/nccl_parser_config/nccl_data.json.gz")),
        None,
        Options(skip=frozenset({"gpu-idle"})),
    )
    f = one(rep, ID)
    # SGD.step: 14.8 ms of host time, 12.2 ms of it in three _foreach ops dispatching one
    # result_type per tensor (161 tensors); a fused step removes that (issue 25: 10-14 ms)
    assert 10.0 <= f.est_savings_ms <= 14.0
    assert "(161 tensors)" in f.summary
