"""Checklist-B detectors on synthetic traces: positive, negative and missing-data cases.

inference-without-no-grad, data-parallel, python-loop, cat-in-loop, single-tensor-optimizer,
fusible-elementwise, memory-headroom (real traces: test_checklist_b_real.py).
"""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pytest
from advisor.detectors._ops import runtime_op
from advisor.detectors.fusible_elementwise import _chain_ns, _chains, short_name
from hypothesis import given, settings
from hypothesis import strategies as st

from advisor.trace.build import is_user_file as user_file
from advisor.trace.names import name_in, name_mask
from tests.detector_helpers import analyze, finding, skip_reason
from tests.tracebuilder import PID, TID, TraceBuilder

GB = 1024**3
BW_TID = TID + 1


def backward(b: TraceBuilder, ts: float) -> None:
    b.op("autograd::engine::evaluate_function: AddmmBackward0", ts, 20, tid=BW_TID, seq=3)
    b.op("AddmmBackward0", ts + 1, 18, tid=BW_TID, seq=3)


# ------------------------------------------------------------------ helpers


def test_user_file_rejects_relative_library_and_stdlib_paths() -> None:
    assert user_file("train.py")
    assert user_file("/home/me/proj/model.py")
    assert not user_file("torch/nn/modules/linear.py")  # torch >= 2 writes sys.path-relative
    assert not user_file("typing.py")
    assert not user_file("transformers/models/bert/modeling_bert.py")
    assert not user_file("/usr/lib/python3.11/site-packages/torch/_tensor.py")
    assert not user_file("<built-in method item of Tensor object at 0x7f>")


def test_runtime_op_falls_back_to_the_enclosing_op_when_ids_do_not_link() -> None:
    b = TraceBuilder()
    b.step(1, 0, 100)
    op = b.op("aten::mul", 10, 30)
    b.op("aten::mul_inner", 12, 20)
    rt = b.runtime("cudaLaunchKernel", 15, 3, op=op)
    rt["args"]["External id"] = 999  # an id no op carries (as in some 1.13 traces)
    t = b.load()
    # the loader itself now falls back to the innermost op around the call (same answer)
    assert t.runtime["op_idx"].tolist() == [1]
    assert runtime_op(t).tolist() == [1]  # the innermost op around the call


def test_name_in_and_name_mask_match_per_row_tests() -> None:
    names = ["aten::add_", "aten::mm", None, "aten::add_", "aten::_foreach_add_"]
    for values in (pd.Series(names, dtype="category"), np.array(names, dtype=object)):
        assert name_in(values, ["aten::add_", "aten::mul_"]).tolist() == [
            True,
            False,
            False,
            True,
            False,
        ]
        assert name_mask(values, re.compile("_foreach_|mm")).tolist() == [
            False,
            True,
            False,
            False,
            True,
        ]
    assert name_in(np.zeros(0, dtype=object), ["x"]).tolist() == []


def _chains_by_loop(k: pd.DataFrame, ew: np.ndarray, min_chain: int) -> list[list[int]]:
    """The per-kernel walk that _chains replaced (the definition of a chain)."""
    order = np.lexsort((k["ts_ns"].to_numpy(), k["stream"].to_numpy(), k["device"].to_numpy()))
    dev, stream, step = (k[c].to_numpy()[order] for c in ("device", "stream", "step"))
    e = ew[order]
    out, start = [], None
    for i in range(len(order) + 1):
        if (
            i < len(order)
            and e[i]
            and i > 0
            and e[i - 1]
            and dev[i] == dev[i - 1]
            and stream[i] == stream[i - 1]
            and step[i] == step[i - 1]
        ):
            continue
        if start is not None and i - start >= min_chain:
            out.append(order[start:i].tolist())
        start = i if i < len(order) and e[i] else None
    return out


_kernel_rows = st.lists(
    st.tuples(st.integers(0, 1), st.integers(0, 2), st.integers(-1, 2), st.booleans()), max_size=60
)


@settings(max_examples=200, deadline=None)
@given(rows=_kernel_rows, min_chain=st.integers(1, 4))
def test_chains_are_the_maximal_runs_of_linked_elementwise_kernels(
    rows: list[tuple[int, int, int, bool]], min_chain: int
) -> None:
    k = pd.DataFrame(
        {
            "ts_ns": np.arange(len(rows), dtype=np.int64) * 10,
            "device": [r[0] for r in rows],
            "stream": [r[1] for r in rows],
            "step": [r[2] for r in rows],
        },
        dtype=np.int64,
    )
    ew = np.array([r[3] for r in rows], dtype=bool)
    got = [c.tolist() for c in _chains(SimpleNamespace(kernels=k), ew, min_chain)]  # type: ignore[arg-type]
    assert got == _chains_by_loop(k, ew, min_chain)


def test_chain_ns_sums_each_chains_kernel_time() -> None:
    dur = np.array([5, 7, 11, 13, 17, 19], dtype=np.int64)
    chains = [np.array([4, 1, 2]), np.array([0]), np.array([5, 3])]
    assert _chain_ns(dur, chains) == {4: 35.0, 0: 5.0, 5: 32.0}


def test_short_kernel_names() -> None:
    assert (
        short_name(
            "void at::native::vectorized_elementwise_kernel<4, at::native::"
            "CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int)"
        )
        == "add"
    )
    assert (
        short_name(
            "void at::native::vectorized_elementwise_kernel<4, at::native::"
            "BinaryFunctor<float, float, float, at::native::binary_internal::"
            "MulFunctor<float> >, at::detail::Array<char*, 3> >(int)"
        )
        == "mul"
    )
    assert (
        short_name(
            "void at::native::vectorized_elementwise_kernel<4, at::native::"
            "tanh_backward_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}"
            "::operator()() const>(int)"
        )
        == "tanh_backward"
    )


