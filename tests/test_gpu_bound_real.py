"""GPU-bound steps on every shared real trace (skipped without them): a step whose GPU is busy
at least GPU_BUSY_PCT of the time, with launches running at least LEAD_X launch latencies ahead
of their kernels, is never called host-bound, and a fix that makes its GPU work faster is valued
at least at half of the GPU time it removes, down to the host's own work (what the host does
when it is not waiting for the device: ``run.host_own_pct``) and to how far the host runs ahead
of that work (its launch lead: kernels the host launched just in time, in a stretch of the step
the host paces, give back little when they run faster; xdit's attention chain runs 0.1 ms
behind its launches and its fix saves nothing, which the replay finds)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from advisor.analysis.detection import all_detectors, run_detectors
from advisor.analysis.pipeline import run_summary
from advisor.derive.locate import Locator
from advisor.derive.steps import steady_trace
from advisor.detect.registry import Context
from advisor.detect.thresholds import Thresholds
from advisor.replay.bound import step_bound
from advisor.replay.engine import Mods
from advisor.replay.evidence import GPU_BUSY_PCT, LEAD_X, Evidence, evidence
from advisor.replay.fixes import Combined, ScaleGpu
from advisor.replay.model import graph
from advisor.trace import load_trace
from advisor.trace.model import Trace
from tests.conftest import SHARED, shared_trace


def _shared_traces() -> list[str]:
    if not SHARED.is_dir():
        return ["(../shared/traces absent)"]
    names = (p for p in SHARED.rglob("*.json*") if p.name.endswith((".json", ".json.gz")))
    return sorted(str(p.relative_to(SHARED)) for p in names)


@functools.cache
def _trace(rel: str) -> tuple[Trace, Evidence]:
    tr = steady_trace(load_trace(shared_trace(rel)))
    return tr, evidence(tr, run_summary(tr, None).gpu_busy_pct)


def _gpu_bound(ev: Evidence) -> bool:
    lead, busy = ev.launch_lead_ms, ev.gpu_busy_pct
    ahead = lead is not None and lead > 0 and lead >= LEAD_X * max(ev.launch_latency_ms, 0.0)
    return busy is not None and busy >= GPU_BUSY_PCT and ahead


def _gpu_only(fix: object) -> bool:
    if isinstance(fix, Combined):
        return bool(fix.fixes) and all(_gpu_only(f) for f in fix.fixes)
    return isinstance(fix, ScaleGpu)


@pytest.mark.parametrize("rel", _shared_traces())
def test_a_busy_gpu_with_launches_far_ahead_is_not_host_bound(rel: str) -> None:
    tr, ev = _trace(rel)
    bound = step_bound(tr)
    if bound is None or not _gpu_bound(ev):
        return
    assert bound["by"] != "host", (ev, bound["shares_pct"])


@pytest.mark.parametrize("rel", _shared_traces())
def test_gpu_fixes_on_gpu_bound_steps_save_the_gpu_time_down_to_the_hosts_own_work(
    rel: str,
) -> None:
    tr, ev = _trace(rel)
    if not _gpu_bound(ev) or ev.host_own_pct is None:
        return
    all_detectors()  # (they declare their thresholds when imported)
    ctx = Context(None, Thresholds({}), tr.median_step_ms(), Locator(tr), trace=tr)
    drafts = [
        d
        for d in run_detectors(tr, ctx).drafts
        if d.fix is not None and _gpu_only(d.fix) and not d.latent
    ]
    gr = graph(tr)
    own = gr.gpu.step_key >= 0
    n = int(gr.steps.chosen.sum())
    step = tr.mean_step_ms()
    host_left = step * (1 - ev.host_own_pct / 100)  # what is not the host's own work
    g, h = gr.gpu, gr.host
    for d in drafts:
        mods = Mods.of(gr)
        d.fix.apply(tr, gr, mods, "mid")
        cut = (Mods.of(gr).gpu_dur_ns - mods.gpu_dur_ns) * own
        removed = float(cut.sum()) / 1e6 / max(n, 1)
        fixed = np.flatnonzero((cut > 0) & (g.launch >= 0))
        lead = g.ts_ns[fixed] - h.ts_ns[g.launch[fixed]] - gr.launch_latency_ns
        ahead = float(np.median(lead)) / 1e6 if len(fixed) else 0.0
        floor = 0.5 * min(removed, host_left, max(ahead, 0.0))
        assert d.est_savings_ms >= floor - 0.05, (d.id, d.est_savings_ms, removed, host_left, ahead)
