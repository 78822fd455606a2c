"""What limits the step, on the shapes of real steps (built by construction, in today's Kineto
categories and in 2021's): a host that waits in a call of any name is not the bottleneck, a GPU
fix on a GPU-bound step saves what the GPU saves down to the host's own work, a wait on work the
trace does not show is said first and is nobody's, a cost found in some steps is valued over
all of them, a read that drains a small copy goes with its sync, a per-element loop goes whole.

Times in microseconds. Each builder returns the trace and the figures it was built with.
"""

from __future__ import annotations

import numpy as np
import pytest

from advisor.analysis.pipeline import analyze_trace, run_summary
from advisor.derive.steps import steady_trace
from advisor.derive.waits import How, op_tails, waits
from advisor.replay.bound import step_bound
from advisor.replay.evidence import consistent, evidence
from advisor.replay.fixes import DropSyncs, ScaleGpu
from advisor.replay.whatif import whatif
from advisor.report import Report
from advisor.trace.model import Trace
from tests.detector_helpers import analyze
from tests.mr_helpers import ALLREDUCE
from tests.tracebuilder import TraceBuilder

LAT = 15.0  # launch latency
FORMATS = pytest.mark.parametrize("kineto_2021", [False, True], ids=["current", "2021"])
FP32 = {"dims": [[2048, 2048], [2048, 2048]], "types": ["float", "float"]}
GEMM = "ampere_sgemm_128x64_nn"


class Gpu:
    """Streams that run work in order: it starts after its launch (plus LAT), the previous work
    on its stream and ``after`` (a time it waits for)."""

    def __init__(self) -> None:
        self.free: dict[int, float] = {}

    def run(self, stream: int, launched: float, dur: float, after: float = 0.0) -> float:
        start = max(launched + LAT, self.free.get(stream, 0.0), after)
        self.free[stream] = start + dur
        return start

    def drained(self) -> float:
        return max(self.free.values(), default=0.0)


def gemm(b: TraceBuilder, gpu: Gpu, t: float, dur: float, stream: int = 7) -> float:
    """An FP32 GEMM launched at ``t``: returns its end."""
    o = b.op("aten::mm", t, 20, **FP32)
    start = gpu.run(stream, t + 5, dur)
    b.launch(o, "cudaLaunchKernel", t + 5, 5, kernel=GEMM, gpu_ts=start, gpu_dur=dur, stream=stream)
    return start + dur


def load(b: TraceBuilder, kineto_2021: bool) -> Trace:
    return steady_trace(b.load(kineto_2021))


def report(b: TraceBuilder, kineto_2021: bool) -> Report:
    return analyze_trace(b.load(kineto_2021), None)


def saving(rep: Report, fid: str) -> float:
    return max((f.est_savings_ms for f in rep.findings if f.id == fid), default=0.0)


def agrees(tr: Trace, bound: dict) -> bool:  # type: ignore[type-arg]
    return consistent(bound, evidence(tr, run_summary(tr, None).gpu_busy_pct)) is None


def host_own_ms(rep: Report) -> float:
    run = rep.run
    assert run.host_own_pct is not None and run.step_ms_mean is not None
    return run.step_ms_mean * run.host_own_pct / 100


# ---- 1. deep launch queue, the host blocked in a pageable copy (single stream)


