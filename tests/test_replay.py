"""The step replay on built traces whose answer is known by construction (issue 14).

Each builder makes 3 ProfilerSteps of 1 ms (times in us) with one shape of bottleneck; the
tests check what bounds the step (``run.bound``), what each fix saves when replayed, and that
the unchanged replay gives back the measured steps.
"""

from __future__ import annotations

import numpy as np
import pytest

from advisor.derive.steps import steady_trace
from advisor.replay.bound import step_bound
from advisor.replay.engine import Mods, replay
from advisor.replay.fixes import (
    Combined,
    DropSyncs,
    GraphLaunch,
    HideComm,
    ScaleGpu,
    ShrinkHost,
)
from advisor.replay.model import graph
from advisor.replay.whatif import whatif
from advisor.trace.model import Trace
from tests.mr_helpers import ALLREDUCE
from tests.tracebuilder import TID, TraceBuilder

STEPS = 3


def _load(b: TraceBuilder) -> Trace:
    return steady_trace(b.load())


def host_bound() -> TraceBuilder:
    """800 us of Python per step, then one 100 us kernel nobody waits for."""
    b = TraceBuilder()
    for s in range(STEPS):
        t = s * 1000.0
        b.step(s + 1, t, 1000)
        b.annotation("python_work", t + 10, 800)
        o = b.op("aten::mm", t + 850, 20)
        b.launch(o, "cudaLaunchKernel", t + 855, 5, kernel="gemm", gpu_ts=t + 870, gpu_dur=100)
    return b


def gpu_bound() -> TraceBuilder:
    """A 900 us kernel each step; the host waits for it (`torch.cuda.synchronize()`)."""
    b = TraceBuilder()
    for s in range(STEPS):
        t = s * 1000.0
        b.step(s + 1, t, 1000)
        o = b.op("aten::mm", t + 10, 20)
        b.launch(o, "cudaLaunchKernel", t + 15, 5, kernel="gemm", gpu_ts=t + 30, gpu_dur=900)
        b.runtime("cudaDeviceSynchronize", t + 40, 895)  # returns at t + 935
    return b


def sync_bound() -> TraceBuilder:
    """A 400 us kernel, `.item()` waits for it (until t + 425), then 300 us of host work and a
    50 us kernel: the GPU idles while the host waits, then while it works."""
    b = TraceBuilder()
    for s in range(STEPS):
        t = s * 1000.0
        b.step(s + 1, t, 1000)
        o = b.op("aten::mm", t + 10, 10)
        b.launch(o, "cudaLaunchKernel", t + 12, 5, kernel="gemm", gpu_ts=t + 20, gpu_dur=400)
        b.runtime("cudaStreamSynchronize", t + 25, 400)
        b.annotation("python_work", t + 430, 300)
        o2 = b.op("aten::add", t + 740, 10)
        b.launch(o2, "cudaLaunchKernel", t + 742, 5, kernel="add", gpu_ts=t + 750, gpu_dur=50)
    return b


def input_bound() -> TraceBuilder:
    """600 us in DataLoader.__next__, then a 200 us kernel the host waits for."""
    b = TraceBuilder()
    for s in range(STEPS):
        t = s * 1000.0
        b.step(s + 1, t, 1000)
        b.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t + 5, 600)
        o = b.op("aten::mm", t + 650, 10)
        b.launch(o, "cudaLaunchKernel", t + 655, 5, kernel="gemm", gpu_ts=t + 670, gpu_dur=200)
        b.runtime("cudaDeviceSynchronize", t + 665, 210)
    return b


def launch_bound() -> TraceBuilder:
    """60 launches 15 us apart (8 us calls) of 3 us kernels, then nothing."""
    b = TraceBuilder()
    for s in range(STEPS):
        t = s * 1000.0
        b.step(s + 1, t, 1000)
        for i in range(60):
            lt = t + 10 + i * 15
            o = b.op("aten::add_", lt - 1, 10)
            b.launch(o, "cudaLaunchKernel", lt, 8, kernel="add", gpu_ts=lt + 10, gpu_dur=3)
    return b


