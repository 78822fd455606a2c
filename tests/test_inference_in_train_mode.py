"""inference-in-train-mode: forward passes with no backward while dropout drops and BatchNorm
runs on batch statistics (model.eval() not called); in the current and 2021 Kineto categories."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from advisor.trace.model import Trace
from tests.detector_helpers import analyze, finding
from tests.kineto2021 import load_2021
from tests.tracebuilder import TraceBuilder

ID = "inference-in-train-mode"
Y = [32, 64, 56, 56]
BN_TRAIN = "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1, true>(int)"
BN_EVAL = "void cudnn::bn_fw_inf_1C11_kernel_NCHW<float, float, true, 1>(int)"
DROP = "void at::native::(anonymous namespace)::fused_dropout_kernel_vec<float, float>(int)"
LOADERS: dict[str, Callable[[TraceBuilder], Trace]] = {
    "current": lambda b: b.load(),
    "kineto-2021": load_2021,
}


def _passes(train_mode: bool = True, backward: bool = False, gpu: bool = True) -> TraceBuilder:
    """3 steps: conv -> batch_norm -> dropout -> linear; in train mode BatchNorm bumps
    num_batches_tracked and runs cuDNN's training kernel, dropout calls native_dropout."""
    b = TraceBuilder() if gpu else TraceBuilder(cc=None)
    for s in range(3):
        t0 = s * 3000.0
        b.step(s + 1, t0, 3000)
        b.frame("eval.py", 22, "evaluate", t0 + 2, 2000)
        gpu_t = t0 + 500
        o = b.op("aten::conv2d", t0 + 10, 40, dims=[Y, [64, 64, 3, 3], []])
        if gpu:
            b.launch(o, "cudaLaunchKernel", t0 + 20, 5, kernel="implicit_convolve_sgemm",
                     gpu_ts=gpu_t, gpu_dur=600)  # fmt: skip
        gpu_t += 600
        if train_mode:
            b.op("aten::add_", t0 + 60, 5, dims=[[], [], []])  # num_batches_tracked += 1
        bn = b.op("aten::batch_norm", t0 + 70, 60, dims=[Y, [64], [64], [64], [64]])
        c = b.op("aten::cudnn_batch_norm", t0 + 75, 50, dims=[Y, [64]])
        if gpu:
            b.launch(c, "cudaLaunchKernel", t0 + 80, 5, kernel=BN_TRAIN if train_mode else BN_EVAL,
                     gpu_ts=gpu_t, gpu_dur=300)  # fmt: skip
        gpu_t += 300
        assert bn
        d = b.op("aten::dropout", t0 + 140, 60 if train_mode else 3, dims=[Y, [], []])
        if train_mode:
            nd = b.op("aten::native_dropout", t0 + 145, 50, dims=[Y, [], []])
            if gpu:
                b.launch(nd, "cudaLaunchKernel", t0 + 150, 5, kernel=DROP, gpu_ts=gpu_t,
                         gpu_dur=250)  # fmt: skip
            gpu_t += 250
        assert d
        o = b.op("aten::linear", t0 + 210, 40, dims=[[32, 1024], [10, 1024], [10]])
        if gpu:
            b.launch(o, "cudaLaunchKernel", t0 + 220, 5, kernel="ampere_sgemm_32x32_nn",
                     gpu_ts=gpu_t, gpu_dur=100)  # fmt: skip
        if backward:
            b.op("autograd::engine::evaluate_function: AddmmBackward0", t0 + 300, 50)
        if gpu:
            b.runtime("cudaDeviceSynchronize", t0 + 400, gpu_t + 110 - (t0 + 400))
    return b


@pytest.mark.parametrize("fmt", LOADERS)
def test_dropout_and_batch_statistics_without_backward(fmt: str) -> None:
    f = finding(analyze(LOADERS[fmt](_passes()), ID), ID)
    assert f is not None
    assert f.summary.startswith(
        "3 step(s) run forward with no backward and the model in train mode: 1 dropout call(s) "
        "that drop and 1 BatchNorm call(s) on batch statistics per step."
    )
    assert "model.eval()" in f.recommendation and f.confidence == "medium"
    # the dropout kernel (250 us) goes; cuDNN's train BatchNorm kernel is not claimed
    assert f.est_savings_ms == pytest.approx(0.25, abs=0.02)
    assert f.locations[0].file == "eval.py"


@pytest.mark.parametrize("fmt", LOADERS)
@pytest.mark.parametrize("kw", [{"train_mode": False}, {"backward": True}])
def test_eval_mode_or_training_is_not_reported(fmt: str, kw: dict) -> None:
    assert finding(analyze(LOADERS[fmt](_passes(**kw)), ID), ID) is None


def test_cpu_only_inference_in_train_mode() -> None:
    f = finding(analyze(_passes(gpu=False).load(), ID), ID)
    assert f is not None and "1 dropout call(s) that drop" in f.summary
    assert f.est_savings_ms > 0  # the native_dropout calls and the bumps' host time


@pytest.mark.shared
def test_alexnet_benchmark_runs_forward_in_train_mode() -> None:
    from advisor.trace import load_trace
    from tests.conftest import shared_trace

    # PARAM's AlexNet benchmark: forward passes with dropout dropping (native_dropout kernels)
    rel = "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"
    f = finding(analyze(load_trace(shared_trace(rel)), ID), ID)
    assert f is not None and "2 dropout call(s) that drop per step" in f.summary
    assert "BatchNorm" not in f.summary  # AlexNet has none
    # the same benchmark in CUPTI's range-profiler mode records no GPU activity: its host
    # times include the profiler's serialization, so nothing is claimed
    rel = "hta/cupti_profiler/benchmark_result_924719_1679055439_trace.json.gz"
    g = finding(analyze(load_trace(shared_trace(rel)), ID), ID)
    assert g is not None and g.est_savings_ms == 0.0
