"""activation-recompute: forward operators re-run inside backward (activation checkpointing).

GPU-shaped traces from the builder (a checkpointed block whose convolution runs again under
``CheckpointFunctionBackward`` or inside the node that unpacks it), the real shared ResNet
training traces (no checkpointing: must stay silent) and the CPU sample recorded by
``advisor profile`` from examples/activation_checkpoint.py.
"""

from __future__ import annotations

import pytest

from tests.conftest import SAMPLES, shared_trace
from tests.detector_helpers import analyze, finding
from tests.tracebuilder import TraceBuilder

ID = "activation-recompute"
BW = 2000  # the autograd thread
GB = 1024**3


def bw_launch(b: TraceBuilder, op: dict, ts: float, kernel: str, gpu_ts: float, dur: float) -> None:
    """A kernel launched from the autograd thread by ``op``."""
    rt = b.runtime("cudaLaunchKernel", ts, 5, op, tid=BW)
    corr, ext = rt["args"]["correlation"], rt["args"]["External id"]
    b.kernel(kernel, gpu_ts, dur, corr=corr, ext=ext)


def ckpt_trace(
    reentrant: bool = True,
    create_graph: bool = False,
    recompute: bool = True,
    used_gb: float | None = 20.0,
    frames: bool = False,
) -> TraceBuilder:
    """3 steps of 1 ms on an 80 GB GPU: forward conv (kernel 200 us), backward on the autograd
    thread: the conv recomputed (kernel 200 us) under the checkpoint node, then its backward
    (kernel 300 us) and a device sync; then the optimizer on the main thread."""
    b = TraceBuilder()
    seq = 10
    for s in range(3):
        t = s * 1000.0
        b.step(s + 1, t, 1000)
        if used_gb is not None:
            b.memory(t + 5, 1024, int(used_gb * GB), int(used_gb * GB))
        f = b.op("aten::conv2d", t + 10, 30, seq=seq)
        b.launch(f, "cudaLaunchKernel", t + 20, 5, kernel="implicit_gemm_fwd", gpu_dur=200)
        node = "CheckpointFunctionBackward" if reentrant else "ConvolutionBackward0"
        b.op(f"autograd::engine::evaluate_function: {node}", t + 300, 500, tid=BW, seq=seq)
        b.op(node, t + 301, 498, tid=BW, seq=seq)
        if frames:
            b.frame("torch/utils/checkpoint.py", 1657, "recompute_fn", t + 302, 60, tid=BW)
        if recompute:
            r = b.op("aten::conv2d", t + 310, 40, tid=BW, seq=seq + 1)
            bw_launch(b, r, t + 320, "implicit_gemm_fwd", t + 325, 200)
        cb = b.op(
            "aten::convolution_backward", t + 360, 30, tid=BW, seq=seq if create_graph else None
        )
        bw_launch(b, cb, t + 370, "dgrad_kernel", t + (525 if recompute else 375), 300)
        b.runtime("cudaDeviceSynchronize", t + 380, (520 if recompute else 320), tid=BW)
        # the optimizer, on the main thread once backward has returned
        at = 905 if recompute else 705
        o = b.op("aten::add_", t + at, 10)
        b.launch(o, "cudaLaunchKernel", t + at + 1, 5, kernel="adam_kernel", gpu_dur=10)
        seq += 2
    return b


def test_reentrant_recompute_is_replayed_with_its_kernels_and_memory() -> None:
    f = finding(analyze(ckpt_trace().load(), ID), ID)
    assert f is not None
    # the recomputed conv's 200 us kernel sits on the step's critical path: the replay without
    # it saves about that much (the host waits for the GPU at the step's end)
    assert f.est_savings_ms == pytest.approx(0.2, abs=0.03)
    lo, hi = f.est_savings_range_ms or (0, 0)
    assert lo < f.est_savings_ms <= hi
    assert "aten::conv2d x1" in f.summary and "20.0 GB of 80.0 GB" in f.summary
    assert f.severity != "info" and f.confidence == "high"
    assert any("GPU kernels launched by the recomputation" in e.what for e in f.evidence)
    assert any(e.what.startswith("aten::conv2d recomputed") for e in f.evidence)


