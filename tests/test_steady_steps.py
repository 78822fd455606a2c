"""Steady steps (advisor.derive.steps) and the one-time-init finding, on built traces whose
answer is known by construction, and on the shared real traces."""

from __future__ import annotations

import pytest

from advisor.analysis.pipeline import Options, analyze_trace
from advisor.derive.steps import steady_steps, steady_trace
from advisor.trace import load_trace
from tests.conftest import shared_trace
from tests.detector_helpers import finding
from tests.tracebuilder import TraceBuilder

DL = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _warm_loop(markers: str = "dataloader") -> TraceBuilder:
    """No ProfilerStep. Iteration 0 (0-20 ms) creates the context (cudaGetDeviceCount, 5 ms),
    grows the allocator (cudaMalloc, 3 ms) and uploads 100 MB of weights from pageable memory
    (8 ms); iterations 1-3 (1 ms each) run one 400 us kernel after a 100 us batch fetch."""
    b = TraceBuilder()
    starts = [0.0, 20_000.0, 21_000.0, 22_000.0]
    b.runtime("cudaGetDeviceCount", 10, 5000)
    b.runtime("cudaMalloc", 5100, 3000)
    up = b.op("aten::to", 8200, 8100)
    b.launch(
        up,
        "cudaMemcpy",
        8210,
        8000,
        memcpy=("Memcpy HtoD (Pageable -> Device)", 100 << 20),
        gpu_ts=8250,
        gpu_dur=7900,
    )
    conv = b.op("aten::cudnn_convolution", 16_500, 900)  # cuDNN trying an algorithm, once
    b.launch(
        conv,
        "cudaLaunchKernel",
        16_510,
        5,
        kernel="cudnn::winograd_try",
        gpu_ts=16_600,
        gpu_dur=700,
    )
    for i, t in enumerate(starts):
        if markers == "dataloader":
            b.annotation(DL, t + 1, 100)
        elif markers == "forward":
            b.annotation("model|forward", t + 1, 600 if i else 19_000)
        a = b.op("aten::mm", t + 200, 50)
        b.launch(a, "cudaLaunchKernel", t + 210, 10, kernel="k", gpu_ts=t + 300, gpu_dur=400)
        if markers == "optimizer":
            b.annotation("Optimizer.step#SGD.step", t + (19_000 if i == 0 else 750), 100)
    return b


def _analyze(b: TraceBuilder):  # noqa: ANN202
    return analyze_trace(b.load(), None, Options())


@pytest.mark.parametrize("markers", ["dataloader", "forward", "optimizer"])
def test_warm_up_iteration_is_left_out(markers: str) -> None:
    t = _warm_loop(markers).load()
    ss = steady_steps(t)
    assert len(ss.steps) == 3
    assert ss.median_ms() == pytest.approx(1.0, abs=0.15)
    warm = [e for e in ss.excluded if e.step is not None]
    assert len(warm) == 1 and "alloc" in warm[0].reason and "context" in warm[0].reason
    st = steady_trace(t)
    assert not st.meta.synthetic_steps and st.median_step_ms() == pytest.approx(ss.median_ms())
    # the upload belongs to no steady step
    assert (st.memcpy["step"] < 0).all() and (st.kernels["step"] >= 0).sum() == 3


def test_one_time_init_ranks_first_and_no_per_step_claim_from_set_up() -> None:
    rep = _analyze(_warm_loop())
    assert rep.findings[0].id == "one-time-init"
    f = rep.findings[0]
    assert f.est_savings_ms == 0 and f.severity == "info"
    assert "excluded from the per-step figures" in f.summary
    assert "CUDA context" in f.summary and "cudaMalloc" in f.summary and "upload" in f.summary
    assert rep.run.step_ms_median == pytest.approx(1.0, abs=0.15)
    assert rep.run.steady.steps_source == "DataLoader.__next__"
    (tried,) = [e for e in f.evidence if "cuDNN trying algorithms" in e.what]
    assert tried.count == 1 and tried.total_ms == pytest.approx(0.7)
    # the one-off 100 MB pageable upload is no per-step copy problem
    for other in ("pageable-memcpy", "blocking-copy"):
        assert finding(rep, other) is None
    assert all(x.est_savings_ms <= rep.run.step_ms_median for x in rep.findings)


def test_profiler_steps_without_warm_up_are_kept_as_is() -> None:
    b = TraceBuilder()
    for s in range(3):
        b.step(s + 1, s * 1000.0, 1000)
        a = b.op("aten::mm", s * 1000.0 + 10, 50)
        b.launch(
            a,
            "cudaLaunchKernel",
            s * 1000.0 + 20,
            10,
            kernel="k",
            gpu_ts=s * 1000.0 + 40,
            gpu_dur=800,
        )
    t = b.load()
    assert steady_trace(t) is t and steady_steps(t).source == "ProfilerStep"
    assert finding(analyze_trace(t, None, Options()), "one-time-init") is None