def deep_queue_pageable_copy() -> TraceBuilder:
    """Steps of ~92 ms: a pageable host-to-device copy (2 ms of transfer, which its call
    stages: the call returns 50 us before the copy ends) queued behind the previous step's
    GEMMs, then 10 ms of Python, 60 FP32 GEMMs of 1.5 ms launched 1 ms apart, 5 ms of Python.
    The host's own work is ~75 ms; the GPU's 92 ms: the host blocks ~17 ms in the copy."""
    b, gpu, t = TraceBuilder(), Gpu(), 0.0
    for s in range(6):
        start = t
        cs = gpu.run(7, t + 10, 2000)
        ret = cs + 2000 - 50
        o = b.op("aten::copy_", t + 5, ret + 5 - (t + 5))
        b.launch(
            o,
            "cudaMemcpyAsync",
            t + 10,
            ret - (t + 10),
            memcpy=("Memcpy HtoD (Pageable -> Device)", 64 << 20),
            gpu_ts=cs,
            gpu_dur=2000,
        )
        t = ret + 10
        b.annotation("python_work", t, 10_000)
        t += 10_000
        for _ in range(60):
            gemm(b, gpu, t, 1500)
            t += 1000
        b.annotation("python_work", t, 5_000)
        t += 5_000
        b.step(s + 1, start, t - start)
    return b


@FORMATS
def test_deep_queue_host_blocked_in_a_pageable_copy_is_gpu_bound(kineto_2021: bool) -> None:
    tr = load(deep_queue_pageable_copy(), kineto_2021)
    w = waits(tr)
    names = tr.runtime["name"].astype(str).to_numpy()[w.rows]
    # a pageable copy whose transfer ran while its call staged it waits for its copy (which waits
    # for the previous step's GEMMs), whatever its call's name
    assert set(w.how[names == "cudaMemcpyAsync"]) == {How.COPY}
    b = step_bound(tr)
    assert b is not None and b["by"] == "gpu" and agrees(tr, b)
    rep = report(deep_queue_pageable_copy(), kineto_2021)
    own = host_own_ms(rep)
    assert own == pytest.approx(75, abs=3)  # the steps' host time less the ~25 ms in the copy
    # TF32: the GEMMs (90 ms) 2x faster; the step (102 ms: the GPU's, with the 10 ms it waits
    # for the first GEMM) falls to the host's (77 ms: its own work and the 2 ms copy it waits
    # for); never below the host's own work
    steady = float(tr.steps["dur_ns"].max()) / 1e6
    assert 20 <= saving(rep, "fp32-matmul") <= steady - own + 0.5


# ---- 2. several streams, the host far ahead, blocked in a call of another name


def multi_stream_host_ahead() -> TraceBuilder:
    """Steps of ~80 ms: 40 FP32 GEMMs of 2 ms on stream 7, launched 1 ms apart, and an
    all-reduce of 3 ms on stream 20 after every tenth; then ``cudaFree`` (the caching allocator
    returning memory), which waits until every stream has drained: the host runs 40 ms ahead."""
    b, gpu, t = TraceBuilder(rank=0, world_size=2), Gpu(), 0.0
    for s in range(6):
        start = t
        for i in range(40):
            end = gemm(b, gpu, t, 2000)
            if i % 10 == 9:
                o = b.op("c10d::allreduce_", t + 30, 10)
                st = gpu.run(20, t + 32, 3000, after=end)
                b.launch(
                    o,
                    "cudaLaunchKernel",
                    t + 32,
                    5,
                    kernel=ALLREDUCE,
                    gpu_ts=st,
                    gpu_dur=3000,
                    stream=20,
                )
            t += 1000
        ret = gpu.drained() + 10
        b.runtime("cudaFree", t, ret - t)
        t = ret + 100
        b.step(s + 1, start, t - start)
    return b


@FORMATS
def test_multi_stream_host_ahead_waits_in_cudafree_and_is_gpu_bound(kineto_2021: bool) -> None:
    tr = load(multi_stream_host_ahead(), kineto_2021)
    busy = run_summary(tr, None).gpu_busy_pct
    assert busy is not None and busy >= 95
    b = step_bound(tr)
    assert b is not None and b["by"] != "host" and agrees(tr, b)
    rep = report(multi_stream_host_ahead(), kineto_2021)
    assert rep.run.host_own_pct is not None and rep.run.host_own_pct < 60
    # the GEMMs 2x faster save 40 ms of GPU time; the host's own work (~40 ms) stops it there
    k = tr.kernels
    gemms = np.flatnonzero(k["name"].astype(str).to_numpy() == GEMM)
    s = whatif(tr, ScaleGpu(kernels=gemms, speedup=2.0))
    assert s.ms >= 0.5 * min(40.0, rep.run.saving_step_ms - host_own_ms(rep))


