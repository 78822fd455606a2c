"""inference-without-no-grad, data-parallel, python-loop, cat-in-loop, single-tensor-optimizer,
fusible-elementwise and memory-headroom on real traces (skipped when ../shared is absent).

What each trace really shows (figures measured when these detectors were written):
- kineto resnet50 (V100, SGD with momentum, torch 1.8/1.9): 161 parameters x 3 single-tensor
  ops = 483 kernels per optimizer step, but the GPU is still busy with backward while the host
  issues them: ~0.8 ms of GPU idle per step to recover. No elementwise chain of 3+ (cuDNN
  conv/bn kernels sit between them). Memory events without Total Allocated: lower bound only.
- df_index_resolver (V100, DDP, SGD): 404 single-tensor add_ per step with ~7.3 ms of GPU idle
  inside the optimizer range; unfused elementwise chains (inside AOTAutograd
  CompiledFunction regions, so the backend did not fuse) worth ~6.3 ms; peak 6.2 GB allocated,
  11.9 GB reserved of 31.7 GB (37%).
- nccl_data and ns_resolution (foreach SGD), negative_queue and control (FusedAdam): no
  single-tensor optimizer.
- cpu_only and the MTIA trace: nothing with a saving.
"""

from __future__ import annotations

from functools import cache

import pytest

from advisor.analysis.detection import all_detectors
from advisor.analysis.pipeline import Options, analyze_trace
from advisor.report import Report
from advisor.trace import load_trace
from tests.conftest import shared_trace
from tests.detector_helpers import finding, skip_reason

IDS = frozenset(
    {
        "inference-without-no-grad",
        "data-parallel",
        "python-loop",
        "cat-in-loop",
        "single-tensor-optimizer",
        "fusible-elementwise",
        "memory-headroom",
    }
)

RESNET = "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
RESNET_LEGACY = "kineto/resnet50_legacy_2020_num_workers_0/worker0.pt.trace.json.gz"
DF = "hta/df_index_resolver/df_index_resolver.json.gz"
NCCL = "hta/nccl_parser_config/nccl_data.json.gz"
NEGQ = "hta/negative_queue_length_values_check/rank0.json.gz"
CONTROL = "hta/trace_diff/control/control.json.gz"
CPU_ONLY = "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
MTIA = "hta/mtia_trace_single_rank/mtia_rank_0.json.gz"
ALEXNET = "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"


@cache
def _report(rel: str) -> Report:
    all_detectors()
    return analyze_trace(load_trace(shared_trace(rel)), None, Options(only=IDS))


def report(rel: str) -> Report:
    rep = _report(rel)  # skips when ../shared is absent
    assert not rep.errored, rep.errored
    return rep


def test_resnet50_single_tensor_sgd_is_found_but_mostly_hidden_behind_backward() -> None:
    rep = report(RESNET)
    f = finding(rep, "single-tensor-optimizer")
    assert f is not None
    assert "SGD.step launches about 483 per-parameter ops" in f.summary
    # 18.8 ms of host time per step in Optimizer.step; replayed with 90% of it gone the step is
    # ~16.6 ms shorter (removing the whole range saves 16.3-18.4 ms): the GPU drains its queue
    # during the next batch's fetch anyway (issue 14: within 25% of the replay, 16.3 ms)
    assert 16.3 * 0.75 <= f.est_savings_ms <= 16.3 * 1.25
    assert any(a.startswith("Replayed:") for a in f.assumptions)
    assert "fused=True" in f.snippet
    assert f.locations and f.locations[0].file == "resnet50_profiler_api.py"
    kernels = [e for e in f.evidence if e.what.startswith("kernels launched")][0]
    assert kernels.count == 6 * 483


def test_resnet50_has_no_other_finding_of_these_checks() -> None:
    rep = report(RESNET)
    assert {f.id for f in rep.findings} == {"single-tensor-optimizer"}
    # conv/bn kernels sit between the elementwise ones: no chain of three
    assert finding(rep, "fusible-elementwise") is None
    mem = skip_reason(rep, "memory-headroom") or ""
    assert "at least 2.6 GB allocated of 31.7 GB" in mem and "cannot show" in mem
    assert "TensorList" in (skip_reason(rep, "cat-in-loop") or "")


