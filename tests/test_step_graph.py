"""The whole step in CUDA graphs: a launch-bound step valued by replaying it as graphs would run
it (one launch, the kernels back to back, the host's per-operator cost gone), compile's fusion
the low end; what a graph cannot hold (a read of values back to the host) ends a graph; the
launch-side findings inside it are one row."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from advisor.analysis.pipeline import Options, analyze_trace
from advisor.derive.steps import steady_trace
from advisor.replay.fixes import GraphLaunch
from advisor.replay.model import graph
from advisor.replay.whatif import replay_with
from advisor.trace.model import Trace
from tests.detector_helpers import found, one
from tests.kineto2021 import load_2021
from tests.tracebuilder import TraceBuilder

LOADERS: dict[str, Callable[[TraceBuilder], Trace]] = {
    "current": lambda b: b.load(),
    "2021": load_2021,
}


def launch_bound_step(
    n: int = 300,
    steps: int = 3,
    read_at: int | None = None,
    python_after_read: float = 400.0,
    sync_at: int | None = None,
) -> TraceBuilder:
    """``steps`` training-like steps of ``n`` small kernels (3-6 us), one per operator: 15 us
    of Python before each operator (150 us before every 25th: a module boundary), the operator
    10 us on the host, its kernel starting 2 us after the launch returns. ``read_at``: an
    ``.item()`` before that operator, then ``python_after_read`` us of Python using the value;
    ``sync_at``: a ``torch.cuda.synchronize()`` there."""
    b = TraceBuilder()
    t = 0.0
    for s in range(steps):
        t0 = t
        step = b.step(s + 1, t0, 1.0)
        frame = b.frame("train.py", 40, "train_step", t0 + 1, 1.0)
        t = t0 + 10
        for i in range(n):
            if read_at is not None and i == read_at:
                item = b.op("aten::item", t, 60)
                dense = b.op("aten::_local_scalar_dense", t + 2, 56)
                b.launch(
                    dense,
                    "cudaMemcpyAsync",
                    t + 5,
                    40,
                    memcpy=("Memcpy DtoH (Device -> Pageable)", 4),
                    gpu_ts=t + 40,
                    gpu_dur=2,
                )
                assert item
                t += 60 + python_after_read
            if sync_at is not None and i == sync_at:
                b.runtime("cudaDeviceSynchronize", t, 30)
                t += 30
            t += 150.0 if i % 25 == 0 else 15.0
            op = b.op("aten::add", t, 10)
            b.launch(
                op,
                "cudaLaunchKernel",
                t + 3,
                5,
                kernel="vectorized_elementwise_kernel<add>",
                gpu_ts=t + 10,
                gpu_dur=3.0 + (i % 4),
            )
            t += 10
        t += 30
        step["dur"] = t - t0
        frame["dur"] = t - t0 - 2
    return b


def _gpu_idle(trace: Trace) -> tuple[object, object]:
    rep = analyze_trace(trace, None, Options())
    return rep, one(rep, "gpu-idle")


@pytest.mark.parametrize("fmt", list(LOADERS))
def test_launch_bound_step_is_valued_as_the_whole_step_in_cuda_graphs(fmt: str) -> None:
    trace = LOADERS[fmt](launch_bound_step())
    rep = analyze_trace(trace, None, Options())
    f = one(rep, "gpu-idle")
    step_ms = rep.run.step_ms_median
    # 300 kernels of 4.5 us (1.35 ms) issued over ~10 ms: replayed as graphs, one launch and
    # the kernels back to back, the step is its GPU work and the host's 1 us per graph node
    assert f.est_savings_ms >= 0.6 * step_ms
    assert f.est_savings_ms == pytest.approx(step_ms - 1.5, abs=0.4)
    low, high = f.est_savings_range_ms or (0.0, 0.0)
    # the range runs from compile's fusion (every kernel still launched, at its call's cost)
    # to the graph
    assert low < high == pytest.approx(f.est_savings_ms)
    assert low >= 0.5 * step_ms
    assert "Replayed as CUDA graphs" in f.summary and "compile's fusion" in f.summary
    assert 'mode="reduce-overhead"' in f.recommendation + f.snippet
    # the launch gaps tiny-kernels reports are part of that one figure: one row
    assert not found(rep, "tiny-kernels")
    assert [r.id for r in f.related] == ["tiny-kernels"]


@pytest.mark.parametrize("fmt", list(LOADERS))
def test_a_read_of_values_back_to_the_host_ends_the_graph(fmt: str) -> None:
    rep0 = analyze_trace(LOADERS[fmt](launch_bound_step()), None, Options())
    rep = analyze_trace(LOADERS[fmt](launch_bound_step(read_at=150)), None, Options())
    f = one(rep, "gpu-idle")
    left0 = rep0.run.step_ms_median - one(rep0, "gpu-idle").est_savings_ms
    left = rep.run.step_ms_median - f.est_savings_ms
    # the graph stops at the .item(): the 550 us of Python that uses the value stays, and the
    # kernels after it wait for the read (the GPU drains there): the step as graphs is that
    # much longer than the same step without the read
    assert left - left0 == pytest.approx(0.55 + 0.06, abs=0.05)
    assert "It cannot be one graph: aten::item (1 per step)" in f.summary
    assert any(e.what.startswith("ends a CUDA graph: aten::item") for e in f.evidence)
    assert "aten::item" in f.recommendation


def test_kernels_after_a_sync_do_not_start_before_it_in_a_graph() -> None:
    # CUDA graphs of the kernels around a torch.cuda.synchronize(): the kernels after it are a
    # graph of their own, launched once the sync returned, never chained to the ones before it
    trace = steady_trace(launch_bound_step(sync_at=150).load())
    rows = np.arange(len(trace.kernels))
    rep = replay_with(trace, GraphLaunch(rows, host_keep=0.0))
    gr = graph(trace)
    starts = rep.gpu_start_ns[gr.kernel_nodes(rows)]
    rt = trace.runtime
    syncs = np.flatnonzero(rt["name"].astype(str).to_numpy() == "cudaDeviceSynchronize")
    sync_end = rep.host_end_ns[gr.host_nodes(syncs)]
    launched = rt["ts_ns"].to_numpy()[trace.kernels["launch_idx"].to_numpy()]
    for r, end in zip(syncs.tolist(), sync_end.tolist(), strict=True):
        after = launched > rt["end_ns"].to_numpy()[r]
        first = int(np.argmax(after))
        assert starts[first] >= end


def adamw_step(steps: int = 3) -> TraceBuilder:
    """A launch-bound training step (:func:`launch_bound_step`, 100 kernels) ending with an
    AdamW step that holds the host 1.8 ms: six ``_foreach`` operators of 100 us, each launching
    five 5 us kernels, 150 us of Python between them; the GPU idles meanwhile."""
    b = TraceBuilder()
    span = 100 * 25 + 2_300
    for s in range(steps):
        t0 = s * span
        b.step(s + 1, t0, span)
        t = t0 + 10
        for _ in range(100):
            op = b.op("aten::add", t + 15, 10)
            b.launch(op, "cudaLaunchKernel", t + 18, 5, kernel="add", gpu_ts=t + 25, gpu_dur=3)
            t += 25
        t += 50
        b.annotation("Optimizer.step#AdamW.step", t, 1_800)
        u = t + 60
        for _ in range(6):
            op = b.op("aten::_foreach_mul_", u, 100)
            for k in range(5):
                lt = u + 10 + k * 18
                b.launch(
                    op,
                    "cudaLaunchKernel",
                    lt,
                    5,
                    kernel="multi_tensor_apply_kernel",
                    gpu_ts=lt + 7,
                    gpu_dur=5,
                )
            u += 250
    return b


def test_optimizer_host_time_in_a_launch_bound_step_is_part_of_the_graph_row() -> None:
    rep = analyze_trace(adamw_step().load(), None, Options())
    f = one(rep, "gpu-idle")
    # the whole step in graphs holds the optimizer's host time too: one row, AdamW's own fix
    # (a fused step) listed under it with its figure, never zero while the GPU idles
    assert f.est_savings_ms >= 0.6 * rep.run.step_ms_median
    opt = next(r for r in f.related if r.id == "optimizer-host-time")
    assert opt.est_savings_ms > 0.3 and "0.00 us" not in opt.summary
    assert not found(rep, "optimizer-host-time")


def test_copies_on_the_device_that_finish_within_their_call_do_not_end_a_graph() -> None:
    # a device-to-device copy after every 10th operator finishes before its call returns: the
    # replay reads the call as waiting for it, but a graph holds such a copy
    b = launch_bound_step()
    for ev in [e for e in b.events if e.get("cat") == "cpu_op" and e["name"] == "aten::add"][::10]:
        t = ev["ts"] - b.base + 11
        cp = b.op("aten::copy_", t, 3)
        b.launch(
            cp,
            "cudaMemcpyAsync",
            t,
            3,
            memcpy=("Memcpy DtoD (Device -> Device)", 4096),
            gpu_ts=t + 0.5,
            gpu_dur=1.0,
        )
    f = one(analyze_trace(b.load(), None, Options()), "gpu-idle")
    assert "Replayed as CUDA graphs" in f.summary
    assert "It cannot be one graph" not in f.summary
