"""host-overhead: operators costing the host far more than their typical time."""

from __future__ import annotations

import pytest

from advisor.analysis.pipeline import Options, analyze_trace
from advisor.trace import load_trace
from tests.conftest import shared_trace
from tests.detector_helpers import analyze, found, one, skip_reason
from tests.tracebuilder import TraceBuilder

ID = "host-overhead"


def _trace(
    scale: float = 40.0,
    n: int = 30,
    gpu: bool = True,
    launch_us: float = 30.0,
    memory: bool = False,
) -> TraceBuilder:
    """Two 8 ms steps of ``n`` blocks: view + as_strided + empty (``scale`` x their typical
    0.5/0.56/3.4 us), then an aten::add launching a 5 us kernel."""
    b = TraceBuilder(cc=(8, 0) if gpu else None)
    for s in range(2):
        t0 = s * 8_000.0
        b.step(s + 1, t0, 8_000)
        b.frame("model.py", 12, "forward", t0 + 1, 7_990)
        t = t0 + 10
        for _ in range(n):
            for name, typ in (
                ("aten::view", 0.5),
                ("aten::as_strided", 0.56),
                ("aten::empty", 3.4),
            ):
                b.op(name, t, typ * scale)
                t += typ * scale + 1
            a = b.op("aten::add", t, launch_us)
            if gpu:
                b.launch(
                    a,
                    "cudaLaunchKernel",
                    t + launch_us - 6,
                    5,
                    kernel="add_kernel",
                    gpu_ts=t + launch_us,
                    gpu_dur=5,
                )
            if memory:
                b.memory(t + 1, 4096, 1 << 20, 1 << 22)
            t += launch_us + 1
    return b


def test_slow_operators_are_reported_against_typical_figures() -> None:
    f = one(analyze(_trace().load(), ID), ID)
    assert "Operators cost the host 40x their typical time" in f.summary
    assert "empty 136.0 us vs 3.4" in f.summary
    view = [e for e in f.evidence if e.what.startswith("aten::view")][0]
    assert view.count == 60 and "typical 0.51 us" in view.what
    # per step: 30 x (178.4 + 30) us of aten host time; the replay removes 0.5 x (1 - 1/40) of
    # it from a host-bound step (range: a quarter of the excess to all of it)
    aten_ms = 30 * (40 * (0.5 + 0.56 + 3.4) + 30) / 1000
    assert f.est_savings_ms == pytest.approx(0.5 * (1 - 1 / 40) * aten_ms, rel=0.02)
    lo, hi = f.est_savings_range_ms or (0, 0)
    assert lo == pytest.approx(0.25 * (1 - 1 / 40) * aten_ms, rel=0.02)
    assert hi == pytest.approx((1 - 1 / 40) * aten_ms, rel=0.02)
    assert "framework overhead" in f.summary
    assert f.locations and f.locations[0].file == "model.py"
    assert "torch.compile" in f.snippet and "numactl" in f.snippet


def test_gpu_idle_leaves_the_host_overhead_share_out() -> None:
    # valued by the launch-overhead rule (the step not read as launch-bound)
    over = {"gpu_idle.launch_bound_pct": 100.0}
    rep = analyze_trace(
        _trace().load(), None, Options(only=frozenset({ID, "gpu-idle"}), overrides=over)
    )
    gi = one(rep, "gpu-idle")
    assert "see host-overhead" in gi.summary
    assert any("host-overhead's claim" in a for a in gi.assumptions)


def test_on_a_launch_bound_step_host_overhead_is_part_of_the_whole_step_graph() -> None:
    # the GPU idles 98% of the step waiting for launches: one row, the whole step in CUDA
    # graphs, with host-overhead's share of that time listed under it
    rep = analyze_trace(_trace().load(), None, Options(only=frozenset({ID, "gpu-idle"})))
    gi = one(rep, "gpu-idle")
    assert not found(rep, ID)
    assert [r.id for r in gi.related] == [ID]
    assert "Replayed as CUDA graphs" in gi.summary
    assert "see host-overhead" in gi.recommendation


