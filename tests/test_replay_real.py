"""The replay on the shared real traces: issue 14's Done-when figures (skipped without them).

The dataloader-stall figures against the measured num_workers=4 twin are in
test_reference_figures_real.py, single-tensor-optimizer's against its replay in
test_optimizer_and_python_checks_real.py.
"""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest

from advisor.analysis.detection import all_detectors, run_detectors
from advisor.analysis.pipeline import analyze_path, run_summary
from advisor.derive.locate import Locator
from advisor.derive.steps import steady_trace
from advisor.detect.registry import Context
from advisor.detect.thresholds import Thresholds
from advisor.replay.bound import consistent, evidence, step_bound
from advisor.replay.engine import Mods, replay
from advisor.replay.model import graph
from advisor.report import Report
from advisor.trace import load_trace
from tests.conftest import SHARED, shared_trace

NW4 = [
    "kineto/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz",
    "kineto/resnet50_num_workers_4/worker0.1623213129365.pt.trace.json.gz",
]
DF = "hta/df_index_resolver/df_index_resolver.json.gz"
ALEXNET = "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"
NS = "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
QWEN = [
    "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    "tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
]
XDIT = [
    "tracelens/xdit/flux_aiter_profile_trace_rank_0.json.gz",
    "tracelens/xdit/flux_aiter_sage_profile_trace_rank_0.json.gz",
]
COMPLETE = [
    *NW4,
    DF,
    "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    "hta/trace_diff/control/control.json.gz",
    NS,
]


@functools.cache
def _report(rel: str) -> Report:
    return analyze_path(shared_trace(rel))[1]


def _saving(rep: Report, fid: str) -> float:
    return max((f.est_savings_ms for f in rep.findings if f.id == fid), default=0.0)


@pytest.mark.parametrize("rel", NW4)
def test_fp32_matmul_on_host_bound_resnet50_is_small_and_not_first(rel: str) -> None:
    rep = _report(rel)
    # a GPU fix saves at most down to the host's own work (90-93% of these steps: the host waits
    # 6-7 ms per step in the input copy for the previous step's kernels)
    run = rep.run
    assert run.host_own_pct is not None and run.step_ms_mean is not None
    assert _saving(rep, "fp32-matmul") <= run.step_ms_mean * (1 - run.host_own_pct / 100)
    ranked = [f for f in rep.findings if f.id != "one-time-init"]
    assert ranked and ranked[0].id != "fp32-matmul"
    # host-bound, or balanced: the GPU is 83-86% busy in the middle steps of the second trace
    # and its cycle there is 0.5 ms longer than the host's (GPU 51%, host 47%)
    assert rep.run.bound.shares_pct["host"] >= 45


def test_df_index_resolver_is_host_bound_and_claims_no_gpu_side_savings() -> None:
    rep = _report(DF)
    # HTA's critical path calls this step 100% CPU-bound; the host waits 0.6 ms per step
    assert rep.run.bound.by == "host" and rep.run.bound.shares_pct["host"] > 90
    assert _saving(rep, "comm-overlap") <= 2.0
    assert _saving(rep, "fp32-matmul") <= 2.0
    assert rep.run.est_savings_bound_how == "replayed together"
    assert rep.run.est_savings_bound_ms <= rep.run.step_ms_median


def test_gpu_bound_trace_is_called_gpu_bound() -> None:
    rep = _report(NS)  # HTA: 96.8% of the span computing
    assert rep.run.bound.by == "gpu"
    # its steps are each decided by GPU work carried from the step before, which one step
    # replayed alone lacks: the range ends are replayed in full and contain the estimate
    (f,) = [f for f in rep.findings if f.id == "fp32-matmul"]
    lo, hi = f.est_savings_range_ms or (0.0, 0.0)
    assert lo < f.est_savings_ms < hi and lo == pytest.approx(13.6, abs=0.5)


def test_alexnet_one_time_init_first_and_no_claim_above_the_forward() -> None:
    rep = _report(ALEXNET)
    assert rep.findings[0].id == "one-time-init"
    forward_ms = rep.run.step_ms_median  # the steps are the forward ranges
    assert all(f.est_savings_ms <= forward_ms for f in rep.findings)
    assert rep.run.est_savings_bound_ms <= forward_ms


