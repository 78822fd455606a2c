"""conv-bias-before-bn on PyTorch <= 1.10: train-mode BatchNorm bumps num_batches_tracked with an
out-of-place ``aten::add`` (``self.num_batches_tracked + 1``) between the convolution and the
BatchNorm; in the current and the 2021 Kineto categories."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from advisor.trace.model import Trace
from tests.detector_helpers import analyze, finding
from tests.kineto2021 import load_2021
from tests.tracebuilder import TraceBuilder

ID = "conv-bias-before-bn"
X, W, Y = [8, 3, 32, 32], [16, 3, 3, 3], [8, 16, 30, 30]
LOADERS: dict[str, Callable[[TraceBuilder], Trace]] = {
    "current": lambda b: b.load(),
    "kineto-2021": load_2021,
}


def _net(bump: str) -> TraceBuilder:
    """2 steps: conv2d with bias (cuDNN with its own bias add_), then ``bump`` on the 0-d
    num_batches_tracked, then batch_norm."""
    b = TraceBuilder(cc=(7, 0), gpu_name="Tesla V100-SXM2-32GB", total_mem=32 * 1024**3)
    for s in range(2):
        t0 = s * 2000.0
        b.step(s + 1, t0, 2000)
        dims = [X, W, [16], [], [], [], []]
        b.op("aten::conv2d", t0 + 10, 100, dims=dims)
        b.op("aten::convolution", t0 + 12, 96, dims=dims)
        b.op("aten::_convolution", t0 + 14, 92, dims=dims)
        c = b.op("aten::cudnn_convolution", t0 + 16, 50, dims=[X, W, []])
        b.launch(c, "cudaLaunchKernel", t0 + 20, 5, kernel="implicit_convolve_sgemm",
                 gpu_ts=t0 + 200, gpu_dur=300)  # fmt: skip
        a = b.op("aten::add_", t0 + 70, 30, dims=[Y, [1, 16, 1, 1], []])
        b.launch(a, "cudaLaunchKernel", t0 + 75, 5, kernel="elementwise_add",
                 gpu_ts=t0 + 500, gpu_dur=40)  # fmt: skip
        b.op(bump, t0 + 120, 5, dims=[[], [], []])
        b.op("aten::batch_norm", t0 + 130, 60, dims=[Y, [16], [16], [16], [16], [], [], [], []])
        b.runtime("cudaDeviceSynchronize", t0 + 200, 400)
    return b


@pytest.mark.parametrize("fmt", LOADERS)
@pytest.mark.parametrize("bump", ["aten::add", "aten::add_"])
def test_bias_before_train_mode_batchnorm(fmt: str, bump: str) -> None:
    f = finding(analyze(LOADERS[fmt](_net(bump)), ID), ID)
    assert f is not None and "1 convolution(s) with a bias feed BatchNorm directly" in f.summary