def comm_bound(late_peer: bool) -> TraceBuilder:
    """Steps of 520 us (820 with the late peer): a 200 us kernel, then a 270 us all-reduce right
    after it, which the host waits for. With a late peer, step 2's all-reduce lasts 570 us: 300
    us of it waiting for the peer (the transfer is the shortest instance, 270 us)."""
    b = TraceBuilder(rank=0, world_size=2)
    t = 0.0
    for s in range(STEPS):
        if s:
            t += 820 if (late_peer and s == 2) else 520
        b.step(s + 1, t, 820 if (late_peer and s == 1) else 520)
        o = b.op("aten::mm", t + 10, 10)
        b.launch(o, "cudaLaunchKernel", t + 12, 5, kernel="gemm", gpu_ts=t + 20, gpu_dur=200)
        dur = 570 if (late_peer and s == 1) else 270
        o2 = b.op("c10d::allreduce_", t + 22, 5)
        b.launch(
            o2,
            "cudaLaunchKernel",
            t + 23,
            5,
            kernel=ALLREDUCE,
            gpu_ts=t + 230,
            gpu_dur=dur,
            stream=20,
        )
        b.runtime("cudaDeviceSynchronize", t + 30, 205 + dur)
    return b


def _median_step(tr: Trace) -> float:
    return float(np.median(tr.steps["dur_ns"])) / 1e6


@pytest.mark.parametrize(
    "build",
    [
        host_bound,
        gpu_bound,
        sync_bound,
        input_bound,
        launch_bound,
        lambda: comm_bound(False),
        lambda: comm_bound(True),
    ],
)
def test_unchanged_replay_gives_back_the_measured_steps(build) -> None:  # type: ignore[no-untyped-def]
    tr = _load(build())
    gr = graph(tr)
    r = replay(gr, Mods.of(gr))
    assert np.allclose(r.step_ns, np.diff(gr.bounds), rtol=0, atol=2_000)
    pure = replay(gr, Mods.of(gr, calibrated=False))  # the graph alone explains these steps
    assert np.allclose(pure.step_ns, np.diff(gr.bounds), rtol=0.05)


def test_host_bound_step_gains_nothing_from_faster_kernels() -> None:
    tr = _load(host_bound())
    b = step_bound(tr)
    assert b is not None and b["by"] == "host" and b["shares_pct"]["host"] > 80
    assert whatif(tr, ScaleGpu(kernels=np.arange(len(tr.kernels)), speedup=10.0)).ms == 0.0
    ann = tr.annotations[tr.annotations["name"] == "python_work"]
    s = whatif(tr, ShrinkHost(ann["ts_ns"], ann["end_ns"], keep=0.5))
    assert s.ms == pytest.approx(0.4, abs=0.01)  # half of the 800 us of Python


def test_gpu_bound_step_gains_what_the_kernels_lose() -> None:
    tr = _load(gpu_bound())
    b = step_bound(tr)
    assert b is not None and b["by"] == "gpu" and b["shares_pct"]["gpu"] > 80
    s = whatif(tr, ScaleGpu(kernels=np.arange(len(tr.kernels)), speedup=2.0, low=1.5, high=3.0))
    assert s.ms == pytest.approx(0.45, abs=0.01)  # 900 us -> 450 us
    assert s.range_ms == pytest.approx((0.3, 0.6), abs=0.01)
    assert s.assumption.startswith("Replayed:")
    # shrinking host work the GPU hides saves nothing
    ops = tr.cpu_ops
    assert whatif(tr, ShrinkHost(ops["ts_ns"], ops["end_ns"], keep=0.0)).ms < 0.02


def test_sync_bound_step_gains_the_wait_when_the_sync_goes() -> None:
    tr = _load(sync_bound())
    rows = np.flatnonzero(tr.runtime["name"].astype(str).to_numpy() == "cudaStreamSynchronize")
    s = whatif(tr, DropSyncs(rows))
    # the host no longer waits ~400 us; its 300 us of work then overlaps the kernel: the step
    # is held by the GPU (400 + 50 us) and the host (~330 us): it loses the wait
    assert s.ms == pytest.approx(0.4, abs=0.02)
    b = step_bound(tr)
    assert b is not None and b["shares_pct"]["gpu"] > 30 and b["shares_pct"]["host"] > 30


def test_input_bound_step_gains_the_loading_time() -> None:
    tr = _load(input_bound())
    b = step_bound(tr)
    assert b is not None and b["by"] == "host"
    ann = tr.annotations[tr.annotations["name"].astype(str).str.contains("DataLoader")]
    s = whatif(tr, ShrinkHost(ann["ts_ns"], ann["end_ns"], ann["tid"], keep=0.0))
    assert s.ms == pytest.approx(0.6, abs=0.01)


