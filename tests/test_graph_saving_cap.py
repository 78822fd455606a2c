"""A launch-bound step valued as CUDA graphs claims no more than the GPU's idle time: a graph
changes when the GPU work starts, never how long it runs (heuristics/gpu_idle.py,
advisor.replay.whatif.Saving.at_most)."""

from __future__ import annotations

import pytest

from advisor.replay.whatif import Saving


def test_at_most_caps_every_figure() -> None:
    s = Saving(10.0, 8.0, 12.0, (9.0, 11.0), 50.0, 40.0, steps=2, steps_with=2)
    c = s.at_most(9.5)
    assert (c.ms, c.low_ms, c.high_ms) == (9.5, 8.0, 9.5)
    assert c.per_step_ms == (9.0, 9.5) and c.replayed_ms == 40.5
    assert s.at_most(20.0) is s  # nothing over the cap: unchanged


@pytest.mark.shared
def test_ddp_step_in_graphs_claims_at_most_its_idle_time() -> None:
    # hta/nccl_parser_config: a launch-bound DDP step (GPU idle 170 ms of 222 ms); replayed as
    # graphs the all-reduces come to overlap compute and the step replays to 40 ms, 182 ms
    # shorter: more than the idle time, which is all a graph can remove
    from advisor.analysis.pipeline import Options, analyze_trace
    from advisor.trace import load_trace
    from tests.conftest import shared_trace

    t = load_trace(shared_trace("hta/nccl_parser_config/nccl_data.json.gz"))
    rep = analyze_trace(t, None, Options(only=frozenset({"gpu-idle"})))
    (f,) = rep.findings
    busy = rep.run.gpu_busy_pct
    assert busy is not None
    idle_ms = (1 - busy / 100) * rep.run.step_ms_median
    assert f.est_savings_ms <= idle_ms * 1.02
    assert f.est_savings_ms > 0.9 * idle_ms
    assert any("Capped at the GPU's idle time" in a for a in f.assumptions)