# ------------------------------------------------------------------ inference-without-no-grad

INF = "inference-without-no-grad"


def inference_trace(
    n_steps: int = 3,
    nodes: int = 30,
    grad: bool = True,
    bw: bool = False,
    cc: tuple[int, int] | None = None,
) -> TraceBuilder:
    b = TraceBuilder(cc=cc)
    seq = 100
    for s in range(n_steps):
        t0 = s * 1000.0
        b.step(s + 1, t0, 1000)
        b.frame("infer.py", 12, "evaluate", t0 + 5, 900)
        for i in range(nodes):
            b.op("aten::linear", t0 + 10 + i * 20, 15, seq=seq if grad else None)
            seq += 1
        if bw:
            backward(b, t0 + 800)
    return b


def test_inference_with_grad_is_reported_with_nodes_and_line() -> None:
    rep = analyze(inference_trace().load(), INF)
    f = finding(rep, INF)
    assert f is not None
    # 30 nodes per step -> 29 counted (distinct sequence numbers minus one), 1 us each
    assert f.est_savings_ms == pytest.approx(0.029)
    assert f.confidence == "medium"
    assert "29 autograd nodes" in f.summary
    assert f.locations[0].file == "infer.py" and f.locations[0].line == 12
    assert "inference_mode" in f.snippet


def test_inference_with_run_json_modules_is_high_confidence() -> None:
    rows = [{"module": "ResNet", "file": "infer.py", "line": 40, "function": "evaluate"}]
    f = finding(analyze(inference_trace().load(), INF, {"forward": {"eval_with_grad": rows}}), INF)
    assert f is not None and f.confidence == "high"
    assert f.locations[0].function == "evaluate" and f.locations[0].line == 40
    assert any("ResNet" in e.what for e in f.evidence)


def test_inference_saving_is_capped_by_gpu_idle_time() -> None:
    b = inference_trace(n_steps=1, cc=(8, 0))
    op = b.op("aten::mm", 2, 3)
    b.launch(op, "cudaLaunchKernel", 3, 1, kernel="gemm", gpu_ts=0, gpu_dur=1000)
    f = finding(analyze(b.load(), INF), INF)
    assert f is not None
    assert f.est_savings_ms == 0.0  # the GPU is busy all step: host overhead is hidden
    assert "the GPU limits them" in f.summary


def test_inference_saving_on_a_host_bound_gpu_trace_is_replayed() -> None:
    b = inference_trace(cc=(8, 0))
    for s in range(3):  # a short kernel the host waits for after its forward
        t0 = s * 1000.0
        op = b.op("aten::mm", t0 + 700, 10)
        b.launch(op, "cudaLaunchKernel", t0 + 701, 5, kernel="gemm", gpu_ts=t0 + 710, gpu_dur=50)
        b.runtime("cudaDeviceSynchronize", t0 + 712, 50)
    f = finding(analyze(b.load(), INF), INF)
    assert f is not None
    # 29 us of autograd recording on the host's critical path; range 0.7x-1.2x per node
    assert f.est_savings_ms == pytest.approx(0.029, abs=0.001)
    lo, hi = f.est_savings_range_ms or (0, 0)
    assert lo == pytest.approx(0.0203, abs=0.001) and hi == pytest.approx(0.0348, abs=0.001)
    assert any("Replayed:" in a for a in f.assumptions)


def test_training_steps_and_no_grad_inference_are_not_reported() -> None:
    assert finding(analyze(inference_trace(bw=True).load(), INF), INF) is None
    assert finding(analyze(inference_trace(grad=False).load(), INF), INF) is None


def test_grad_mode_without_nodes_is_not_reported() -> None:
    b = TraceBuilder(cc=None)
    b.step(1, 0, 1000)
    for i in range(50):  # grad mode on, nothing requires grad: the number never advances
        b.op("aten::select", 10 + i * 10, 5, seq=7)
    assert finding(analyze(b.load(), INF), INF) is None


def test_eval_step_between_training_steps_is_low_confidence() -> None:
    b = TraceBuilder(cc=None)
    seq = 0
    for s, train in enumerate((True, False, True, False)):  # the last one may be cut short
        t0 = s * 1000.0
        b.step(s + 1, t0, 1000)
        for i in range(30):
            b.op("aten::linear", t0 + 10 + i * 20, 15, seq=seq)
            seq += 1
        if train:
            backward(b, t0 + 800)
    f = finding(analyze(b.load(), INF), INF)
    assert f is not None and f.confidence == "low"
    assert f.summary.startswith("1 step(s)")  # step 2 only: the final step is not judged
    assert f.est_savings_ms == pytest.approx(0.029 / 4, abs=0.001)  # rounded to us


def test_inference_below_threshold_is_not_reported() -> None:
    t = inference_trace(nodes=10).load()
    assert finding(analyze(t, INF), INF) is None
    assert finding(analyze(t, INF, **{"inference_without_no_grad.min_nodes_per_step": 5}), INF)


def test_inference_without_ops_or_run_json_is_skipped() -> None:
    b = TraceBuilder()
    b.step(1, 0, 100)
    rep = analyze(b.load(), INF)
    assert "no CPU operator events" in (skip_reason(rep, INF) or "")


