"""Advice that fits what the trace shows: no gradient scaler or backward-pass advice without a
backward, "CUDA graphs" (not "use torch.compile") for a model already compiled, and gpu-idle
pointing only to checks that reported; in the current and 2021 Kineto categories."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from advisor.analysis.pipeline import Options, analyze_trace
from advisor.trace.model import Trace
from tests.detector_helpers import analyze, finding
from tests.kineto2021 import load_2021
from tests.test_conv_bias_bn_torch110 import _net
from tests.test_gpu_idle import _steps as _idle_steps
from tests.test_tiny_kernels import _stretch
from tests.tracebuilder import TraceBuilder

LOADERS: dict[str, Callable[[TraceBuilder], Trace]] = {
    "current": lambda b: b.load(),
    "kineto-2021": load_2021,
}


def _backward(b: TraceBuilder) -> TraceBuilder:
    """The same trace with an autograd backward node in every step (a training trace)."""
    for ev in [e for e in b.events if str(e.get("name", "")).startswith("ProfilerStep#")]:
        t = ev["ts"] - b.base
        b.op("autograd::engine::evaluate_function: AddmmBackward0", t + ev["dur"] - 3, 1)
    return b


def _v100_mm() -> TraceBuilder:
    b = TraceBuilder(cc=(7, 0), gpu_name="Tesla V100-SXM2-32GB", total_mem=32 * 1024**3)
    for s in range(3):
        t = s * 2000.0
        b.step(s + 1, t, 2000)
        o = b.op("aten::mm", t + 10, 50, dims=[[256, 512], [512, 256]], types=["float"] * 2)
        b.launch(o, "cudaLaunchKernel", t + 20, 5, kernel="volta_sgemm_128x64_nn",
                 gpu_ts=t + 30, gpu_dur=500)  # fmt: skip
        b.runtime("cudaDeviceSynchronize", t + 40, 495)
    return b


@pytest.mark.parametrize("fmt", LOADERS)
def test_gradient_scaler_only_when_training(fmt: str) -> None:
    infer = finding(analyze(LOADERS[fmt](_v100_mm()), "fp32-matmul"), "fp32-matmul")
    assert infer is not None and "float16" in infer.recommendation
    assert "GradScaler" not in infer.recommendation + infer.snippet
    assert ".backward()" not in infer.snippet and "scaler" not in infer.snippet.split("#")[0]
    train = finding(analyze(LOADERS[fmt](_backward(_v100_mm())), "fp32-matmul"), "fp32-matmul")
    assert train is not None and "GradScaler" in train.recommendation + train.snippet


@pytest.mark.parametrize("fmt", LOADERS)
def test_no_gradient_advice_without_backward(fmt: str) -> None:
    infer = finding(
        analyze(LOADERS[fmt](_net("aten::add_")), "conv-bias-before-bn"), "conv-bias-before-bn"
    )
    assert infer is not None and "fuse" in infer.recommendation
    assert "gradient" not in infer.recommendation and "optimizer" not in infer.recommendation
    train = finding(
        analyze(LOADERS[fmt](_backward(_net("aten::add_"))), "conv-bias-before-bn"),
        "conv-bias-before-bn",
    )
    assert train is not None and "its gradient and its optimizer update" in train.recommendation


@pytest.mark.parametrize("fmt", LOADERS)
def test_a_compiled_model_is_told_cuda_graphs(fmt: str) -> None:
    eager = finding(analyze(LOADERS[fmt](_stretch()), "tiny-kernels"), "tiny-kernels")
    assert eager is not None and "`torch.compile(model)`" in eager.recommendation
    b = _stretch()
    for s in range(3):  # the same launches from inside a compiled region
        b.op("Torch-Compiled Region: 0/0", s * 1000.0 + 8, 780)
    f = finding(analyze(LOADERS[fmt](b), "tiny-kernels"), "tiny-kernels")
    assert f is not None and "already compiled" in f.recommendation
    assert 'mode="reduce-overhead"' in f.recommendation
    assert "`torch.compile(model)`;" not in f.recommendation


@pytest.mark.parametrize("fmt", LOADERS)
def test_gpu_idle_points_only_to_checks_that_reported(fmt: str) -> None:
    trace = LOADERS[fmt](_idle_steps(dl_us=400, late_launch_us=720))
    alone = analyze_trace(trace, None, Options(only=frozenset({"gpu-idle"})))
    (f,) = alone.findings
    # dataloader-stall did not run: no pointer to it, its advice kept
    assert "dataloader-stall" not in f.summary + f.recommendation
    assert f.summary.endswith("The largest share is dataloader.")
    assert "(num_workers, pin_memory, persistent_workers)" in f.recommendation
    both = analyze_trace(trace, None, Options(only=frozenset({"gpu-idle", "dataloader-stall"})))
    g = next(x for x in both.findings if x.id == "gpu-idle")
    assert "see dataloader-stall" in g.summary
