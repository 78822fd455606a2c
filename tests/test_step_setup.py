"""Set-up and the profiler's own frames kept out of a step that is not an iteration
(advisor.derive.setup through advisor.derive.steps): built traces whose set-up is known by
construction, and the shared traces that start at the top of a script."""

from __future__ import annotations

import pytest

from advisor.analysis.pipeline import Options, analyze_trace
from advisor.derive.onetime import one_time_events
from advisor.derive.steps import steady_steps, steady_trace
from advisor.trace import load_trace
from tests.conftest import shared_trace
from tests.detector_helpers import finding
from tests.tracebuilder import TraceBuilder

H100 = "NVIDIA H100 80GB HBM3"
PROFILER = "torch/profiler/profiler.py"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"


def small_script() -> TraceBuilder:
    """Shape 4: a small script recorded from its top: ``torch.zeros(device="cuda")`` creates
    the context in a 2.17 s ``cudaStreamIsCapturing`` (the process's second CUDA call), the
    first matmul sets up cuBLAS (a 0.5 s ``cudaFree``), the first ``cudaMalloc`` takes 3 ms;
    then 3.2 ms of work: 160 launches of 4 us kernels, one per 20 us."""
    b = TraceBuilder(cc=(9, 0), gpu_name=H100)
    b.runtime("cudaGetDeviceCount", 0, 500)
    z = b.op("aten::zeros", 1_000, 2_175_000)
    b.runtime("cudaStreamIsCapturing", 1_100, 2_170_000, op=z)
    b.runtime("cudaMalloc", 2_171_200, 3_000, op=z)
    mm = b.op("aten::mm", 2_176_100, 500_500)
    b.runtime("cudaFree", 2_176_200, 500_000, op=mm)
    b.launch(mm, "cudaLaunchKernel", 2_676_300, 5, kernel="gemm", gpu_dur=4)
    t0 = 2_676_700.0
    for i in range(160):
        op = b.op("aten::add", t0 + i * 20, 12)
        b.launch(op, "cudaLaunchKernel", t0 + i * 20 + 2, 6, kernel="add_kernel", gpu_dur=4)
    return b


def test_set_up_of_a_one_step_trace_is_left_out() -> None:
    t = small_script().load()
    ev = one_time_events(t)
    # the context is created by whichever call needs it first, whatever its name
    ctx = ev[ev["kind"] == "context"]
    assert "cudaStreamIsCapturing" in set(ctx["name"])
    ss = steady_steps(t)
    assert ss.synthetic and ss.source == "micro-benchmark: 160 calls of aten::add"
    # from the end of cuBLAS's set-up: the first matmul's launch and the loop, not 2,680 ms
    assert ss.median_ms() == pytest.approx(3.7, abs=0.01)
    (setup,) = ss.excluded
    assert setup.reason.startswith("set-up before the step: CUDA context")
    rep = analyze_trace(t, None, Options())
    assert rep.run.step_ms_median == pytest.approx(3.7, abs=0.01)
    assert rep.run.gpu_busy_pct is not None and rep.run.gpu_busy_pct > 15
    f = finding(rep, "one-time-init")
    assert f is not None and "excluded from the per-step figures" in f.summary
    assert finding(rep, "tiny-kernels") is not None  # 4 us kernels are the step's work now


def profiled_benchmark() -> TraceBuilder:
    """Shape 5: a micro-benchmark whose window opens inside the profiler's own start-up
    (``__enter__`` -> ``start`` -> ``start_trace``: 6.41 ms), then ten memory-bound GEMMs
    (M = N = 16, K = 65536, bf16: 40 us each on the GPU, 0.4 ms), a synchronize and the
    profiler's stop."""
    b = TraceBuilder(cc=(9, 0), gpu_name=H100)
    enter = b.frame(PROFILER, 695, "__enter__", 0, 6_410)
    start = b.frame(PROFILER, 712, "start", 5, 6_400, parent=enter)
    b.frame(PROFILER, 161, "start_trace", 10, 6_390, parent=start)
    t0 = 6_420.0
    for i in range(10):
        ts = t0 + i * 10
        op = b.op("aten::mm", ts, 8, dims=[[16, 65536], [65536, 16]], types=["c10::BFloat16"] * 2)
        b.launch(
            op, "cudaLaunchKernel", ts + 2, 4, kernel=GEMM, gpu_ts=t0 + 20 + i * 40, gpu_dur=40
        )
    b.runtime("cudaDeviceSynchronize", t0 + 110, 320)
    b.frame(PROFILER, 698, "__exit__", t0 + 440, 300)
    return b


