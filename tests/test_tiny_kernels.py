"""tiny-kernels: launch-bound stretches of short kernels and the idle gaps between them."""

from __future__ import annotations

import numpy as np
import pytest
from advisor.detectors.tiny_kernels import _contexts

from advisor.trace.model import Trace
from tests.detector_helpers import analyze, finding, skip_reason
from tests.tracebuilder import TID, TraceBuilder


def _stretch(
    n_kernels: int = 50,
    kernel_us: float = 3.0,
    queued: bool = False,
    annotation: str | None = "Optimizer.step#SGD.step",
) -> TraceBuilder:
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
            b.launch(
                op,
                "cudaLaunchKernel",
                lt,
                8,
                kernel="vectorized_elementwise_kernel",
                gpu_ts=gpu + (500 if queued else 0),
                gpu_dur=kernel_us,
            )
    return b


def test_launch_bound_tiny_kernels_report_the_gaps() -> None:
    f = finding(analyze(_stretch().load(), "tiny-kernels"), "tiny-kernels")
    assert f is not None
    # 49 launch-bound kernels per step (the first follows a long gap: not counted), replayed as
    # a CUDA graph: each 8 us launch call costs 1 us and half the 7 us between calls goes too
    assert f.est_savings_ms == pytest.approx(49 * 0.0105, abs=0.01)
    assert f.est_savings_range_ms == pytest.approx((49 * 0.007, 49 * 0.014), abs=0.01)
    assert f.summary.startswith("49 tiny kernels per step")
    assert "Optimizer.step#SGD.step" in f.evidence[0].what and f.evidence[0].count == 147
    assert "fused=True" in f.recommendation + f.snippet
    assert f.locations[0].line == 30


def test_queued_kernels_are_not_launch_bound() -> None:
    # the same tiny kernels, all launched well before they run back to back: no gaps
    rep = analyze(_stretch(queued=True).load(), "tiny-kernels")
    assert finding(rep, "tiny-kernels") is None


def test_kernels_that_outlast_their_launches_and_few_kernels_do_not_fire() -> None:
    # 16 us kernels issued 15 us apart keep the GPU busy: no gap waits for a launch
    assert (
        finding(
            analyze(_stretch(kernel_us=16.0, annotation=None).load(), "tiny-kernels"),
            "tiny-kernels",
        )
        is None
    )
    # 10 launch-bound kernels among 70 per step: neither many nor most of the step's kernels
    assert finding(analyze(_few().load(), "tiny-kernels"), "tiny-kernels") is None
    # thresholds are honoured
    rep = analyze(_few().load(), "tiny-kernels", tiny_kernels__min_per_step=5)
    assert finding(rep, "tiny-kernels") is not None
    # a step of few kernels, most of them waiting for their launch, is launch-bound as a whole
    f = finding(analyze(_stretch(n_kernels=10).load(), "tiny-kernels"), "tiny-kernels")
    assert f is not None and f.summary.startswith("9 tiny kernels per step")
    assert finding(analyze(_stretch(n_kernels=4).load(), "tiny-kernels"), "tiny-kernels") is None


def _few() -> TraceBuilder:
    """``_stretch(n_kernels=10)`` with 60 more kernels per step queued behind a long one."""
    b = _stretch(n_kernels=10)
    for s in range(3):
        t = s * 1000.0 + 300
        op = b.op("aten::mm", t, 8)
        b.launch(op, "cudaLaunchKernel", t + 1, 5, kernel="gemm", gpu_ts=t + 8, gpu_dur=300)
        for i in range(60):
            op = b.op("aten::add_", t + 10 + i * 3, 2)
            b.launch(
                op,
                "cudaLaunchKernel",
                t + 10 + i * 3,
                2,
                kernel="add",
                gpu_ts=t + 310 + i * 3,
                gpu_dur=3,
            )
    return b


def test_missing_data() -> None:
    cpu = TraceBuilder(cc=None)
    cpu.step(1, 0, 100)
    cpu.op("aten::add", 1, 10)
    assert (
        skip_reason(analyze(cpu.load(), "tiny-kernels"), "tiny-kernels")
        == "no GPU activity in this trace"
    )
    # kernels without launch calls (runtime events not recorded): nothing to attribute
    b = TraceBuilder()
    b.step(1, 0, 1000)
    for i in range(60):
        b.kernel("k", 10 + i * 15, 3)
    assert finding(analyze(b.load(), "tiny-kernels"), "tiny-kernels") is None


def _contexts_reference(trace: Trace, tids: np.ndarray, ts: np.ndarray) -> list[str]:
    """The per-launch walk that tiny_kernels._contexts vectorizes (searchsorted per launch,
    then back at most 64 ranges to the innermost one enclosing the launch)."""
    a = trace.annotations
    a = a[
        ~a["on_gpu"].to_numpy(dtype=bool)
        & ~a["name"].astype(str).str.startswith("ProfilerStep#").to_numpy()
    ]
    out = []
    for tid, t in zip(tids, ts, strict=True):
        g = a[a["tid"] == tid].sort_values("ts_ns", kind="stable")
        starts, ends, names = g["ts_ns"].to_numpy(), g["end_ns"].to_numpy(), g["name"].tolist()
        i = int(np.searchsorted(starts, t, side="right")) - 1
        for _ in range(64):
            if i < 0 or ends[i] >= t:
                break
            i -= 1
        out.append(str(names[i]) if i >= 0 and ends[i] >= t else "")
    return out


def test_contexts_innermost_enclosing_annotation() -> None:
    b = TraceBuilder()
    b.step(1, 0, 20_000)
    b.annotation("outer", 0, 10_000)
    b.annotation("inner", 100, 100)
    b.annotation("later", 300, 100)
    b.annotation("gpu-side", 0, 10_000, gpu=True)
    for k in range(70):  # more finished siblings than the 64-range walk-back
        b.annotation(f"sib{k}", 2_000 + 10 * k, 5)
    b.annotation("other-thread", 0, 500, tid=2)
    tr = b.load()
    cases = [
        (TID, 150, "inner"),
        (TID, 250, "outer"),
        (TID, 350, "later"),
        (TID, 2_012, "sib1"),
        (TID, 2_017, "outer"),
        (TID, 2_703, ""),  # 70 finished ranges to walk back over: past the limit
        (TID, 15_000, ""),
        (TID, -5, ""),
        (2, 100, "other-thread"),
        (2, 900, ""),
        (3, 100, ""),
        (7, 100, ""),
    ]
    tids = np.array([c[0] for c in cases])
    ts = np.array([c[1] * 1000 for c in cases], dtype=np.int64)
    got = _contexts(tr, tids, ts)
    assert got == [c[2] for c in cases]
    assert got == _contexts_reference(tr, tids, ts)