def test_non_reentrant_recompute_under_the_unpacking_node_is_found() -> None:
    f = finding(analyze(ckpt_trace(reentrant=False).load(), ID), ID)
    assert f is not None and f.est_savings_ms > 0.1


def test_near_full_memory_makes_it_information_with_the_trade_off() -> None:
    f = finding(analyze(ckpt_trace(used_gb=76.0).load(), ID), ID)
    assert f is not None
    assert f.severity == "info" and f.est_savings_ms == 0.0
    assert "would not fit" in f.recommendation and "selective" in f.recommendation


def test_no_memory_data_says_so() -> None:
    f = finding(analyze(ckpt_trace(used_gb=None).load(), ID), ID)
    assert f is not None and "not in this trace" in f.summary and f.confidence == "medium"


def test_backward_without_recomputation_is_silent() -> None:
    assert finding(analyze(ckpt_trace(recompute=False).load(), ID), ID) is None


def test_double_backward_needs_checkpoint_frames() -> None:
    # create_graph=True: backward formulas record sequence numbers too; a forward-named op
    # under a plain backward node is not taken for recomputation without a checkpoint frame
    plain = ckpt_trace(reentrant=False, create_graph=True)
    assert finding(analyze(plain.load(), ID), ID) is None
    framed = ckpt_trace(reentrant=False, create_graph=True, frames=True)
    f = finding(analyze(framed.load(), ID), ID)
    assert f is not None and "aten::convolution_backward" not in f.summary
    # the reentrant checkpoint node is a frame of its own
    assert finding(analyze(ckpt_trace(create_graph=True).load(), ID), ID) is not None


@pytest.mark.shared
@pytest.mark.parametrize(
    "rel",
    [
        "tracelens/mi300/ddp_resnet18_no_pool/train_resnet18.json.gz",
        "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
        "kineto/resnet50_autograd_api_num_workers_0/worker0.pt.trace.json.gz",
    ],
)
def test_resnet_training_without_checkpointing_is_silent(rel: str) -> None:
    from advisor.trace import load_trace

    assert finding(analyze(load_trace(shared_trace(rel)), ID), ID) is None


def test_cpu_sample_names_the_checkpoint_call_and_the_block() -> None:
    from advisor.trace import load_trace

    f = finding(analyze(load_trace(SAMPLES / "activation_checkpoint.cpu.json.gz"), ID), ID)
    assert f is not None and f.est_savings_ms > 0
    lines = {(loc.file, loc.line) for loc in f.locations}
    assert ("activation_checkpoint.py", 32) in lines  # checkpoint(block, x, ...)
    assert ("activation_checkpoint.py", 22) in lines  # the block's forward, recomputed
    assert "CPU run" in f.summary


def test_forward_ops_between_nodes_on_the_autograd_thread() -> None:
    # a framework's recompute run from a hook between backward nodes: top level on the
    # autograd thread, outside any node, grad mode on
    b = ckpt_trace(reentrant=False, recompute=False)
    for s in range(3):
        t = s * 1000.0
        r = b.op("aten::conv2d", t + 200, 40, tid=BW, seq=500 + s)
        bw_launch(b, r, t + 210, "implicit_gemm_fwd", t + 230, 100)
    f = finding(analyze(b.load(), ID), ID)
    assert f is not None and "aten::conv2d x1" in f.summary


def test_a_thread_running_the_loop_and_backward_is_not_an_autograd_thread() -> None:
    # CPU training: forward, backward and the optimizer on one thread; the next micro-batch's
    # forward sits between two backward passes and is not recomputation
    b = TraceBuilder(cc=None)
    for s in range(3):
        t = s * 1000.0
        b.step(s + 1, t, 1000)
        for k in range(2):
            m = t + k * 450
            b.op("aten::zeros", m + 5, 5)
            b.op("aten::conv2d", m + 20, 100, seq=10 * s + k)
            b.op("autograd::engine::evaluate_function: ConvolutionBackward0", m + 200, 200)
            b.op("ConvolutionBackward0", m + 201, 198)
    assert finding(analyze(b.load(), ID), ID) is None