def test_typical_cost_is_not_reported() -> None:
    assert not found(analyze(_trace(scale=1.0).load(), ID), ID)
    assert not found(analyze(_trace(scale=7.0).load(), ID), ID)  # old profilers: 6-8x
    assert not found(analyze(_trace(n=9).load(), ID), ID)  # too few calls to compare


def test_causes_from_run_json_and_memory_events() -> None:
    run = {"backends": {"detect_anomaly": True}, "host": {"cpu_count": 2}}
    f = one(analyze(_trace(memory=True).load(), ID, run), ID)
    assert "anomaly detection is on" in f.summary and "profile_memory" in f.summary
    assert "only 2 CPU core(s)" in f.summary
    assert f.recommendation.startswith("Turn off what run.json shows first.")


def test_missing_data() -> None:
    rep = analyze(_trace(gpu=False).load(), ID)
    assert not found(rep, ID) and skip_reason(rep, ID)
    b = TraceBuilder()
    b.step(1, 0, 100)
    b.launch(None, "cudaLaunchKernel", 10, 2, kernel="k", gpu_dur=5)
    assert "CPU operator" in (skip_reason(analyze(b.load(), ID), ID) or "")


NCCL = "hta/nccl_parser_config/nccl_data.json.gz"
QUIET = [
    "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",  # old profiler, 7.5x
    "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "hta/df_index_resolver/df_index_resolver.json.gz",
]


@pytest.mark.shared
def test_nccl_data_operators_cost_25x() -> None:
    # its own row where the whole-step graph (gpu-idle's, which holds it) is not reported
    rep = analyze_trace(load_trace(shared_trace(NCCL)), None, Options(skip=frozenset({"gpu-idle"})))
    f = one(rep, ID)
    rows = [e.what.split(": ") for e in f.evidence if e.what.startswith("aten::")]
    mean = {name: float(rest.split(" us")[0]) for name, rest in rows}
    # the figures: view 24 us, as_strided 25.5, empty 33 (V100 trace: 0.6, 0.3, 4.6)
    assert mean["aten::view"] == pytest.approx(24, rel=0.1)
    assert mean["aten::as_strided"] == pytest.approx(25.5, rel=0.1)
    assert mean["aten::empty"] == pytest.approx(33, rel=0.1)
    assert "27x their typical time" in f.summary
    assert "(68% of the step) in framework overhead" in f.summary
    # replayed with 48% of the aten host time gone (half of the 1 - 1/27 excess), on both
    # threads: the main thread resumes 5 ms after the backward thread's last launch (after
    # ~107 ms idle), a hand-off, so the backward thread's savings reach the step too (79.3 ms
    # alone; 77.7 ms while its 953 small asynchronous copies, whose copies happened to end
    # before their calls returned, were read as waits); the optimizer's operators are
    # optimizer-host-time's, so the row counts the rest
    assert f.est_savings_ms == pytest.approx(71.8, rel=0.1)
    assert any("optimizer-host-time" in a and "alone: 79.29" in a for a in f.assumptions)
    # SGD (foreach) holds the host 14.8 ms per step there: slow because every operator is
    opt = one(rep, "optimizer-host-time")
    assert opt.recommendation.startswith("Every operator is slow on this host")
    # with gpu-idle: the GPU idles 76% of the step waiting for launches, and the whole step in
    # CUDA graphs holds the operators' host time: one row, host-overhead listed under it
    rep = analyze_trace(load_trace(shared_trace(NCCL)), None, Options())
    gi = one(rep, "gpu-idle")
    assert ID in [r.id for r in gi.related] and not found(rep, ID)
    assert "see host-overhead" in gi.recommendation


@pytest.mark.shared
@pytest.mark.parametrize("rel", QUIET)
def test_silent_on_healthy_and_old_profiler_traces(rel: str) -> None:
    rep = analyze_trace(load_trace(shared_trace(rel)), None, Options(only=frozenset({ID})))
    assert not found(rep, ID)
