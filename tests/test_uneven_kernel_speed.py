"""uneven-kernel-speed: identical launches (same kernel, grid, block, input shapes) where some
run 1.5x or more slower than their peers, with when they ran."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from advisor.trace.model import Trace
from tests.detector_helpers import analyze, finding
from tests.kineto2021 import load_2021
from tests.tracebuilder import TraceBuilder

ID = "uneven-kernel-speed"
GEMM = "sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"
GATHER = "void at::native::index_elementwise_kernel<128, 4>(long)"  # data-dependent: not compared
DIMS = [[512, 4096], [4096, 4096]]
LOADERS: dict[str, Callable[[TraceBuilder], Trace]] = {
    "current": lambda b: b.load(),
    "kineto-2021": load_2021,
}


def _layers(
    slow: Callable[[int, int], float],
    steps: int = 3,
    kernel: str = GEMM,
    dims: Callable[[int], list] = lambda i: DIMS,
    beside: bool = False,
) -> TraceBuilder:
    """``steps`` steps of 10 identical GEMM calls (200 us each, back to back on the GPU, the
    host waiting for the last); call ``i`` of step ``s`` takes ``slow(s, i)`` times longer.
    ``beside``: a 5 ms kernel on stream 9 runs under every slow call."""
    b = TraceBuilder()
    t0 = 0.0
    for s in range(steps):
        gpu = t0 + 300
        durs = [200.0 * slow(s, i) for i in range(10)]
        span = 300 + sum(durs) + 100
        b.step(s + 1, t0, span)
        b.frame("model.py", 40, "forward", t0 + 5, 250)
        for i, d in enumerate(durs):
            op = b.op("aten::mm", t0 + 10 + 20 * i, 15, dims=dims(i), types=["c10::BFloat16"] * 2)
            b.launch(op, "cudaLaunchKernel", t0 + 12 + 20 * i, 5, kernel=kernel, gpu_ts=gpu,
                     gpu_dur=d, grid=[128, 1, 1])  # fmt: skip
            if beside and d > 200:
                o = b.op("aten::add", t0 + 15 + 20 * i, 3)
                b.launch(o, "cudaLaunchKernel", t0 + 16 + 20 * i, 1, kernel=GATHER, gpu_ts=gpu,
                         gpu_dur=d, stream=9, grid=[1024, 1, 1])  # fmt: skip
            gpu += d
        b.runtime("cudaDeviceSynchronize", t0 + 250, gpu + 5 - (t0 + 250))
        t0 += span
    return b


@pytest.mark.parametrize("fmt", LOADERS)
def test_the_same_calls_in_every_step(fmt: str) -> None:
    # layers 2, 5 and 8 run at 2x in every step: 3 x 200 us above their peers per step
    trace = LOADERS[fmt](_layers(lambda s, i: 2.0 if i in (2, 5, 8) else 1.0))
    f = finding(analyze(trace, ID), ID)
    assert f is not None
    assert "3 call(s) per step ran 2.0-2.0x slower than identical launches" in f.summary
    assert "30 identical calls, median 200 us" in f.summary
    assert "same calls in every step" in f.summary and "placement" in f.recommendation
    assert f.est_savings_ms == pytest.approx(0.6, abs=0.02)  # GPU-bound: the replay gains all
    assert f.evidence[0].count == 9 and f.locations[0].file == "model.py"


@pytest.mark.parametrize("fmt", LOADERS)
def test_one_stretch_of_time(fmt: str) -> None:
    # every call of step 6 of 8 at 2.4x: the GPU was slower then
    trace = LOADERS[fmt](_layers(lambda s, i: 2.4 if s == 5 else 1.0, steps=8))
    f = finding(analyze(trace, ID), ID)
    assert f is not None and "one stretch of" in f.summary and "clocks" in f.recommendation
    assert "2.4-2.4x" in f.summary


@pytest.mark.parametrize("fmt", LOADERS)
def test_beside_other_streams(fmt: str) -> None:
    trace = LOADERS[fmt](_layers(lambda s, i: 1.8 if i in (1, 6) else 1.0, beside=True))
    f = finding(analyze(trace, ID), ID)
    assert f is not None and "other streams of this process computed" in f.summary
    assert "priority" in f.recommendation


@pytest.mark.parametrize(
    "kw",
    [
        {"slow": lambda s, i: 1.3 if i in (2, 5, 8) else 1.0},  # under 1.5x: within noise
        {"slow": lambda s, i: 2.0 if i in (2, 5, 8) else 1.0, "kernel": GATHER},  # by its data
        # without recorded shapes a GEMM's grid does not tell its K: not compared
        {"slow": lambda s, i: 2.0 if i in (2, 5, 8) else 1.0, "dims": lambda i: None},
        # different shapes are different work, however they are launched
        {"slow": lambda s, i: 2.0 if i in (2, 5, 8) else 1.0,
         "dims": lambda i: [[1024, 4096], [4096, 4096]] if i in (2, 5, 8) else DIMS},
    ],
)  # fmt: skip
@pytest.mark.parametrize("fmt", LOADERS)
def test_no_finding(fmt: str, kw: dict) -> None:
    assert finding(analyze(LOADERS[fmt](_layers(**kw)), ID), ID) is None