def test_eval_with_grad_during_training_is_low_confidence_information() -> None:
    run = {"forward": {"eval_with_grad": [{"module": "Teacher", "file": "kd.py", "line": 9}]}}
    f = finding(analyze(inference_trace(bw=True).load(), INF, run), INF)
    assert f is not None
    assert f.severity == "info" and f.est_savings_ms == 0.0 and f.confidence == "low"
    assert "Teacher" in f.summary


# ------------------------------------------------------------------ data-parallel

DP = "data-parallel"


def dp_trace(names: tuple[str, ...] = ("Broadcast", "Scatter", "Gather")) -> TraceBuilder:
    b = TraceBuilder()
    durs = {"Broadcast": 2000.0, "Scatter": 500.0, "Gather": 300.0}
    for s in range(2):
        t0 = s * 10_000.0
        b.step(s + 1, t0, 10_000)
        b.frame("train.py", 55, "main", t0 + 1, 9_000)
        t = t0 + 10
        for n in names:
            b.op(n, t, durs[n], seq=1)
            b.op("aten::copy_", t + 1, durs[n] / 2)  # nested work is not counted twice
            t += durs[n] + 10
        b.op("autograd::engine::evaluate_function: BroadcastBackward", t0 + 8000, 900, tid=BW_TID)
        b.op("BroadcastBackward", t0 + 8001, 890, tid=BW_TID)
        b.op("ReduceAddCoalesced", t0 + 8002, 800, tid=BW_TID)
    return b


def test_data_parallel_measures_replicate_scatter_gather() -> None:
    f = finding(analyze(dp_trace().load(), DP), DP)
    assert f is not None
    # Broadcast 2.0 + Gather 0.3 + half of Scatter 0.5 (DDP still copies its share; 2 GPUs)
    assert f.est_savings_ms == pytest.approx(2.55)
    assert "DistributedDataParallel" in f.recommendation and "DDP(" in f.snippet
    whats = " ".join(e.what for e in f.evidence)
    assert "Broadcast" in whats and "not counted" in whats
    red = [e for e in f.evidence if "not counted" in e.what][0]
    assert red.count == 2 and red.total_ms == pytest.approx(1.78)  # nested Reduce not added
    assert f.locations[0].file == "train.py"


def _dp_gpu(early_us: float = 0.0) -> TraceBuilder:
    """dp_trace on a GPU: a 500 us kernel waited for at +3012 us; ``early_us``: a kernel that
    long launched before the replication, which the same wait also waits for."""
    b = dp_trace()
    for s in range(2):
        t0 = s * 10_000.0
        end = t0 + 3010 + 500
        if early_us:
            op = b.op("aten::mm", t0 + 2, 6)
            b.launch(
                op, "cudaLaunchKernel", t0 + 3, 2, kernel="gemm", gpu_ts=t0 + 5, gpu_dur=early_us
            )
            end = max(end, t0 + 5 + early_us + 500)
        op = b.op("aten::mm", t0 + 3000, 10)
        b.launch(op, "cudaLaunchKernel", t0 + 3001, 5, kernel="gemm", gpu_ts=end - 500, gpu_dur=500)
        b.runtime("cudaDeviceSynchronize", t0 + 3012, end - (t0 + 3012))
    return b


def test_data_parallel_saving_is_replayed_on_a_gpu_trace() -> None:
    f = finding(analyze(_dp_gpu().load(), DP), DP)
    assert f is not None
    # host-bound: the replicate/scatter/gather host time comes off each step's critical path
    assert f.est_savings_ms == pytest.approx(2.55, abs=0.01)
    assert "Replayed:" in f.assumptions[0]
    # GPU-bound: the wait ends when the GPU finishes (+8505) whatever the host saved before it
    g = finding(analyze(_dp_gpu(early_us=8000).load(), DP), DP)
    assert g is not None and g.est_savings_ms < 0.01


def test_gather_backward0_and_nccl_broadcast_are_not_data_parallel() -> None:
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.op("aten::gather", 10, 10)
    b.op("GatherBackward0", 30, 10, tid=BW_TID)
    b.op("autograd::engine::evaluate_function: GatherBackward0", 29, 12, tid=BW_TID)
    b.annotation("nccl:broadcast", 50, 10)
    b.op("c10d::broadcast_", 50, 10)
    assert finding(analyze(b.load(), DP), DP) is None


def test_single_function_named_scatter_is_not_enough() -> None:
    assert finding(analyze(dp_trace(("Scatter",)).load(), DP), DP) is None


def test_data_parallel_over_one_gpu_is_information() -> None:
    b = dp_trace(("Scatter", "Gather"))
    b.kernel("gemm", 100, 5)
    f = finding(analyze(b.load(), DP), DP)
    assert f is not None and f.severity == "info" and f.est_savings_ms == 0.0
    assert "single device" in f.summary and "Gather/Scatter operators" in f.evidence[0].what


def test_scatter_counts_for_its_share_across_gpus() -> None:
    b = dp_trace()
    for dev in (0, 1, 2, 3):
        b.kernel("gemm", 100 + dev, 5, device=dev)
    f = finding(analyze(b.load(), DP), DP)
    assert f is not None
    assert f.est_savings_ms == pytest.approx(2.0 + 0.5 * 3 / 4 + 0.3)
    assert "3/4 of the Scatter range" in " ".join(f.assumptions)