# ---- 3. the bound right, the saving halved: blocks that return as a compute kernel ends


def blocks_after_compute_kernels() -> TraceBuilder:
    """Steps of 16 chunks: 4 FP32 GEMMs of 1.6 ms on stream 7 launched 100 us apart, 4.2 ms of
    Python, then a small copy call on stream 24 that returns 20 us after the chunk's last GEMM
    ends (the legacy default stream orders its copy after it: the copy runs 40 us after the call
    returned), then 0.5 ms of Python; an all-reduce on stream 20 beside. The compute stream is
    ~87% busy; the host works ~69% of the step and blocks the rest."""
    b, gpu, t = TraceBuilder(rank=0, world_size=2), Gpu(), 0.0
    for s in range(5):
        start = t
        for c in range(16):
            for _ in range(4):
                end = gemm(b, gpu, t, 1600)
                t += 100
            if c == 8:
                o = b.op("c10d::allreduce_", t, 10)
                st = gpu.run(20, t + 2, 2000)
                b.launch(
                    o,
                    "cudaLaunchKernel",
                    t + 2,
                    5,
                    kernel=ALLREDUCE,
                    gpu_ts=st,
                    gpu_dur=2000,
                    stream=20,
                )
            b.annotation("python_work", t, 4_200)
            t += 4_200
            ret = end + 20
            cs = gpu.run(24, t + 5, 3, after=ret + 40)
            o = b.op("aten::copy_", t, ret + 2 - t)
            b.launch(
                o,
                "cudaMemcpyAsync",
                t + 1,
                ret - (t + 1),
                memcpy=("Memcpy DtoH (Device -> Pinned)", 4),
                gpu_ts=cs,
                gpu_dur=3,
            )
            t = ret + 5
            b.annotation("python_work", t, 500)
            t += 500
        b.step(s + 1, start, t - start)
    return b


@FORMATS
def test_blocks_that_return_as_a_compute_kernel_ends_are_waits(kineto_2021: bool) -> None:
    tr = load(blocks_after_compute_kernels(), kineto_2021)
    b = step_bound(tr)
    assert b is not None and b["by"] == "gpu" and agrees(tr, b)
    rep = report(blocks_after_compute_kernels(), kineto_2021)
    own = host_own_ms(rep)
    step = rep.run.saving_step_ms
    assert 0.6 * step <= own <= 0.75 * step
    # TF32 halves 102 ms of GEMMs per step: the step falls to the host's own work
    assert saving(rep, "fp32-matmul") >= 0.5 * min(51.2, step - own)


# ---- 4. a step that opens with a long wait on something the trace does not show


def long_wait_on_nothing() -> TraceBuilder:
    """Steps of ~988 ms: a synchronous copy (cudaMemcpy) that first waits for the previous
    step's GEMMs (222 ms), then 493 ms more with the GPU idle and nothing recorded to wait for,
    then its 1 ms copy; then 100 FP32 GEMMs of 4.94 ms launched 2.72 ms apart: 494 ms of kernels
    back to back, the host 222 ms ahead."""
    b, gpu, t = TraceBuilder(), Gpu(), 0.0
    for s in range(4):
        start = t
        cs = max(gpu.drained(), t + 10) + 493_000
        gpu.run(7, cs - LAT, 1000)
        o = b.op("aten::copy_", t + 5, cs + 1000 + 10 - (t + 5))
        b.launch(
            o,
            "cudaMemcpy",
            t + 10,
            cs + 1000 - (t + 10),
            memcpy=("Memcpy HtoD (Pageable -> Device)", 1 << 20),
            gpu_ts=cs,
            gpu_dur=1000,
        )
        t = cs + 1000 + 20
        for _ in range(100):
            gemm(b, gpu, t, 4940)
            t += 2720
        b.step(s + 1, start, t - start)
    return b