def test_legacy_2020_operator_ranges_find_the_optimizer() -> None:
    f = finding(report(RESNET_LEGACY), "single-tensor-optimizer")
    assert f is not None
    # 2020 traces record each in-place op twice (add_ inside add_): counted once
    assert "SGD.step launches about 483 per-parameter ops" in f.summary
    # replayed: more than the 3.99 ms of GPU idle inside the ranges, less than their host time
    opt_ms = f.evidence[0].total_ms / f.evidence[0].count
    assert 3.99 < f.est_savings_ms <= opt_ms


def test_df_index_resolver_figures() -> None:
    rep = report(DF)
    opt = finding(rep, "single-tensor-optimizer")
    assert opt is not None and "404 per-parameter ops" in opt.summary
    # host-bound (HTA: 100% CPU): replayed with 90% of the optimizer's host time gone, the step
    # loses ~11.3 ms (removing the ranges entirely: 12.6 ms)
    assert 9.0 <= opt.est_savings_ms <= 12.6
    fuse = finding(rep, "fusible-elementwise")
    assert fuse is not None
    # 11.0 ms of kernel time per step would go, but the host limits the step: ~0 replayed
    assert fuse.est_savings_ms <= 1.0
    assert fuse.est_savings_range_ms is not None and fuse.est_savings_range_ms[1] > 9.0
    assert "CompiledFunction" in fuse.recommendation  # AOTAutograd without a fusing backend
    mem = finding(rep, "memory-headroom")
    assert mem is not None and mem.severity == "info"
    assert "6.2 GB allocated, 11.9 GB reserved of 31.7 GB on GPU 1 (37%)" in mem.summary


@pytest.mark.parametrize("rel", [NCCL, NEGQ, CONTROL])
def test_foreach_and_fused_optimizers_are_not_flagged(rel: str) -> None:
    rep = report(rel)
    assert finding(rep, "single-tensor-optimizer") is None
    # torch.gather's GatherBackward0 (control) is not DataParallel's Gather
    assert finding(rep, "data-parallel") is None
    assert finding(rep, "inference-without-no-grad") is None  # training traces


def test_control_trace_elementwise_chains() -> None:
    f = finding(report(CONTROL), "fusible-elementwise")
    assert f is not None
    # 0.58 ms of kernel time per step would go (top of the range; 3.24 ms when any back-to-back
    # elementwise kernels counted: the two gradient terms of each MulBackward0, 11 nan_to_num
    # and clamp calls of one shape in a row (one per feature) and muls of unrelated shapes do
    # not feed each other); replayed, the step (bound by the host and the waits for peers, not
    # these kernels) is hardly shorter
    assert f.est_savings_range_ms is not None and 0.4 <= f.est_savings_range_ms[1] <= 0.8
    assert f.est_savings_ms <= 1.0
    assert any(e.what.startswith("mul -> mul -> mul") for e in f.evidence)  # MulBackward0 nodes


@pytest.mark.parametrize("rel", [CPU_ONLY, MTIA])
def test_no_saving_on_traces_without_gpu_kernels(rel: str) -> None:
    rep = report(rel)
    assert all(f.est_savings_ms == 0.0 for f in rep.findings)
    assert skip_reason(rep, "fusible-elementwise") == "no GPU activity in this trace"


def test_alexnet_forward_benchmark_runs_with_grad_enabled() -> None:
    f = finding(report(ALEXNET), "inference-without-no-grad")
    assert f is not None
    # forward passes, no backward anywhere; the steady step is the measured forward alone
    # (the warm-up forward is one-time-init), so its 24 nodes, not both forwards' 49
    assert "about 24 autograd nodes" in f.summary
    assert f.est_savings_ms <= 0.05 and f.severity == "low"
