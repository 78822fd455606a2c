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
from advisor.replay.model import Bind, Work, graph
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


def unlinked_kernels() -> TraceBuilder:
    """An 800 us kernel whose launch the trace did not record, which a sync waits for."""
    b = TraceBuilder()
    for s in range(STEPS):
        t = s * 1000.0
        b.step(s + 1, t, 1000)
        b.kernel("gemm", t + 20, 800)
        b.runtime("cudaDeviceSynchronize", t + 10, 815)
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
    assert np.allclose(r.step_ns, np.diff(gr.steps.bounds_ns), rtol=0, atol=2_000)
    pure = replay(gr, Mods.of(gr, calibrated=False))  # the graph alone explains these steps
    assert np.allclose(pure.step_ns, np.diff(gr.steps.bounds_ns), rtol=0.05)


def test_kernels_without_a_recorded_launch_that_a_sync_waits_for_are_the_steps_work() -> None:
    tr = _load(unlinked_kernels())
    gr = graph(tr)
    r = replay(gr, Mods.of(gr))
    assert np.allclose(r.step_ns, np.diff(gr.steps.bounds_ns), rtol=0, atol=2_000)
    assert (gr.gpu.step_key >= 0).all() and gr.host.waits[~gr.host.fixed].all()
    b = step_bound(tr)
    assert b is not None and b["by"] == "gpu" and b["shares_pct"]["gpu"] > 70
    s = whatif(tr, ScaleGpu(kernels=np.arange(len(tr.kernels)), speedup=2.0))
    assert s.ms == pytest.approx(0.4, abs=0.02)  # 800 us -> 400 us


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


# ---- the graph's edges, one builder each (advisor/replay/edges.py), on built traces


def _rt_rows(tr: Trace, name: str) -> np.ndarray:
    return np.flatnonzero(tr.runtime["name"].astype(str).to_numpy() == name)


def test_host_order_links_each_call_to_the_previous_one_with_the_host_work_between() -> None:
    tr = _load(sync_bound())
    gr = graph(tr)
    h = gr.host
    sync = gr.host_nodes(_rt_rows(tr, "cudaStreamSynchronize"))
    launch = gr.host_nodes(_rt_rows(tr, "cudaLaunchKernel"))
    first, second = launch[0::2], launch[1::2]
    # the sync follows the gemm's launch (ended at t + 17) after 8 us of host work
    assert (h.prev[sync] == first).all()
    assert (h.gap_ns[sync] == 8_000).all()
    # the add's launch follows the sync after the 300 us of Python (from t + 425 to t + 742)
    assert (h.prev[second] == sync).all() and (h.gap_ns[second] == 317_000).all()
    # a step's first call follows the previous step's last call (265 us of host work before
    # it), or, in the first replayed step, the step's start
    replayed = first[~h.fixed[first]]
    linked = replayed[h.prev[replayed] >= 0]
    assert (h.prev[linked] == sync[np.searchsorted(sync, linked) - 1] + 1).all()
    assert (h.gap_ns[linked] == 265_000).all()
    opening = replayed[h.prev[replayed] < 0]
    assert len(opening) >= 1 and (h.ts_ns[opening] - h.origin_ns[opening] == 12_000).all()
    assert (h.gap_ns[opening] == 12_000).all()


def test_handoff_links_a_thread_that_resumes_when_another_thread_finishes() -> None:
    b = TraceBuilder()
    for s in range(STEPS):
        t = s * 1000.0
        b.step(s + 1, t, 1000)
        o = b.op("aten::mm", t + 10, 20)
        b.launch(o, "cudaLaunchKernel", t + 15, 5, kernel="fwd", gpu_ts=t + 30, gpu_dur=50)
        # the backward thread resumes 20 us after the main thread's launch returned
        o2 = b.op("aten::mm", t + 40, 20, tid=TID + 1)
        rt = b.runtime("cudaLaunchKernel", t + 40, 5, op=o2, tid=TID + 1)
        b.kernel("bwd", t + 90, 50, corr=rt["args"]["correlation"])
    tr = _load(b)
    gr = graph(tr)
    h = gr.host
    bwd = np.flatnonzero((h.trace_tid == TID + 1) & ~h.fixed)
    resumed = bwd[h.handoff[bwd] >= 0]
    assert len(resumed) >= STEPS - 1
    waited_for = h.handoff[resumed]
    assert (h.trace_tid[waited_for] == TID).all()
    assert (h.handoff_ns[resumed] == 20_000).all() and (h.gap_ns[resumed] == 0).all()