@FORMATS
def test_a_wait_on_nothing_in_the_trace_is_said_and_is_nobodys(kineto_2021: bool) -> None:
    rep = report(long_wait_on_nothing(), kineto_2021)
    q = rep.run.trace_quality
    assert q and q[0].kind == "untraced" and "does not show" in q[0].what
    b = rep.run.bound
    assert b is not None and b.by != "host" and b.shares_pct.get("untraced", 0) >= 30
    # the GEMMs 2x faster save 247 ms of GPU time a step, down to the host's own work (the
    # 272 ms of launches): the step falls from 988 to 493 + 1 + 272 ms, a 222 ms saving
    tr = load(long_wait_on_nothing(), kineto_2021)
    gemms = np.flatnonzero(tr.kernels["name"].astype(str).to_numpy() == GEMM)
    limit = min(247.0, 988.04 - 493 - host_own_ms(rep))
    assert limit > 200
    assert whatif(tr, ScaleGpu(kernels=gemms, speedup=2.0)).ms >= 0.95 * limit
    assert saving(rep, "fp32-matmul") >= 0.95 * limit


# ---- issue 42.3: a graph replay whose sync outlasts its recorded kernels


def graph_sync_outlasts_its_kernels() -> TraceBuilder:
    """Steps of ~23 ms: a CUDA/HIP graph launch whose 60 recorded kernels run 1.2 ms, then a
    stream synchronize that returns 20 ms after the last of them (the rest of the graph ran
    unrecorded), then 1 ms of Python."""
    b = TraceBuilder(gpu_name="AMD Instinct MI300X", cc=None)
    t = 0.0
    for s in range(4):
        b.step(s + 1, t, 23_000)
        rt = b.runtime("hipGraphLaunch", t + 100, 30)
        for i in range(60):
            b.kernel("graph_kernel", t + 150 + i * 20, 18, corr=rt["args"]["correlation"])
        b.runtime("hipStreamSynchronize", t + 140, 1_200 + 20_000)
        b.annotation("python_work", t + 21_400, 1_000)
        t += 23_000
    return b


@FORMATS
def test_a_sync_that_outlasts_its_recorded_kernels_says_the_trace_is_incomplete(
    kineto_2021: bool,
) -> None:
    rep = report(graph_sync_outlasts_its_kernels(), kineto_2021)
    q = rep.run.trace_quality
    assert q and q[0].kind == "untraced" and "graph" in q[0].what
    assert "missing GPU work" in q[0].what
    b = rep.run.bound
    assert b is not None and b.by == "untraced"  # not host-bound
    notes = [n["text"] for n in _header_notes(rep)]
    assert notes and "missing GPU work" in notes[0]  # said first in the report's header


def _header_notes(rep: Report) -> list[dict[str, str]]:
    from advisor.output.header import header

    return header(rep, "now")["notes"]  # type: ignore[return-value]


# ---- 6. stalls that hit some steps


def stalls_in_some_steps() -> TraceBuilder:
    """28 steps: each runs 176 ms of GPU work (11 GEMMs of 16 ms, launched as the host goes),
    and 13 of them first wait 210-750 ms for a batch (num_workers=0)."""
    b, gpu, t = TraceBuilder(), Gpu(), 0.0
    stall = dict(zip(range(1, 28, 2), np.linspace(210_000, 750_000, 13).tolist(), strict=False))
    for s in range(28):
        start = t
        fetch = stall.get(s, 200.0)
        b.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t, fetch)
        t += fetch + 10
        for _ in range(11):
            gemm(b, gpu, t, 16_000)
            t += 15_900
        t = max(t, gpu.drained()) + 10
        b.runtime("cudaDeviceSynchronize", t - 10 - 5, 10)
        b.step(s + 1, start, t - start)
    return b


