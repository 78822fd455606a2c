"""tiny-kernels: launch-bound stretches of short kernels and the idle gaps between them."""

from __future__ import annotations

import pytest

from tests.flagship_util import finding, run, skipped
from tests.tracebuilder import TraceBuilder


def _stretch(n_kernels: int = 50, kernel_us: float = 3.0, queued: bool = False,
             annotation: str | None = "Optimizer.step#SGD.step") -> TraceBuilder:  # fmt: skip
    """3 steps of 1 ms; each launches ``n_kernels`` kernels 15 us apart. Launch-bound: each
    kernel starts 2 us after its 8 us launch call, 12 us after the previous one ended."""
    b = TraceBuilder()
    for s in range(3):
        t = s * 1000.0
        b.step(s + 1, t, 1000)
        if annotation:
            b.annotation(annotation, t + 5, n_kernels * 15 + 10)
        b.frame("train.py", 30, "train", t + 6, n_kernels * 15 + 8)
        for i in range(n_kernels):
            lt = t + 10 + i * 15
            op = b.op("aten::add_", lt - 1, 10)
            gpu = t + 5 + i * kernel_us if queued else lt + 10
            b.launch(op, "cudaLaunchKernel", lt, 8, kernel="vectorized_elementwise_kernel",
                     gpu_ts=gpu + (500 if queued else 0), gpu_dur=kernel_us)  # fmt: skip
    return b


def test_launch_bound_tiny_kernels_report_the_gaps() -> None:
    f = finding(run(_stretch().load(), "tiny-kernels"), "tiny-kernels")
    assert f is not None
    # 49 gaps of 12 us per step (the first kernel of a step follows a long gap: not counted)
    assert f.est_savings_ms == pytest.approx(49 * 0.012, abs=1e-6)
    assert f.summary.startswith("49 tiny kernels per step")
    assert "Optimizer.step#SGD.step" in f.evidence[0].what and f.evidence[0].count == 147
    assert "fused=True" in f.recommendation + f.snippet
    assert f.locations[0].line == 30


def test_queued_kernels_are_not_launch_bound() -> None:
    # the same tiny kernels, all launched well before they run back to back: no gaps
    rep = run(_stretch(queued=True).load(), "tiny-kernels")
    assert finding(rep, "tiny-kernels") is None


def test_long_kernels_and_few_kernels_do_not_fire() -> None:
    assert finding(run(_stretch(kernel_us=11.0, annotation=None).load(), "tiny-kernels"),
                   "tiny-kernels") is None  # fmt: skip
    assert finding(run(_stretch(n_kernels=10).load(), "tiny-kernels"), "tiny-kernels") is None
    # thresholds are honoured
    rep = run(_stretch(n_kernels=10).load(), "tiny-kernels", tiny_kernels__min_per_step=5)
    assert finding(rep, "tiny-kernels") is not None


def test_missing_data() -> None:
    cpu = TraceBuilder(cc=None)
    cpu.step(1, 0, 100)
    cpu.op("aten::add", 1, 10)
    assert (
        skipped(run(cpu.load(), "tiny-kernels"), "tiny-kernels") == "no GPU activity in this trace"
    )
    # kernels without launch calls (runtime events not recorded): nothing to attribute
    b = TraceBuilder()
    b.step(1, 0, 1000)
    for i in range(60):
        b.kernel("k", 10 + i * 15, 3)
    assert finding(run(b.load(), "tiny-kernels"), "tiny-kernels") is None