def test_launch_edge_and_binding() -> None:
    tr = _load(host_bound())
    gr = graph(tr)
    g, h = gr.gpu, gr.host
    assert (g.launch >= 0).all()
    assert (h.runtime_row[g.launch] == tr.kernels["launch_idx"].to_numpy()).all()
    assert gr.launch_latency_ns == 15_000  # each kernel starts 15 us after its launch call
    assert (g.bind == Bind.LAUNCH).all() and (g.launch_ns == 15_000).all()
    assert (g.residual_ns == 0).all()


def test_stream_order_binds_kernels_queued_behind_each_other() -> None:
    b = TraceBuilder()
    for s in range(STEPS):
        t = s * 1000.0
        b.step(s + 1, t, 1000)
        for i in range(3):  # launched 10 us apart, each 200 us long: they queue
            lt = t + 10 + 10 * i
            b.launch(
                None, "cudaLaunchKernel", lt, 5, kernel="k", gpu_ts=t + 30 + 200 * i, gpu_dur=200
            )
        b.runtime("cudaDeviceSynchronize", t + 50, 640)
    tr = _load(b)
    g = graph(tr).gpu
    order = np.argsort(g.ts_ns)
    queued = order[np.arange(len(order)) % 3 != 0]
    assert (g.prev[queued] == order[np.arange(len(order)) % 3 != 2][: len(queued)]).all()
    assert (g.bind[queued] == Bind.STREAM).all() and (g.prev_ns[queued] == 0).all()
    # a step's first kernel follows the previous step's last one on the stream, but its launch
    # decided its start
    firsts = order[np.arange(len(order)) % 3 == 0]
    assert (g.bind[firsts] == Bind.LAUNCH).all()


def test_cross_stream_wait_on_an_activity_of_another_stream() -> None:
    b = TraceBuilder()
    for s in range(STEPS):
        t = s * 1000.0
        b.step(s + 1, t, 1000)
        b.launch(None, "cudaLaunchKernel", t + 10, 5, kernel="producer", gpu_ts=t + 20, gpu_dur=300)
        # launched at once on stream 20, it starts when the producer on stream 7 ends
        b.launch(
            None,
            "cudaLaunchKernel",
            t + 16,
            5,
            kernel="consumer",
            gpu_ts=t + 322,
            gpu_dur=50,
            stream=20,
        )
        b.runtime("cudaDeviceSynchronize", t + 30, 345)
    tr = _load(b)
    g = graph(tr).gpu
    names = tr.kernels["name"].astype(str).to_numpy()[g.row]
    cons, prod = np.flatnonzero(names == "consumer"), np.flatnonzero(names == "producer")
    assert (g.dep[cons] == prod).all() and (g.bind[cons] == Bind.CROSS_STREAM).all()
    assert (g.dep_ns[cons] == 2_000).all() and (g.dep[prod] == -1).all()


def test_syncs_wait_for_the_last_gpu_work_before_them() -> None:
    tr = _load(sync_bound())
    gr = graph(tr)
    h, g = gr.host, gr.gpu
    sync = gr.host_nodes(_rt_rows(tr, "cudaStreamSynchronize"))
    assert h.waits[sync].all()
    gemm = h.awaited[sync]
    assert (tr.kernels["name"].astype(str).to_numpy()[g.row[gemm]] == "gemm").all()
    assert (h.return_ns[sync] == 5_000).all()  # returned 5 us after the gemm ended
    assert (h.own_ns[sync] == 5_000).all()
    launch = gr.host_nodes(_rt_rows(tr, "cudaLaunchKernel"))
    assert not h.waits[launch].any() and (h.awaited[launch] == -1).all()


def test_device_sync_waits_for_every_stream() -> None:
    tr = _load(comm_bound(False))
    gr = graph(tr)
    h = gr.host
    sync = gr.host_nodes(_rt_rows(tr, "cudaDeviceSynchronize"))
    sync = sync[~h.fixed[sync]]
    for i in sync.tolist():
        waited = {int(h.awaited[i]), *h.awaited_more.get(i, [])}
        assert len({int(s) for s in gr.gpu.stream[list(waited)]}) == 2