@FORMATS
def test_stalls_in_13_of_28_steps_are_valued_as_their_mean(kineto_2021: bool) -> None:
    rep = report(stalls_in_some_steps(), kineto_2021)
    (f,) = [f for f in rep.findings if f.id == "dataloader-stall"]
    mean_stall = float(np.linspace(210, 750, 13).sum()) / 28  # 225.6 ms per step
    assert f.est_savings_ms == pytest.approx(mean_stall, rel=0.05)
    assert "in 13 of 28 steps" in f.summary
    assert rep.findings[0].id == "dataloader-stall"
    # its share is of the mean step, as its saving is a mean per step
    assert f.est_savings_pct == pytest.approx(
        100 * f.est_savings_ms / rep.run.saving_step_ms, abs=0.1
    )


# ---- 7. a read of a small asynchronous copy


def reads_of_small_copies() -> TraceBuilder:
    """Steps of 9 reads (``if tensor:``): each after 3 kernels of 300 us, a 1-byte copy into
    pinned memory (the call takes 10 us; its copy queues behind the kernels) and a stream
    synchronize that waits for it; a second read right after the first, whose copy runs at once
    and ends before its call returns; 2 ms of Python between reads."""
    b, gpu, t = TraceBuilder(), Gpu(), 0.0
    for s in range(4):
        start = t
        for _ in range(9):
            for _ in range(3):
                o = b.op("aten::add", t, 10)
                st = gpu.run(7, t + 2, 300)
                b.launch(o, "cudaLaunchKernel", t + 2, 5, kernel="add", gpu_ts=st, gpu_dur=300)
                t += 15
            for _ in range(2):
                o = b.op("aten::is_nonzero", t, 1)  # (its end is set below)
                cs = gpu.run(7, t + 2, 2)
                b.launch(
                    o,
                    "cudaMemcpyAsync",
                    t + 2,
                    10,
                    memcpy=("Memcpy DtoH (Device -> Pinned)", 1),
                    gpu_ts=cs,
                    gpu_dur=2,
                )
                ret = max(t + 14, cs + 2 + 6)
                b.runtime("cudaStreamSynchronize", t + 13, ret - (t + 13))
                o["dur"] = ret + 1 - t
                t = ret + 5
            b.annotation("python_work", t, 2_000)
            t += 2_000
        b.step(s + 1, start, t - start)
    return b


@FORMATS
def test_a_read_that_drains_a_small_copy_goes_with_its_sync(kineto_2021: bool) -> None:
    tr = load(reads_of_small_copies(), kineto_2021)
    w = waits(tr)
    names = tr.runtime["name"].astype(str).to_numpy()
    assert "cudaMemcpyAsync" not in set(names[w.rows])  # the copy calls do not wait
    syncs = np.flatnonzero(names == "cudaStreamSynchronize")
    waited = float((tr.runtime["dur_ns"].to_numpy()[syncs]).sum()) / 1e6 / len(tr.steps)
    s = whatif(
        tr, DropSyncs(np.flatnonzero(np.isin(names, ["cudaMemcpyAsync", "cudaStreamSynchronize"])))
    )
    assert s.ms >= 0.8 * waited  # ~8 ms of waiting per step
    rep = report(reads_of_small_copies(), kineto_2021)
    assert saving(rep, "sync-point") >= 0.8 * waited


# ---- 7b. the read's synchronize not recorded: the operator's tail is the wait