def test_data_parallel_from_run_json_on_cpu_trace_is_information() -> None:
    b = TraceBuilder(cc=None)
    b.step(1, 0, 100)
    b.op("aten::mm", 1, 10)
    run = {
        "modules": {
            "data_parallel": True,
            "data_parallel_sites": [{"file": "train.py", "line": 12, "function": "main"}],
        }
    }
    f = finding(analyze(b.load(), DP, run), DP)
    assert f is not None and f.severity == "info" and f.est_savings_ms == 0.0
    assert f.locations[0].line == 12


def test_data_parallel_without_data_is_skipped() -> None:
    b = TraceBuilder()
    b.step(1, 0, 100)
    assert skip_reason(analyze(b.load(), DP), DP)


# ------------------------------------------------------------------ python-loop

PL = "python-loop"


def builtin_frame(
    b: TraceBuilder, name: str, ts: float, dur: float, parent: dict[str, Any]
) -> None:
    """A C call as torch's Python tracer names it (no file and line)."""
    b._pyid += 1
    b.events.append(
        {
            "ph": "X",
            "cat": "python_function",
            "name": name,
            "pid": PID,
            "tid": TID,
            "ts": b.base + ts,
            "dur": dur,
            "args": {
                "Python id": b._pyid,
                "Python thread": 0,
                "Python parent id": parent["args"]["Python id"],
            },
        }
    )


def loop_trace(
    per_step: int = 250, file: str = "train.py", steps: int = 2, gpu_busy: bool = False
) -> TraceBuilder:
    b = TraceBuilder(cc=(8, 0) if gpu_busy else None)
    for s in range(steps):
        t0 = s * 10_000.0
        b.step(s + 1, t0, 10_000)
        outer = b.frame("train.py", 80, "main", t0 + 1, 9_990)
        body = b.frame(file, 30, "loss_fn", t0 + 2, 9_900, parent=outer)
        t = t0 + 5
        for _ in range(per_step):
            b.op("aten::select", t, 2, dims=[[64], [], []], types=["float", "Scalar", "Scalar"])
            builtin_frame(b, "<built-in method item of Tensor object at 0x7f>", t + 3, 4, body)
            b.op("aten::item", t + 4, 3, dims=[[]], types=["float"])
            b.op("aten::_local_scalar_dense", t + 4.5, 2, dims=[[]], types=["float"])
            t += 12
        if gpu_busy:
            op = b.op("aten::mm", t0 + 9_995, 1)
            b.launch(op, "cudaLaunchKernel", t0 + 9_995, 1, kernel="gemm", gpu_ts=t0, gpu_dur=9_990)
    return b


def test_python_loop_reports_the_line_and_measured_cpu_time() -> None:
    f = finding(analyze(loop_trace().load(), PL), PL)
    assert f is not None
    assert f.locations[0].file == "train.py" and f.locations[0].line == 30
    assert f.locations[0].count == 1000  # 250 select + 250 item per step, 2 steps
    # vectorizing removes the loop's wall time, not only its ops: per step, the span from the
    # first op to the last (249 iterations of 12 us, then the last one's 6.5 us), minus the
    # longest op (3 us), which a vectorized version still runs
    assert f.est_savings_ms == pytest.approx(2.9915, abs=0.001)
    assert "measured CPU time" in " ".join(f.assumptions)
    assert "select x500" in f.evidence[0].what and "item x500" in f.evidence[0].what


def test_python_loop_inside_library_code_is_not_reported() -> None:
    for lib in (
        "torch/nn/functional.py",
        "/opt/venv/lib/python3.11/site-packages/torchrec/x.py",
        "torchrec/sparse/jagged_tensor.py",
    ):
        assert finding(analyze(loop_trace(file=lib).load(), PL), PL) is None


def test_python_loop_below_threshold_is_not_reported() -> None:
    t = loop_trace(per_step=90).load()  # 180 per-element ops per step
    assert finding(analyze(t, PL), PL) is None
    assert finding(analyze(t, PL, **{"python_loop.min_ops_per_step": 150}), PL) is not None


def test_python_loop_counts_scalar_arithmetic_on_0dim_tensors_only() -> None:
    b = TraceBuilder(cc=None)
    b.step(1, 0, 10_000)
    b.frame("train.py", 44, "score", 1, 9_000)
    for i in range(300):
        b.op("aten::mul", 5 + i * 20, 2, dims=[[], []], types=["float", "float"])
        b.op("aten::add", 15 + i * 20, 2, dims=[[64], []], types=["float", "Scalar"])
    f = finding(analyze(b.load(), PL), PL)
    assert f is not None and f.locations[0].count == 300  # the 0-dim muls only


def test_python_loop_saving_is_capped_by_gpu_idle_time() -> None:
    f = finding(analyze(loop_trace(gpu_busy=True).load(), PL), PL)
    assert f is not None
    # the loop runs 5..3005 us; the GPU is busy 0..9990 us of each 10 ms step: the step cannot
    # get shorter than its GPU work, whatever the host saves
    assert f.est_savings_ms < 0.02


def test_python_loop_needs_stacks() -> None:
    b = TraceBuilder(cc=None)
    b.step(1, 0, 1000)
    for i in range(300):
        b.op("aten::select", i * 2, 1, dims=[[8], [], []])
    assert "with_stack" in (skip_reason(analyze(b.load(), PL), PL) or "")


# ------------------------------------------------------------------ cat-in-loop

CAT = "cat-in-loop"


def cat_op(
    b: TraceBuilder, ts: float, dur: float, shapes: list[list[int]], name: str = "aten::cat"
) -> dict[str, Any]:
    return b.op(name, ts, dur, dims=[shapes, []], types=["TensorList", "Scalar"])