@pytest.mark.parametrize("rel", COMPLETE)
def test_replay_of_the_graph_alone_matches_the_measured_steps(rel: str) -> None:
    tr = steady_trace(load_trace(shared_trace(rel)))
    gr = graph(tr)
    meas = np.diff(gr.steps.bounds_ns)[gr.steps.chosen]
    pure = replay(gr, Mods.of(gr, calibrated=False)).step_ns[gr.steps.chosen]
    assert abs(float(np.median(pure)) / float(np.median(meas)) - 1) <= 0.05
    # with the measured delays kept, the replayed timeline gives back every step, and the steady
    # state the savings are read against (the longer of the host's and the GPU's cycle) is close
    # to it: a step whose own GPU work runs past its end (ns_resolution's first ones) is held to
    # that GPU work, and a host that opens each step waiting for the previous step's kernels
    # (resnet50_num_workers_4's input copy, 6-7 ms) books that wait to the GPU, whose cycle is
    # then the step: -1.8% on the second trace, where those waits grow from step to step
    r = replay(gr, Mods.of(gr))
    assert np.allclose(np.diff(r.bounds_ns)[gr.steps.chosen], meas, rtol=1e-3, atol=1_000)
    cal = r.step_ns[gr.steps.chosen]
    assert abs(float(np.median(cal)) / float(np.median(meas)) - 1) <= 0.05


def _shared_traces() -> list[str]:
    if not SHARED.is_dir():
        return ["(../shared/traces absent)"]
    names = (p for p in SHARED.rglob("*.json*") if p.name.endswith((".json", ".json.gz")))
    return sorted(str(p.relative_to(SHARED)) for p in names)


@pytest.mark.parametrize("rel", _shared_traces())
def test_bound_agrees_with_busy_share_and_launch_lead(rel: str) -> None:
    """run.bound against the evidence the trace shows without the critical path, by the rule
    of advisor.replay.bound.consistent (the GPU-side share never above the GPU busy share; a
    GPU busy nine tenths of the step with launches far ahead of their kernels is the bound)."""
    tr = steady_trace(load_trace(shared_trace(rel)))
    bound = step_bound(tr)
    if bound is None:
        return  # nothing to replay: no bound is stated
    busy = run_summary(tr, None).gpu_busy_pct
    assert consistent(bound, evidence(tr, busy)) is None
    # the bound is read on the replayed timeline: unchanged, it gives back every measured step
    # (the steady-state step a saving is read against may be shorter: see steptime)
    gr = graph(tr)
    chosen = gr.steps.chosen
    timeline = np.diff(replay(gr, Mods.of(gr)).bounds_ns)[chosen]
    assert np.allclose(timeline, np.diff(gr.steps.bounds_ns)[chosen], rtol=1e-3, atol=1_000)


@pytest.mark.parametrize("rel", QWEN)
def test_gpu_bound_decoding_step_is_gpu_bound_and_values_gpu_fixes(rel: str) -> None:
    # the GPU is ~91% busy and launches run 1.2-1.7 ms ahead; the step opens with a device
    # synchronize that waits ~13 ms for the previous step's kernels: that wait is the GPU's
    rep = _report(rel)
    assert rep.run.bound.by == "gpu" and rep.run.bound.shares_pct["gpu"] >= 60
    tr = steady_trace(load_trace(shared_trace(rel)))
    gr = graph(tr)
    own = gr.gpu.step_key >= 0
    ids = ("kernel-efficiency", "fusible-elementwise")
    all_detectors()  # (they declare their thresholds when imported)
    ctx = Context(None, Thresholds({}), tr.median_step_ms(), Locator(tr), trace=tr)
    drafts = [d for d in run_detectors(tr, ctx, set(ids)).drafts if d.est_savings_ms > 0]
    assert {d.id for d in drafts} == set(ids)
    for d in drafts:  # valued at half the GPU time its fix removes from the step, at least
        mods = Mods.of(gr)
        d.fix.apply(tr, gr, mods, "mid")
        removed_ms = float((Mods.of(gr).gpu_dur_ns - mods.gpu_dur_ns)[own].sum()) / 1e6
        assert d.est_savings_ms >= 0.5 * removed_ms > 0, d.id


@pytest.mark.parametrize("rel", XDIT)
def test_no_replayed_step_is_shorter_than_its_host_lead_in_and_gpu_work(rel: str) -> None:
    # diffusers' final .cpu() waits 601 ms for four compiled denoise graphs; 11.8 ms of host
    # work come before the first kernel: whatever a fix removes, the GPU work cannot start
    # before its first launch
    tr = steady_trace(load_trace(shared_trace(rel)))
    gr = graph(tr)
    k = int(np.flatnonzero(gr.steps.chosen)[0])
    lo = int(gr.steps.bounds_ns[k])
    own = np.flatnonzero(gr.gpu.step_key >= 0)
    lead_in_ms = (int(gr.gpu.ts_ns[own].min()) - lo) / 1e6
    busy_ms = float((gr.gpu.end_ns - gr.gpu.ts_ns)[own].sum()) / 1e6
    assert lead_in_ms > 10
    rep = _report(rel)
    for f in rep.findings:
        text = " ".join(a for a in f.assumptions if a.startswith("Replayed:"))
        for ms in re.findall(r"runs ([0-9.]+) ms instead", text):
            assert float(ms) >= lead_in_ms + busy_ms * 0.95, (f.id, ms)