def test_no_markers_stays_one_step_and_gpu_idle_claims_nothing() -> None:
    b = TraceBuilder()
    for i in range(5):  # a tiny trace: 5 short kernels, GPU idle ~96% of its span
        a = b.op("aten::add", i * 500.0, 20)
        b.launch(
            a, "cudaLaunchKernel", i * 500.0 + 5, 10, kernel="k", gpu_ts=i * 500.0 + 30, gpu_dur=20
        )
    rep = analyze_trace(b.load(), None, Options())
    assert steady_steps(b.load()).synthetic
    f = finding(rep, "gpu-idle")
    assert f is not None and f.est_savings_ms == 0 and f.severity == "info"


def test_alexnet_one_time_init_first_and_no_claim_above_the_forward() -> None:
    p = shared_trace("hta/critical_path/alexnet")
    rep = analyze_trace(load_trace(p), None, Options())
    assert rep.findings[0].id == "one-time-init"
    # the steady step is the measured forward (79.7 ms), not the 43 s window
    step = rep.run.step_ms_median
    assert step == pytest.approx(79.68, abs=0.5)
    assert all(f.est_savings_ms <= step for f in rep.findings)
    assert "CUDA context" in rep.findings[0].summary


def test_resnet50_autograd_api_steps_from_dataloader() -> None:
    p = shared_trace("kineto/resnet50_autograd_api_num_workers_0")
    rep = analyze_trace(load_trace(p), None, Options())
    assert rep.run.steady.steps_source == "DataLoader.__next__"
    assert rep.run.steps_profiled == 5
    assert 140 < rep.run.step_ms_median < 200  # not the 5.3 s window
    assert rep.findings[0].id == "one-time-init"
    g = finding(rep, "gpu-idle")
    assert g is None or g.est_savings_ms < 0.2 * rep.run.step_ms_median


def test_compile_and_module_load_are_one_time_work() -> None:
    b = _warm_loop()
    b.annotation("_compile.compile_inner (dynamo_timed)", 17_500, 2_000)  # in iteration 0
    b.runtime("cuModuleLoadData", 19_550, 400)
    rep = _analyze(b)
    f = rep.findings[0]
    assert f.id == "one-time-init"
    assert "torch.compile compilation 2.0 ms" in f.summary
    assert "first-launch module loading 0.4 ms" in f.summary


def test_one_time_work_inside_a_trace_without_iterations_is_named_as_included() -> None:
    b = TraceBuilder()
    for i in range(3):  # a short loop with 0.3 ms of allocator growth it cannot be told from
        if i == 2:
            b.runtime("cudaMalloc", 21_700.0, 300)
        a = b.op("aten::add", 21_000 + i * 500.0, 20)
        b.launch(
            a,
            "cudaLaunchKernel",
            21_005 + i * 500.0,
            10,
            kernel="k",
            gpu_ts=21_030 + i * 500.0,
            gpu_dur=400,
        )
    rep = _analyze(b)
    f = rep.findings[0]
    assert f.id == "one-time-init" and f.confidence == "medium"
    assert "inside its single step and the per-step figures include it" in f.summary


@pytest.mark.parametrize(("n", "left_out"), [(4, 1), (2, 0)])
def test_profiler_step_with_allocator_growth_is_left_out(n: int, left_out: int) -> None:
    # ProfilerStep#1 takes 5 ms, 3 ms of it in cudaMalloc; the others take 1 ms. With two steps
    # only, both stay (the last ProfilerStep is often cut short: two are kept)
    b = TraceBuilder()
    t = 0.0
    for s in range(n):
        dur = 5000.0 if s == 0 else 1000.0
        b.step(s + 1, t, dur)
        if s == 0:
            b.runtime("cudaMalloc", t + 10, 3000)
        a = b.op("aten::mm", t + dur - 900, 50)
        b.launch(
            a, "cudaLaunchKernel", t + dur - 890, 10, kernel="k", gpu_ts=t + dur - 800, gpu_dur=600
        )
        t += dur
    rep = _analyze(b)
    assert rep.run.steps_profiled == n - left_out
    if left_out:
        assert rep.run.steady.steps_source == "ProfilerStep"
        (ex,) = rep.run.steady.steps_excluded
        assert ex.step == 1 and "alloc" in ex.reason
        assert rep.run.step_ms_median == pytest.approx(1.0)
    else:
        assert rep.run.steady is None


def test_very_long_first_call_is_context_creation_but_a_first_wait_is_not() -> None:
    from advisor.derive.onetime import one_time_events

    b = TraceBuilder()
    b.runtime("cudaGetLastError", 0, 150_000)  # 150 ms: the call that created the context
    b.runtime("cudaStreamSynchronize", 200_000, 150_000)  # a long wait, not set-up
    ev = one_time_events(b.load())
    assert ev["name"].tolist() == ["cudaGetLastError"] and ev["kind"].tolist() == ["context"]
    b2 = TraceBuilder()
    b2.runtime("cudaMemcpyAsync", 0, 150_000)  # first in a window opened mid-run: waits
    assert not len(one_time_events(b2.load()))