def test_growing_cat_chain_is_reported_with_quadratic_saving() -> None:
    b = TraceBuilder(cc=None)
    b.step(1, 0, 10_000)
    b.frame("collect.py", 21, "gather_preds", 1, 9_000)
    for i in range(10):
        cat_op(b, 10 + i * 100, 10 + i, [[i * 4, 8], [4, 8]])
    f = finding(analyze(b.load(), CAT), CAT)
    assert f is not None
    # costs 10..19 us: all calls minus the last one
    assert f.est_savings_ms == pytest.approx((sum(range(10, 20)) - 19) / 1000)
    assert f.locations[0].file == "collect.py" and f.locations[0].count == 10
    assert "32 -> 320 elements" in f.evidence[0].what


def test_restacking_a_growing_list_is_reported() -> None:
    b = TraceBuilder(cc=None)
    b.step(1, 0, 10_000)
    b.frame("loop.py", 7, "run", 1, 9_000)
    for i in range(1, 9):
        cat_op(b, 10 + i * 100, 5, [[16]] * i, name="aten::stack")
    f = finding(analyze(b.load(), CAT), CAT)
    assert f is not None and f.locations[0].line == 7


def test_interleaved_accumulators_on_one_line_are_followed_separately() -> None:
    b = TraceBuilder(cc=None)
    b.step(1, 0, 10_000)
    b.frame("kv.py", 3, "decode", 1, 9_000)
    t = 10.0
    for i in range(6):
        for _layer in range(2):  # a KV cache per layer, same shapes, same line
            cat_op(b, t, 4, [[1, 2, i * 3, 8], [1, 2, 3, 8]])
            t += 20
    f = finding(analyze(b.load(), CAT), CAT)
    assert f is not None
    assert "2 growing chain(s)" in f.evidence[0].what


def test_same_size_cats_and_short_chains_are_not_reported() -> None:
    b = TraceBuilder(cc=None)
    b.step(1, 0, 10_000)
    for i in range(20):  # fixed-size concatenation every iteration: linear, fine
        cat_op(b, 10 + i * 100, 5, [[32, 8], [32, 8]])
    for i in range(4):  # growing, but too short
        cat_op(b, 5000 + i * 100, 5, [[i * 4 + 1, 3], [4, 3]])
    assert finding(analyze(b.load(), CAT), CAT) is None


def test_cat_cost_on_gpu_comes_from_its_kernels() -> None:
    b = TraceBuilder()
    b.step(1, 0, 10_000)
    for i in range(6):
        op = cat_op(b, 10 + i * 100, 8, [[i * 4, 8], [4, 8]])
        b.launch(
            op,
            "cudaLaunchKernel",
            12 + i * 100,
            3,
            kernel="CatArrayBatchedCopy",
            gpu_ts=20 + 50 * i * (i + 1),
            gpu_dur=100 * (i + 1),
        )  # back to back
    b.runtime("cudaDeviceSynchronize", 650, 1475)  # waits for the queued copies (until 2120)
    f = finding(analyze(b.load(), CAT), CAT)
    assert f is not None
    # the first five copies (1.5 ms of kernels) go; replayed, the last one still starts after
    # its own launch at 512 us: the step ends 1.0 ms earlier (+ 40 us of host time)
    assert f.est_savings_ms == pytest.approx(1.04, abs=0.005)
    assert f.confidence == "medium"  # no stacks: grouped by thread


def test_stack_cost_on_gpu_comes_from_the_cat_inside_it() -> None:
    b = TraceBuilder()
    b.step(1, 0, 10_000)
    for i in range(1, 7):
        st = cat_op(b, 10 + i * 100, 8, [[16]] * i, name="aten::stack")
        inner = cat_op(b, 11 + i * 100, 6, [[16]] * i)
        b.launch(
            inner,
            "cudaLaunchKernel",
            12 + i * 100,
            3,
            kernel="CatArrayBatchedCopy",
            gpu_ts=120 + 25 * i * (i - 1),
            gpu_dur=50 * i,
        )  # back to back
        assert st["name"] == "aten::stack"
    b.runtime("cudaDeviceSynchronize", 750, 425)  # waits for the copies (until 1170)
    f = finding(analyze(b.load(), CAT), CAT)
    assert f is not None
    # 0.75 ms of kernels from the first five calls; the last starts after its launch (612 us)
    assert f.est_savings_ms == pytest.approx(0.29, abs=0.005)


def test_cat_without_tensorlist_shapes_is_skipped() -> None:
    b = TraceBuilder(cc=None)
    b.step(1, 0, 1000)
    b.op("aten::mm", 1, 5, dims=[[4, 4], [4, 4]])
    for i in range(8):
        b.op("aten::cat", 10 + i * 10, 5, dims=[[], []], types=["TensorList", "Scalar"])
    assert "TensorList" in (skip_reason(analyze(b.load(), CAT), CAT) or "")
    b2 = TraceBuilder(cc=None)
    b2.step(1, 0, 100)
    b2.op("aten::cat", 1, 5)
    assert "record_shapes" in (skip_reason(analyze(b2.load(), CAT), CAT) or "")


# ------------------------------------------------------------------ single-tensor-optimizer

OPT = "single-tensor-optimizer"