def read_without_a_recorded_sync() -> TraceBuilder:
    """Steps of ~9.5 ms: 30 kernels of 300 us launched in 0.9 ms, then ``.item()``: an
    ``aten::_local_scalar_dense`` whose only recorded call copies 4 bytes into pinned memory (its
    copy queues behind the kernels); the operator returns 6 us after that copy ends (the
    synchronize that waited is not in the trace); then 200 us of Python."""
    b, gpu, t = TraceBuilder(), Gpu(), 0.0
    for s in range(5):
        start = t
        for _ in range(30):
            o = b.op("aten::mm", t, 10)
            st = gpu.run(7, t + 2, 300)
            b.launch(o, "cudaLaunchKernel", t + 2, 5, kernel="gemm", gpu_ts=st, gpu_dur=300)
            t += 30
        cs = gpu.run(7, t + 2, 3)
        o = b.op("aten::_local_scalar_dense", t, cs + 3 + 6 - t)
        b.launch(
            o,
            "cudaMemcpyAsync",
            t + 2,
            10,
            memcpy=("Memcpy DtoH (Device -> Pinned)", 4),
            gpu_ts=cs,
            gpu_dur=3,
        )
        t = cs + 3 + 10
        b.annotation("python_work", t, 200)
        t += 210
        b.step(s + 1, start, t - start)
    return b


@FORMATS
def test_an_operator_whose_children_do_not_explain_its_time_waits(kineto_2021: bool) -> None:
    tr = load(read_without_a_recorded_sync(), kineto_2021)
    t = op_tails(tr)
    names = tr.cpu_ops["name"].astype(str).to_numpy()
    assert len(t.op) == len(tr.steps) and set(names[t.op]) == {"aten::_local_scalar_dense"}
    b = step_bound(tr)
    assert b is not None and b["by"] == "gpu" and agrees(tr, b)
    # twice faster kernels: the read waits 4.5 ms less (9 ms of kernels per step)
    s = whatif(tr, ScaleGpu(kernels=np.arange(len(tr.kernels)), speedup=2.0))
    assert s.ms == pytest.approx(4.5, abs=0.3)


# ---- 8. a per-element loop


def per_element_loop(kineto_2021: bool) -> TraceBuilder:
    """One step: a 4096-iteration loop of ``total += x[i].cpu()`` (select, a 4-byte copy into
    pageable memory that blocks its call, a CPU add), 44 us an iteration: 180 ms."""
    b = TraceBuilder()
    stack = "train.py(6): first_sum;train.py(30): <module>"
    extra = {"Call stack": stack} if kineto_2021 else {}
    outer = b.frame("train.py", 30, "<module>", 0, 200_000)
    body = b.frame("train.py", 6, "first_sum", 1, 199_000, parent=outer)
    b.step(1, 0, 200_000)
    t = 10.0
    gpu = Gpu()
    for _ in range(4096):
        b.op(
            "aten::select",
            t,
            3,
            dims=[[4096], [], []],
            types=["float", "Scalar", "Scalar"],
            **extra,
        )
        b.frame("train.py", 6, "first_sum", t, 1, parent=body)  # (the line, for the locator)
        to = b.op("aten::to", t + 8, 30, dims=[[]], types=["float"], **extra)
        cs = gpu.run(7, t + 10, 2)
        b.launch(
            to,
            "cudaMemcpyAsync",
            t + 10,
            cs + 2 + 5 - (t + 10),
            memcpy=("Memcpy DtoH (Device -> Pageable)", 4),
            gpu_ts=cs,
            gpu_dur=2,
        )
        b.op("aten::add_", t + 40, 2, dims=[[], []], types=["float", "float"], **extra)
        t += 44
    return b


@FORMATS
def test_a_per_element_loop_is_valued_at_its_wall_time(kineto_2021: bool) -> None:
    # alone, vectorizing saves the loop's 180 ms (less one op): its ops, the Python between
    # them, the reads' waits and their copies
    alone = analyze(per_element_loop(kineto_2021).load(kineto_2021), "python-loop")
    assert saving(alone, "python-loop") >= 0.95 * 180
    rep = report(per_element_loop(kineto_2021), kineto_2021)
    top = rep.findings[0]
    assert top.id in ("python-loop", "sync-point") and top.locations[0].line == 6
    assert rep.run.est_savings_bound_ms >= 0.95 * 180  # every row's fix together