def test_pageable_copy_to_the_host_blocks_until_its_copy_ends() -> None:
    b = TraceBuilder()
    for s in range(STEPS):
        t = s * 1000.0
        b.step(s + 1, t, 1000)
        b.launch(None, "cudaLaunchKernel", t + 10, 5, kernel="k", gpu_ts=t + 20, gpu_dur=500)
        b.launch(
            None,
            "cudaMemcpyAsync",
            t + 20,
            510,
            memcpy=("Memcpy DtoH (Device -> Pageable)", 4096),
            gpu_ts=t + 520,
            gpu_dur=8,
        )
    tr = _load(b)
    gr = graph(tr)
    h, g = gr.host, gr.gpu
    copy = gr.host_nodes(_rt_rows(tr, "cudaMemcpyAsync"))
    assert h.waits[copy].all()
    assert (g.source[h.awaited[copy]] == 1).all() and (g.kind[h.awaited[copy]] == Work.MEMCPY).all()
    assert (g.launch[h.awaited[copy]] == copy).all()  # it waits for its own copy


def test_a_launch_far_slower_than_the_others_waits_for_the_queue() -> None:
    b = TraceBuilder()
    for s in range(STEPS):
        t = s * 1000.0
        b.step(s + 1, t, 1000)
        b.launch(None, "cudaLaunchKernel", t + 5, 5, kernel="long", gpu_ts=t + 15, gpu_dur=600)
        for i in range(8):
            b.launch(
                None,
                "cudaLaunchKernel",
                t + 12 + 6 * i,
                4,
                kernel="k",
                gpu_ts=t + 650 + 5 * i,
                gpu_dur=5,
            )
        # the queue is full: this launch returns when the long kernel ends
        b.launch(None, "cudaLaunchKernel", t + 70, 550, kernel="k", gpu_ts=t + 700, gpu_dur=5)
    tr = _load(b)
    gr = graph(tr)
    h, g = gr.host, gr.gpu
    slow = np.flatnonzero((h.end_ns - h.ts_ns) > 500_000)
    assert len(slow) == STEPS and h.waits[slow].all()
    names = tr.kernels["name"].astype(str).to_numpy()
    assert (names[g.row[h.awaited[slow]]] == "long").all()
    assert not h.waits[(h.end_ns - h.ts_ns) < 10_000].any()