def optimizer_trace(
    cls: str = "SGD",
    op: str = "aten::add_",
    n: int = 60,
    gpu: bool = True,
    kernel: str = "vectorized_elementwise_kernel<4, add>",
    legacy: bool = False,
    busy_until: float = 0.0,
    launch: bool = True,
    sync_after: bool = False,
) -> TraceBuilder:
    b = TraceBuilder(cc=(8, 0) if gpu else None)
    for s in range(2):
        t0 = s * 10_000.0
        b.step(s + 1, t0, 10_000)
        b.frame("train.py", 77, "train", t0 + 1, 9_990)
        w0 = t0 + 5_000
        name = f"Optimizer.step#{cls}.step"
        if legacy:
            b.op(name, w0, 1_000)
        else:
            b.annotation(name, w0, 1_000)
        if busy_until:
            bw = b.op("aten::mm", w0 - 10, 5)
            b.launch(
                bw, "cudaLaunchKernel", w0 - 9, 2, kernel="gemm", gpu_ts=w0 - 5, gpu_dur=busy_until
            )
        for i in range(n):
            o = b.op(op, w0 + 5 + i * 16, 14)
            # behind a busy GPU the update kernels queue up and run back to back afterwards
            gpu_ts = w0 - 5 + busy_until + i * 2 if busy_until else w0 + 12 + i * 16
            if gpu and launch:
                b.launch(
                    o,
                    "cudaLaunchKernel",
                    w0 + 6 + i * 16,
                    5,
                    kernel=kernel,
                    gpu_ts=gpu_ts,
                    gpu_dur=2,
                )
        if sync_after:  # `loss.item()` after the step: the host waits for the GPU's queue
            end = max(w0 + 1_000, w0 - 5 + busy_until + n * 2)
            b.runtime("cudaDeviceSynchronize", w0 + 1_000, end - w0 - 1_000 + 5)
    return b


def test_single_tensor_optimizer_saving_is_gpu_idle_in_the_step() -> None:
    f = finding(analyze(optimizer_trace().load(), OPT), OPT)
    assert f is not None
    # range 5000..6000 us of host time, nothing waits for the GPU: 90% of it is saved
    assert f.est_savings_ms == pytest.approx(0.9, abs=0.01)
    assert "fused=True" in f.snippet and "torch.optim.SGD" in f.snippet
    assert "60 per-parameter ops" in f.summary
    assert f.locations[0].file == "train.py"


def test_optimizer_behind_a_busy_gpu_saves_only_the_idle_part() -> None:
    f = finding(analyze(optimizer_trace(busy_until=900, sync_after=True).load(), OPT), OPT)
    # backward kept the GPU busy through most of the range and the host waits for the GPU
    # right after it: the replayed step is hardly shorter
    assert f is None or f.est_savings_ms < 0.2


def test_foreach_fused_and_declared_optimizers_are_not_reported() -> None:
    foreach = optimizer_trace(
        op="aten::_foreach_add_", n=40, kernel="multi_tensor_apply_kernel<...>"
    )
    assert finding(analyze(foreach.load(), OPT), OPT) is None
    assert finding(analyze(optimizer_trace(cls="FusedAdam").load(), OPT), OPT) is None
    run = {"optimizers": [{"class": "SGD", "foreach": True, "fused": False}]}
    assert finding(analyze(optimizer_trace().load(), OPT, run), OPT) is None
    run = {
        "optimizers": [
            {"class": "SGD", "foreach": False, "fused": None, "file": "train.py", "line": 20}
        ]
    }
    f = finding(analyze(optimizer_trace().load(), OPT, run), OPT)
    assert f is not None and "foreach=False" in f.summary and f.locations[0].line == 20
    # ops that launch nothing (FusedAdam's step counters on the CPU) in a GPU trace
    quiet = optimizer_trace(launch=False)
    o = quiet.op("aten::mm", 1, 2)
    quiet.launch(o, "cudaLaunchKernel", 1, 1, kernel="gemm", gpu_ts=3, gpu_dur=5)
    assert finding(analyze(quiet.load(), OPT), OPT) is None
    assert finding(analyze(optimizer_trace(n=20).load(), OPT), OPT) is None  # too few


def test_optimizer_on_cpu_only_trace_is_information_only_when_foreach_was_turned_off() -> None:
    # torch loops per parameter by default on a CPU and uses foreach by default on CUDA
    assert finding(analyze(optimizer_trace(gpu=False).load(), OPT), OPT) is None
    default = {"optimizers": [{"class": "SGD", "foreach": None, "fused": None}]}
    assert finding(analyze(optimizer_trace(gpu=False).load(), OPT, default), OPT) is None
    forced = {"optimizers": [{"class": "SGD", "foreach": False, "fused": None}]}
    f = finding(analyze(optimizer_trace(gpu=False).load(), OPT, forced), OPT)
    assert f is not None and f.severity == "info" and f.est_savings_ms == 0.0
    assert "No GPU activity" in f.summary


def test_legacy_optimizer_operator_ranges_work() -> None:
    f = finding(analyze(optimizer_trace(legacy=True).load(), OPT), OPT)
    assert f is not None and f.est_savings_ms == pytest.approx(0.9, abs=0.01)


def test_no_optimizer_step_is_skipped() -> None:
    b = TraceBuilder()
    b.step(1, 0, 100)
    b.op("aten::mm", 1, 5)
    assert "Optimizer.step" in (skip_reason(analyze(b.load(), OPT), OPT) or "")


# ------------------------------------------------------------------ fusible-elementwise

FUSE = "fusible-elementwise"
EW = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::{}<float>, at::detail::"
    "Array<char*, 3> >(int)"
)


