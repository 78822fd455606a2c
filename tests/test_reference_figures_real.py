"""Figures of dataloader-stall, fp32-matmul, sync-point and gpu-idle on real traces against
reference tools, and no detector erring on them (../shared/traces; skipped when absent).

Reference figures: torch-tb-profiler 0.4.3 (kineto/SOURCES.md) and HTA 0.5.0 (hta/REFERENCE.md).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from advisor.analysis.pipeline import analyze_path
from advisor.findings import Finding
from advisor.report import Report
from tests.conftest import SHARED, shared_trace

pytestmark = pytest.mark.shared

MINE = (
    "sync-point",
    "tiny-kernels",
    "fp32-matmul",
    "misaligned-dims",
    "gpu-idle",
    "dataloader-stall",
)
NW0 = "kineto/resnet50_num_workers_0/"
NW4 = "kineto/resnet50_num_workers_4/"
# tb-profiler's DataLoader time per step (us) and share of the step on the num_workers=0 runs
TB_DATALOADER = {
    NW0 + "worker0.1623143089861.pt.trace.json.gz": (59_262, 33.4),
    NW0 + "worker0.1623143566756.pt.trace.json.gz": (35_504, 22.9),
}
# step time saved by the measured num_workers=4 twin of each span (median step 176.3 -> 126.5 ms
# and the second span's pair), the ground truth for dataloader-stall's replay (issue 14)
TWIN_SAVED_MS = {
    NW0 + "worker0.1623143089861.pt.trace.json.gz": 49.7,
    NW0 + "worker0.1623143566756.pt.trace.json.gz": 27.4,
}
V100 = [
    NW0 + "worker0.1623143089861.pt.trace.json.gz",
    "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
]
ALEXNET = "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"
NEGQ = "hta/negative_queue_length_values_check/rank0.json.gz"


@functools.cache
def _report(rel: str) -> Report:
    return analyze_path(shared_trace(rel))[1]


def _find(rel: str, det: str) -> Finding | None:
    rep = _report(rel)
    assert not [e for e in rep.errored if e.id in MINE], rep.errored
    return next((f for f in rep.findings if f.id == det), None)


@pytest.mark.parametrize("rel", sorted(TB_DATALOADER))
def test_dataloader_stall_matches_tb_profiler(rel: str) -> None:
    tb_us, tb_pct = TB_DATALOADER[rel]
    f = _find(rel, "dataloader-stall")
    assert f is not None
    # the replayed saving is within 25% of what num_workers=4 saved in the measured twin (the
    # time inside __next__, tb_us, is what TensorBoard's profiler shows)
    assert f.est_savings_ms == pytest.approx(TWIN_SAVED_MS[rel], rel=0.25)
    assert f.est_savings_ms <= tb_us / 1000 * 1.02
    share = float(f.summary.split("(")[1].split("%")[0])
    assert share == pytest.approx(tb_pct, abs=2.0)
    assert "num_workers=0" in f.summary and "num_workers=4" in f.recommendation


def test_dataloader_stall_silent_with_workers() -> None:
    files = sorted(shared_trace(NW4).glob("*.gz"))
    assert len(files) == 2
    for p in files:
        assert _find(NW4 + p.name, "dataloader-stall") is None


@pytest.mark.parametrize("rel", V100)
def test_fp32_matmul_on_v100_recommends_fp16_autocast(rel: str) -> None:
    f = _find(rel, "fp32-matmul")
    assert f is not None
    if rel.startswith(NW0):  # the host limits these steps (issue 14: at most 3 ms)
        assert f.est_savings_ms <= 3.0
    else:  # GPU-bound (91% of the critical path): faster kernels shorten the step
        assert f.severity == "high" and f.est_savings_ms > 20
    assert "compute capability 7.0" in f.summary
    assert "float16" in f.recommendation and "GradScaler" in f.recommendation
    assert "set_float32_matmul_precision" not in f.recommendation + f.snippet


def test_sync_point_and_gpu_idle_fire_on_a100_traces() -> None:
    sp = _find(NEGQ, "sync-point")
    gi = _find(NEGQ, "gpu-idle")
    assert sp is not None and gi is not None
    assert "host-device sync" in sp.summary and "idle" in gi.summary


def test_benchmark_timing_syncs_are_the_harness_s() -> None:
    # alexnet's window: a forward bracketed by two torch.cuda.synchronize() calls, one before
    # its first launch and one after its last: the benchmark's timing, not the model's
    assert _find(ALEXNET, "sync-point") is None
    assert _find(ALEXNET, "gpu-idle") is not None


def test_negative_queue_figures() -> None:
    sp = _find(NEGQ, "sync-point")
    gi = _find(NEGQ, "gpu-idle")
    assert sp is not None and gi is not None
    # 6 device-to-host copies per step block the host ~152 ms but the GPU had deep queues:
    # replayed without them the steps are hardly shorter
    assert "6 host-device sync(s) per step" in sp.summary
    assert sp.est_savings_ms < 2.0
    # HTA: 69.4% idle over the whole span; mostly work queued behind other streams. 64% of the
    # steps look idle, but 70 CUDA-graph replays recorded only 26% of their spans: counting the
    # unrecorded replay spans as busy (trace quality) leaves 43% measured idle, low confidence
    idle_pct = float(gi.summary.split("idle ")[1].split("%")[0])
    assert 38 <= idle_pct <= 48, gi.summary
    assert gi.confidence == "low"
    assert "other" in gi.summary.split(":")[1].split(",")[0]


def test_cpu_only_trace_claims_no_gpu_saving() -> None:
    rep = _report("hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    assert not rep.errored
    assert all(f.est_savings_ms == 0 for f in rep.findings if f.id in MINE)
    skipped = {s.id for s in rep.skipped}
    assert {"tiny-kernels", "fp32-matmul", "gpu-idle"} <= skipped


@pytest.mark.slow
def test_mtia_trace_claims_no_gpu_saving() -> None:
    rep = _report("hta/mtia_trace_single_rank/mtia_rank_0.json.gz")
    assert not rep.errored
    mine = [f for f in rep.findings if f.id in MINE]
    assert all(f.est_savings_ms == 0 and f.severity == "info" for f in mine)
    assert {"tiny-kernels", "fp32-matmul", "gpu-idle"} <= {s.id for s in rep.skipped}


def _gpu_traces() -> list[str]:
    if not SHARED.is_dir():
        return []
    out = []
    for p in sorted(SHARED.rglob("*.json*")):
        rel = p.relative_to(SHARED).as_posix()
        if "expected" in rel or "cpu_only" in rel or "mtia" in rel:
            continue
        out.append(rel)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("rel", _gpu_traces() or ["(none)"])
def test_advisor_analyze_has_no_errored_detector(rel: str, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from advisor.cli.app import app

    path = shared_trace(rel)
    res = CliRunner().invoke(app, ["analyze", str(path), "--out", str(tmp_path / "out"), "--json"])
    assert res.exit_code == 0, res.output[-2000:]
    data = json.loads(res.stdout)
    assert data["errored"] == []
    for f in data["findings"]:
        assert f["est_savings_ms"] <= data["run"]["step_ms_median"] + 1e-6