def test_launch_bound_step_gains_from_cuda_graphs() -> None:
    tr = _load(launch_bound())
    s = whatif(tr, GraphLaunch(np.arange(len(tr.kernels))))
    # 60 launch calls of 8 us become ~1 us each: about 7 us x 60 per step
    assert s.ms == pytest.approx(0.42, abs=0.02)
    both = whatif(tr, GraphLaunch(np.arange(len(tr.kernels)), host_keep=0.0))
    assert both.ms > s.ms  # the host time between the captured launches goes too


def test_comm_bound_without_a_late_peer_gains_the_hidden_transfer() -> None:
    tr = _load(comm_bound(False))
    b = step_bound(tr)
    assert b is not None and b["by"] == "comm" and b["shares_pct"]["peer"] == 0.0
    comm = np.flatnonzero(tr.kernels["is_comm"].to_numpy(dtype=bool))
    assert whatif(tr, HideComm(comm)).ms == pytest.approx(0.27, abs=0.01)


def test_comm_with_a_late_peer_is_waiting_which_overlap_cannot_hide() -> None:
    tr = _load(comm_bound(True))
    b = step_bound(tr)
    assert b is not None
    late = [r for r in b["per_step"] if r["step"] == 2][0]
    assert late["peer"] > 25  # 300 us of waiting for the peer on the critical path
    comm = np.flatnonzero(tr.kernels["is_comm"].to_numpy(dtype=bool))
    s = whatif(tr, HideComm(comm))
    assert s.per_step_ms[1] == pytest.approx(0.27, abs=0.01)  # the transfer only, not the wait
    gone = whatif(tr, HideComm(comm, wait_ns=np.zeros(len(comm), dtype=np.int64)))
    assert gone.per_step_ms[1] == pytest.approx(0.57, abs=0.01)


def test_combined_fixes_save_less_than_their_sum_and_never_the_step() -> None:
    tr = _load(sync_bound())
    rows = np.flatnonzero(tr.runtime["name"].astype(str).to_numpy() == "cudaStreamSynchronize")
    ann = tr.annotations[tr.annotations["name"] == "python_work"]
    a = DropSyncs(rows)
    c = ShrinkHost(ann["ts_ns"], ann["end_ns"], tids=[TID] * len(ann), keep=0.0)
    one, two = whatif(tr, a).ms, whatif(tr, c).ms
    both = whatif(tr, Combined([a, c])).ms
    assert both <= one + two + 1e-9 and both < _median_step(tr)
    assert both >= max(one, two)


def test_trace_without_steps_to_place_is_not_replayed() -> None:
    b = TraceBuilder()
    b.kernel("k", 10, 5)  # no runtime calls at all
    s = whatif(b.load(), ScaleGpu(kernels=[0], speedup=2.0))
    assert not s.replayed and s.ms == 0.0 and "Not replayed" in s.assumption


def test_report_header_and_findings_json_carry_the_bound_and_the_replayed_headline() -> None:
    from advisor.analysis.pipeline import analyze_trace
    from advisor.output.header import bound_fact
    from advisor.output.viewmodel import build_viewmodel
    from advisor.runfacts import Bound

    rep = analyze_trace(sync_bound().load(), None)
    assert rep.run.bound is not None
    assert rep.run.bound.by in ("host", "gpu")
    assert set(rep.run.bound.shares_pct) == {"host", "gpu", "comm", "copies", "peer"}
    assert rep.run.est_savings_bound_how == "replayed together"
    assert 0 < rep.run.est_savings_bound_ms <= rep.run.step_ms_median
    vm = build_viewmodel(rep, generated_at="2026-01-02 03:04 UTC")
    facts = {f["label"]: f for f in vm["header"]["facts"]}
    assert facts["Bound by"]["note"].startswith("of the critical path")
    assert "replayed together" in facts["Possible saving"]["note"]
    tile = bound_fact(
        Bound(
            by="peer",
            shares_pct={"host": 10.0, "gpu": 0.0, "comm": 20.0, "copies": 0.0, "peer": 70.0},
        )
    )
    assert tile == {
        "label": "Bound by",
        "value": "waiting for peers 70%",
        "note": "of the critical path; communication 20%, host 10%",
    }
    assert bound_fact(None) is None