def fusible_trace(
    chain: tuple[str, ...] = ("MulFunctor", "CUDAFunctor_add", "tanh_kernel_cuda"),
    steps: int = 3,
    only_step: int | None = None,
    wrap: str | None = None,
) -> TraceBuilder:
    b = TraceBuilder()
    for s in range(steps):
        t0 = s * 100.0
        b.step(s + 1, t0, 100)
        b.frame("model.py", 19, "forward", t0 + 0.5, 60)
        kernels = [("gemm", 35.0)]
        if only_step is None or s == only_step:
            kernels += [(EW.format(k), 10.0) for k in chain]
        kernels += [("gemm", 100.0 - 35.0 - 10.0 * (len(kernels) - 1))]
        g = t0
        for i, (kname, dur) in enumerate(kernels):
            o = b.op(wrap or "aten::op", t0 + 1 + i * 5, 4)
            if wrap:
                o = b.op("aten::mul", t0 + 1.5 + i * 5, 3)
            b.launch(o, "cudaLaunchKernel", t0 + 2 + i * 5, 1, kernel=kname, gpu_ts=g, gpu_dur=dur)
            g += dur
        # the host then waits for the GPU: the kernels are the step's critical path
        b.runtime("cudaDeviceSynchronize", t0 + 3 + len(kernels) * 5, g - t0 - 3 - len(kernels) * 5)
    return b


def test_fusible_chain_saves_k_minus_one_over_k_of_its_time() -> None:
    f = finding(analyze(fusible_trace().load(), FUSE), FUSE)
    assert f is not None
    # 3 kernels x 10 us, GPU busy the whole step: 2/3 of 30 us per step is the kernel time
    # removed (top of the range); replayed, the later kernels wait for their launches (the
    # trace's launch latency), so the step loses 15 us of it
    assert f.est_savings_ms == pytest.approx(0.015, abs=0.002)
    assert f.est_savings_range_ms is not None and f.est_savings_range_ms[1] == pytest.approx(0.02)
    assert f.evidence[0].what.startswith("mul -> add -> tanh")
    assert "torch.compile" in f.snippet
    assert f.locations[0].file == "model.py"


def _shaped_trace(ops: list[tuple[str, str, list]], lines: list[int] | None = None) -> TraceBuilder:
    """3 steps whose elementwise ops (name, functor, input dims) run back to back, each op
    called from its line of model.py (``lines``; one line for all when None)."""
    b = TraceBuilder()
    for s in range(3):
        t0 = s * 100.0
        b.step(s + 1, t0, 100)
        g = t0 + 20
        for i, (name, functor, dims) in enumerate(ops):
            ts = t0 + 1 + i * 5
            b.frame("model.py", (lines or [19] * len(ops))[i], "forward", ts - 0.2, 4.5)
            o = b.op(name, ts, 4, dims=dims, types=["float"] * len(dims))
            b.launch(
                o, "cudaLaunchKernel", ts + 1, 1, kernel=EW.format(functor), gpu_ts=g, gpu_dur=10
            )
            g += 10
        b.runtime("cudaDeviceSynchronize", t0 + 2 + len(ops) * 5, g - t0 - 2 - len(ops) * 5)
    return b


def test_only_ops_that_feed_each_other_make_a_chain() -> None:
    n = [4096, 1024]
    chain = [("aten::mul", "MulFunctor", [n, n]), ("aten::add", "CUDAFunctor_add", [n, n])]
    chain.append(("aten::tanh", "tanh_kernel_cuda", [n]))
    assert finding(analyze(_shaped_trace(chain).load(), FUSE), FUSE) is not None
    # the same ops on tensors of unrelated shapes: the next never takes the previous' result
    unrelated = [(a, f, [[d[0][0] + i, 1024]] * len(d)) for i, (a, f, d) in enumerate(chain)]
    assert finding(analyze(_shaped_trace(unrelated).load(), FUSE), FUSE) is None


def test_independent_repeats_are_not_a_chain() -> None:
    # c = a + b ten times from one line (a benchmark loop, elem_01): nothing to fuse
    add = ("aten::add", "CUDAFunctor_add", [[8192, 8192], [8192, 8192], []])
    assert finding(analyze(_shaped_trace([add] * 10).load(), FUSE), FUSE) is None
    # x = x + a; x = x + b; x = x + c on three lines: each add takes the previous result
    f = finding(analyze(_shaped_trace([add] * 3, lines=[19, 20, 21]).load(), FUSE), FUSE)
    assert f is not None and f.evidence[0].what.startswith("add -> add -> add")


def test_short_chains_and_one_off_chains_are_not_reported() -> None:
    assert (
        finding(analyze(fusible_trace(chain=("MulFunctor", "CUDAFunctor_add")).load(), FUSE), FUSE)
        is None
    )
    assert finding(analyze(fusible_trace(only_step=1).load(), FUSE), FUSE) is None


def test_gradient_accumulation_and_fills_are_not_fusible_chains() -> None:
    t = fusible_trace(wrap="torch::autograd::AccumulateGrad").load()
    assert finding(analyze(t, FUSE), FUSE) is None
    t = fusible_trace(chain=("FillFunctor", "FillFunctor", "FillFunctor")).load()
    assert finding(analyze(t, FUSE), FUSE) is None


def test_chains_inside_compiled_regions_point_at_the_backend() -> None:
    f = finding(analyze(fusible_trace(wrap="CompiledFunction").load(), FUSE), FUSE)
    assert f is not None and "Inductor" in f.recommendation