def test_replayed_window_keeps_other_steps_at_their_measured_times() -> None:
    tr = _load(host_bound())
    gr = graph(tr)
    st, h, g = gr.steps, gr.host, gr.gpu
    assert st.chosen.any() and len(st.bounds_ns) == st.chosen.size + 1
    step_of_call = np.searchsorted(st.bounds_ns, h.ts_ns, side="right") - 1
    inside = (step_of_call >= 0) & (step_of_call < st.chosen.size)
    assert (h.fixed[inside] == ~st.chosen[step_of_call[inside]]).all()
    assert (g.fixed == h.fixed[g.launch]).all()  # an activity goes with its launch
    # every boundary after the first is anchored on the main thread's last call before it
    anchored = st.anchor >= 0
    assert (h.thread[st.anchor[anchored]] == st.main_thread).all()
    assert (h.ts_ns[st.anchor[anchored]] < st.bounds_ns[anchored]).all()
    assert 0 <= st.median_step < st.chosen.size
    # each replayed step's kernel is keyed to its step
    keyed = g.step_key >= 0
    assert keyed.sum() == (~g.fixed).sum()
    assert set((g.step_key[keyed] // g.n_streams).tolist()) == set(np.flatnonzero(st.chosen))


def test_cache_is_one_object_made_on_first_use() -> None:
    tr = _load(sync_bound())
    gr = graph(tr)
    assert gr.cache.loop_lists is None and gr.cache.unchanged is None
    whatif(tr, ScaleGpu(kernels=np.arange(len(tr.kernels)), speedup=2.0, low=1.5, high=3.0))
    assert gr.cache.loop_lists is not None and gr.cache.own_work is not None
    assert not [k for k in vars(gr) if k.startswith("_replay")]


# ---- waiting in the model (issue 25): a host that waits for the GPU is not the bottleneck


def gpu_bound_with_a_draining_copy() -> TraceBuilder:
    """Steps of 20.6 ms: the host launches 60 FP32 GEMMs in 10 ms (one every 166 us), which
    the GPU runs back to back for 20 ms (333 us each); then a pageable host-to-device copy,
    whose call returns when the stream has drained and the copy is done."""
    b = TraceBuilder()
    t = 0.0
    gpu_free = 0.0
    for s in range(STEPS):
        b.step(s + 1, t, 20_600)
        for i in range(60):
            lt = t + 20 + i * 166
            o = b.op("aten::mm", lt - 2, 10, dims=[[2048, 2048], [2048, 2048]], types=["float"] * 2)
            start = max(lt + 15, gpu_free)
            b.launch(
                o,
                "cudaLaunchKernel",
                lt,
                5,
                kernel="ampere_sgemm_128x64_nn",
                gpu_ts=start,
                gpu_dur=333,
            )
            gpu_free = start + 333
        o = b.op("aten::copy_", t + 10_100, 10_400)
        b.launch(
            o,
            "cudaMemcpyAsync",
            t + 10_110,
            gpu_free + 60 - (t + 10_110),
            memcpy=("Memcpy HtoD (Pageable -> Device)", 1 << 20),
            gpu_ts=gpu_free,
            gpu_dur=50,
        )
        gpu_free += 50
        t += 20_600
    return b


def test_gpu_bound_step_with_a_draining_copy_is_gpu_bound_and_values_tf32() -> None:
    from advisor.analysis.pipeline import analyze_trace

    tr = _load(gpu_bound_with_a_draining_copy())
    b = step_bound(tr)
    assert b is not None and b["by"] == "gpu" and b["shares_pct"]["gpu"] >= 70
    rep = analyze_trace(gpu_bound_with_a_draining_copy().load(), None)
    fp32 = [f for f in rep.findings if f.id == "fp32-matmul"]
    assert fp32 and fp32[0].est_savings_ms >= 7.0  # 20 ms of GEMMs at 2x: up to 10 ms
    # the copy's call waited for the GEMMs: the host's own work is not what limits the step
    ops = tr.cpu_ops
    assert whatif(tr, ShrinkHost(ops["ts_ns"], ops["end_ns"], keep=0.0)).ms < 0.5


def opening_sync_waits_for_the_previous_step() -> TraceBuilder:
    """Steps of 10 ms: each opens with torch.cuda.synchronize(), which waits ~4 ms for the
    kernels the previous step launched; then the host launches 20 kernels of 500 us, one every
    290 us: the GPU runs them back to back into the next step."""
    b = TraceBuilder()
    b.kernel("before", 0, 4_000)  # queued before the trace's host events begin
    gpu_free = 4_000.0
    for s in range(STEPS + 1):
        t = s * 10_000.0
        b.step(s + 1, t, 10_000)
        ret = max(gpu_free + 5, t + 60)
        b.runtime("cudaDeviceSynchronize", t + 50, ret - (t + 50))
        for i in range(20):
            lt = ret + 50 + i * 290
            o = b.op("aten::mul", lt - 2, 10)
            start = max(lt + 15, gpu_free)
            b.launch(o, "cudaLaunchKernel", lt, 5, kernel="mul", gpu_ts=start, gpu_dur=500)
            gpu_free = start + 500
    return b


def test_opening_sync_waiting_for_the_previous_steps_kernels_is_booked_to_the_gpu() -> None:
    tr = _load(opening_sync_waits_for_the_previous_step())
    gr = graph(tr)
    b = step_bound(tr)
    assert b is not None and b["by"] == "gpu" and b["shares_pct"]["gpu"] >= 70
    r = replay(gr, Mods.of(gr))
    chosen = gr.steps.chosen
    # the host waits ~4 ms per step for the previous step's kernels: that wait is the GPU's,
    # so the host's own cycle is ~6 ms and the GPU's ~10 ms, the step
    assert np.median(r.carried_ns[chosen]) == pytest.approx(4e6, rel=0.1)
    assert np.median(r.gpu_cycle_ns[chosen]) == pytest.approx(1e7, rel=0.02)
    # twice faster kernels: the step becomes the host's ~6 ms; a faster host saves nothing
    s = whatif(tr, ScaleGpu(kernels=np.arange(len(tr.kernels)), speedup=2.0))
    assert s.ms == pytest.approx(4.0, abs=0.3)
    ops = tr.cpu_ops
    assert whatif(tr, ShrinkHost(ops["ts_ns"], ops["end_ns"], keep=0.0)).ms < 0.1


def full_launch_queue() -> TraceBuilder:
    """A training loop with no sync that runs ahead until the launch queue is full. Each step
    launches a 4 ms GEMM and 25 kernels of 50 us (5.25 ms of GPU work, run back to back); its
    21st launch finds the queue full and returns only when the step's GEMM ends; the step
    ends 100 us after its last launch. The previous step's small kernels delay this step's
    GEMM: the host waits ~4.9 ms per step in that launch, time the GPU decides."""
    b = TraceBuilder()
    t = 0.0
    gpu_free = 0.0
    for s in range(STEPS + 2):
        start = t
        o = b.op("aten::mm", t + 8, 10)
        gemm_ts = max(t + 25, gpu_free)
        b.launch(o, "cudaLaunchKernel", t + 10, 5, kernel="gemm", gpu_ts=gemm_ts, gpu_dur=4_000)
        gpu_free = gemm_ts + 4_000
        lt = t + 20
        for i in range(25):
            ret = lt + 3
            if i == 20:  # the queue is full: the call returns when a slot frees
                ret = gemm_ts + 4_000 + 5
            o = b.op("aten::add", lt - 1, ret - lt + 2)
            kt = max(lt + 15, gpu_free)
            b.launch(o, "cudaLaunchKernel", lt, ret - lt, kernel="add", gpu_ts=kt, gpu_dur=50)
            gpu_free = kt + 50
            lt = ret + 10
        t = lt + 100
        b.step(s + 1, start, t - start)
    return b


def test_launches_into_a_full_queue_wait_for_the_gpu_which_bounds_the_step() -> None:
    tr = _load(full_launch_queue())
    gr = graph(tr)
    # the launch latency is measured where the stream was idle (the first GEMM: 15 us), not on
    # the queued kernels, whose start minus launch is the queue (1 ms and more)
    assert gr.launch_latency_ns == 15_000
    h = gr.host
    slow = np.flatnonzero(~h.fixed & ((h.end_ns - h.ts_ns) > 1_000_000))
    assert len(slow) and h.waits[slow].all()
    names = tr.kernels["name"].astype(str).to_numpy()
    assert (names[gr.gpu.row[h.awaited[slow]]] == "gemm").all()
    b = step_bound(tr)
    assert b is not None and b["by"] == "gpu" and b["shares_pct"]["gpu"] >= 70
    assert _consistent(tr, b)
    # twice faster kernels: 5.25 -> 2.6 ms of GPU work per step; the host needs ~0.7 ms
    s = whatif(tr, ScaleGpu(kernels=np.arange(len(tr.kernels)), speedup=2.0))
    assert s.ms == pytest.approx(2.6, abs=0.3)
    ops = tr.cpu_ops
    assert whatif(tr, ShrinkHost(ops["ts_ns"], ops["end_ns"], keep=0.0)).ms < 0.1


def item_at_the_end_of_a_gpu_bound_step() -> TraceBuilder:
    """Steps of ~9.5 ms: the host launches 30 kernels of 300 us in 0.9 ms, then reads the loss
    (`.item()`: a device-to-host copy into pageable memory, which returns when the stream has
    drained and the copy is done), then works 200 us on it."""
    b = TraceBuilder()
    t = 0.0
    for s in range(STEPS + 1):
        start = t
        gpu_free = t + 40.0
        for i in range(30):
            lt = t + 10 + 30 * i
            o = b.op("aten::mm", lt - 1, 10)
            kt = max(lt + 15, gpu_free)
            b.launch(o, "cudaLaunchKernel", lt, 5, kernel="gemm", gpu_ts=kt, gpu_dur=300)
            gpu_free = kt + 300
        ct = t + 920
        o = b.op("aten::_local_scalar_dense", ct - 2, gpu_free + 20 - ct)
        b.launch(
            o,
            "cudaMemcpyAsync",
            ct,
            gpu_free + 15 - ct,
            memcpy=("Memcpy DtoH (Device -> Pageable)", 4),
            gpu_ts=gpu_free + 5,
            gpu_dur=3,
        )
        b.annotation("python_work", gpu_free + 30, 200)
        t = gpu_free + 240
        b.step(s + 1, start, t - start)
    return b


def test_item_that_drains_the_stream_books_its_wait_to_the_gpu() -> None:
    tr = _load(item_at_the_end_of_a_gpu_bound_step())
    gr = graph(tr)
    h = gr.host
    copy = gr.host_nodes(_rt_rows(tr, "cudaMemcpyAsync"))
    copy = copy[~h.fixed[copy]]
    assert len(copy) and h.waits[copy].all()
    b = step_bound(tr)
    assert b is not None and b["by"] == "gpu" and b["shares_pct"]["gpu"] >= 70
    assert _consistent(tr, b)
    # twice faster kernels: the copy waits 4.5 ms less (9 ms of GEMMs per step)
    s = whatif(tr, ScaleGpu(kernels=np.arange(len(tr.kernels)), speedup=2.0))
    assert s.ms == pytest.approx(4.5, abs=0.3)
    # the host's own work is the 0.9 ms of launches (the first kernel waits for the first
    # launch) and the 0.2 ms after the copy: that is all a faster host could save
    ops = tr.cpu_ops
    assert whatif(tr, ShrinkHost(ops["ts_ns"], ops["end_ns"], keep=0.0)).ms < 0.5


def host_bound_with_a_short_wait() -> TraceBuilder:
    """Steps of 1 ms: 700 us of Python, 10 launches of 20 us kernels, then `.item()`, which
    waits ~40 us for them: the GPU is idle most of the step and the host is the bound."""
    b = TraceBuilder()
    for s in range(STEPS + 1):
        t = s * 1000.0
        b.step(s + 1, t, 1000)
        b.annotation("python_work", t + 10, 700)
        gpu_free = 0.0
        for i in range(10):
            lt = t + 720 + 12 * i
            o = b.op("aten::add", lt - 1, 8)
            kt = max(lt + 10, gpu_free)
            b.launch(o, "cudaLaunchKernel", lt, 5, kernel="add", gpu_ts=kt, gpu_dur=20)
            gpu_free = kt + 20
        ct = t + 845
        b.launch(
            None,
            "cudaMemcpyAsync",
            ct,
            gpu_free + 12 - ct,
            memcpy=("Memcpy DtoH (Device -> Pageable)", 4),
            gpu_ts=gpu_free + 2,
            gpu_dur=3,
        )
    return b


def test_host_bound_step_with_a_short_wait_stays_host_bound() -> None:
    tr = _load(host_bound_with_a_short_wait())
    b = step_bound(tr)
    assert b is not None and b["by"] == "host" and b["shares_pct"]["host"] >= 75
    assert _consistent(tr, b)
    s = whatif(tr, ScaleGpu(kernels=np.arange(len(tr.kernels)), speedup=2.0))
    assert s.ms < 0.15  # at most the ~100 us the copy waits after the last launch, halved
    ann = tr.annotations[tr.annotations["name"] == "python_work"]
    s = whatif(tr, ShrinkHost(ann["ts_ns"], ann["end_ns"], keep=0.5))
    assert s.ms == pytest.approx(0.35, abs=0.01)  # half of the 700 us of Python


def _consistent(tr: Trace, bound: dict) -> bool:  # type: ignore[type-arg]
    from advisor.analysis.pipeline import run_summary
    from advisor.replay.bound import consistent, evidence

    busy = run_summary(tr, None).gpu_busy_pct
    return consistent(bound, evidence(tr, busy)) is None


def test_a_gap_before_already_launched_work_is_the_gpus_time() -> None:
    # one step of 1000 us: two kernels launched at 10 and 20 us; the first runs 100-300, the
    # second 600-900 on the same stream: busy 50%, occupied from 10 us + latency to 900 us
    from advisor.replay.bound import gpu_occupied_pct

    b = TraceBuilder()
    b.step(1, 0, 1000)
    for t, (g0, d) in ((10, (100, 200)), (20, (600, 300))):
        op = b.op("aten::mm", t, 5)
        b.launch(op, "cudaLaunchKernel", t + 1, 2, kernel="gemm", gpu_ts=g0, gpu_dur=d)
    b.runtime("cudaDeviceSynchronize", 30, 880)
    tr = steady_trace(b.load())
    occ = gpu_occupied_pct(tr)
    assert occ is not None and 80.0 <= occ <= 90.0  # from ~100 us (launch + latency) to 900
    bound = step_bound(tr)
    assert bound is not None and _consistent(tr, bound)