def test_the_profilers_start_up_is_not_the_step() -> None:
    t = profiled_benchmark().load()
    ss = steady_steps(t)
    assert ss.source == "micro-benchmark: 10 calls of aten::mm"
    # the step is the GEMMs' work: from the end of the profiler's start-up to the sync's end
    assert ss.median_ms() == pytest.approx(0.45, abs=0.01)
    head, tail = ss.excluded
    assert "torch.profiler __enter__ 6.4 ms" in head.reason  # named: the cause of that time
    assert "torch.profiler __exit__" in tail.reason
    rep = analyze_trace(t, None, Options())
    assert rep.run.gpu_busy_pct is not None and rep.run.gpu_busy_pct > 85
    assert rep.run.bound is not None and rep.run.bound.by == "gpu"
    assert finding(rep, "kernel-efficiency") is not None  # the planted GEMM problem
    st = steady_trace(t)
    assert (st.kernels["step"] >= 0).all()


def test_set_up_too_small_to_matter_stays_and_the_profilers_stop_goes() -> None:
    # a 0.05 ms context call before 3 ms of work: under a tenth of what is left, kept; the
    # profiler's 2 ms stop after the work is not the program's
    b = TraceBuilder(cc=(9, 0), gpu_name=H100)
    b.runtime("cudaGetDeviceCount", 0, 50)
    for i in range(150):
        op = b.op("aten::add", 100 + i * 20, 12)
        b.launch(op, "cudaLaunchKernel", 102 + i * 20, 6, kernel="add_kernel", gpu_dur=4)
    b.runtime("cudaMalloc", 1_500, 400)  # a cudaMalloc inside the loop is no set-up
    stop = b.frame(PROFILER, 698, "__exit__", 3_100, 2_000)
    b.frame(PROFILER, 195, "stop_trace", 3_110, 1_980, parent=stop)
    t = b.load()
    ss = steady_steps(t)
    (tail,) = ss.excluded
    assert (
        tail.reason == "after the program's work: the profiler's own torch.profiler __exit__ 2.0 ms"
    )
    assert ss.median_ms() == pytest.approx(3.1, abs=0.01)
    # the cudaMalloc stays in the step, and one-time-init says so
    f = finding(analyze_trace(t, None, Options()), "one-time-init")
    assert f is not None
    assert "inside its single step and the per-step figures include it" in f.summary


def test_cudagraph_mwe_context_call_is_one_time_and_out_of_the_step() -> None:
    t = load_trace(shared_trace("gpupuzzlers/launch_queue/cudagraph_mwe.json.gz"))
    ev = one_time_events(t)
    first = ev[ev["name"] == "cudaStreamIsCapturing"]
    assert len(first) == 1 and first["kind"].iloc[0] == "context"
    assert int(first["dur_ns"].iloc[0]) / 1e6 == pytest.approx(2172.5, abs=0.5)
    ss = steady_steps(t)
    assert ss.steps["ts_ns"].iloc[0] > int(first["end_ns"].iloc[0])
    # the set-up (context, cuBLAS's cudaFree, first cudaMallocs) is left out: the graph capture
    # and its 20 replays remain
    assert ss.median_ms() == pytest.approx(55.4, abs=1.0)
    rep = analyze_trace(t, None, Options())
    f = finding(rep, "one-time-init")
    assert f is not None and "captured 3.5 s of one-time work" in f.summary


@pytest.mark.parametrize(
    ("rel", "step_ms"),
    [
        ("gpupuzzlers/launch_queue/n1600_cuda_queue_puzzlers.trace.json.gz", 5.70),
        ("switchtransformers/moe_a100_trace.json.gz", 71.7),
    ],
)
def test_shared_traces_without_set_up_in_the_step(rel: str, step_ms: float) -> None:
    t = load_trace(shared_trace(rel))
    ss = steady_steps(t)
    assert ss.excluded[0].reason.startswith("set-up before the step")
    assert ss.median_ms() == pytest.approx(step_ms, abs=0.1)
    ev = one_time_events(t)
    inside = (ev["ts_ns"] >= int(ss.steps["ts_ns"].iloc[0])) & (
        ev["ts_ns"] < int(ss.steps["end_ns"].iloc[0])
    )
    # no context creation, module loading or compilation inside the step (the allocations
    # each layer makes recur: not set-up)
    assert not ev.loc[inside, "kind"].isin(["context", "module-load", "compile"]).any()