def test_fusible_on_cpu_only_trace_is_skipped() -> None:
    b = TraceBuilder(cc=None)
    b.step(1, 0, 100)
    b.op("aten::mul", 1, 5)
    assert "no GPU activity" in (skip_reason(analyze(b.load(), FUSE), FUSE) or "")


# ------------------------------------------------------------------ memory-headroom

MEM = "memory-headroom"


def memory_trace(alloc_gb: float, reserved_gb: float, total_gb: int = 80) -> TraceBuilder:
    b = TraceBuilder(total_mem=total_gb * GB)
    b.step(1, 0, 1000)
    b.memory(10, 1024, int(alloc_gb * GB / 2), int(reserved_gb * GB / 2))
    b.memory(20, 1024, int(alloc_gb * GB), int(reserved_gb * GB))
    b.memory(30, 1024, 10 * GB, 10 * GB, device_type=0, device_id=-1)  # CPU: ignored
    return b


def test_low_memory_use_suggests_a_larger_batch() -> None:
    f = finding(analyze(memory_trace(10, 12).load(), MEM), MEM)
    assert f is not None and f.severity == "info" and f.est_savings_ms == 0.0
    assert "12.0 GB reserved of 80.0 GB" in f.summary and "(15%)" in f.summary
    assert "larger batch" in f.summary
    assert f.evidence[0].example_ts_us is not None


def test_nearly_full_memory_suggests_checkpointing_and_amp() -> None:
    b = memory_trace(60, 75)
    b.op("autograd::engine::evaluate_function: AddmmBackward0", 500, 10)  # a training step
    f = finding(analyze(b.load(), MEM), MEM)
    assert f is not None and f.severity == "info"
    assert "autocast" in f.snippet and "checkpoint" in f.snippet
    assert "expandable_segments" in f.recommendation  # reserved well above allocated
    # no backward (inference): no activations kept for one, so no checkpointing
    g = finding(analyze(memory_trace(60, 75).load(), MEM), MEM)
    assert g is not None and "checkpoint" not in g.snippet and "inference_mode" in g.snippet


def test_run_json_peak_wins_over_the_profiled_window() -> None:
    run = {
        "memory": {"peak_allocated_bytes": 76 * GB, "peak_reserved_bytes": 78 * GB},
        "device": {"total_memory_bytes": 80 * GB},
    }
    f = finding(analyze(memory_trace(10, 12).load(), MEM, run), MEM)
    assert f is not None and "run.json" in f.evidence[0].what and "(98%)" in f.summary


def test_run_json_of_a_cpu_run_is_not_gpu_memory() -> None:
    run = {
        "memory": {"peak_allocated_bytes": None, "peak_reserved_bytes": None},
        "device": {"type": "cpu", "total_memory_bytes": 64 * GB},
    }
    b = TraceBuilder(cc=None)
    b.step(1, 0, 100)
    assert "no GPU memory data" in (skip_reason(analyze(b.load(), MEM, run), MEM) or "")
    run["memory"] = {"peak_allocated_bytes": 1 * GB, "peak_reserved_bytes": 1 * GB}
    assert "no GPU memory data" in (skip_reason(analyze(b.load(), MEM, run), MEM) or "")


def test_middling_memory_use_is_not_reported() -> None:
    assert finding(analyze(memory_trace(40, 48).load(), MEM), MEM) is None


def test_sizes_only_memory_events_give_a_lower_bound() -> None:
    b = TraceBuilder(total_mem=16 * GB)
    b.step(1, 0, 1000)
    for i, size in enumerate([8 * GB, 7 * GB, -2 * GB]):
        b.events.append(
            {
                "ph": "i",
                "s": "t",
                "cat": "cpu_instant_event",
                "name": "[memory]",
                "pid": PID,
                "tid": TID,
                "ts": b.base + 10 + i,
                "args": {"Bytes": size, "Device Type": 1, "Device Id": 0},
            }
        )
    f = finding(analyze(b.load(), MEM), MEM)
    assert f is not None and "at least 15.0 GB" in f.summary  # 15 of 16 GB: nearly full
    assert f.confidence == "medium"
    # the same events on an 80 GB GPU: a lower bound of 19% proves nothing about free memory
    b2 = TraceBuilder(total_mem=80 * GB)
    b2.step(1, 0, 1000)
    b2.events.extend(dict(e) for e in b.events if e.get("name") == "[memory]")
    rep = analyze(b2.load(), MEM)
    assert finding(rep, MEM) is None
    assert "cannot show" in (skip_reason(rep, MEM) or "")


def test_no_gpu_memory_data_is_skipped() -> None:
    b = TraceBuilder(cc=None)
    b.step(1, 0, 100)
    b.memory(10, 1024, GB, GB, device_type=0, device_id=-1)
    assert "no GPU memory data" in (skip_reason(analyze(b.load(), MEM), MEM) or "")


def test_every_checklist_b_detector_registers_thresholds() -> None:
    """(Their docs and modules: tests/test_detector_contract.py.)"""
    from advisor.analysis.detection import all_detectors
    from advisor.detect.thresholds import THRESHOLDS

    ids = {INF, DP, PL, CAT, OPT, FUSE, MEM}
    assert {d.id for d in all_detectors() if d.id in ids} == ids
    assert {k.split(".")[0] for k in THRESHOLDS} >= {
        "python_loop",
        "cat_in_loop",
        "single_tensor_optimizer",
        "fusible_elementwise",
        "memory_headroom",
        "inference_without_no_grad",
    }
    assert np.isfinite(THRESHOLDS["python_loop.min_ops_per_step"].default)
