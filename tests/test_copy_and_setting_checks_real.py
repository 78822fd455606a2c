"""pageable-memcpy, blocking-copy, host-tensor-creation, zero-grad-not-none, conv-bias-before-bn,
channels-last and cudnn-benchmark on real traces (skipped when ../shared is absent)."""

from __future__ import annotations

import pytest

from advisor.analysis.pipeline import Options, analyze_trace
from advisor.report import Report
from advisor.trace import load_trace
from tests.conftest import shared_trace
from tests.detector_helpers import found, one

pytestmark = pytest.mark.shared

IDS = frozenset(
    {
        "pageable-memcpy",
        "blocking-copy",
        "host-tensor-creation",
        "zero-grad-not-none",
        "conv-bias-before-bn",
        "channels-last",
        "cudnn-benchmark",
    }
)
RESNET = [
    "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    "kineto/resnet50_num_workers_0/worker0.1623143566756.pt.trace.json.gz",
    "kineto/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz",
    "kineto/resnet50_num_workers_4/worker0.1623213129365.pt.trace.json.gz",
]
ALEXNET = "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"
NCCL = "hta/nccl_parser_config/nccl_data.json.gz"
_cache: dict[str, Report] = {}


def report(rel: str) -> Report:
    if rel not in _cache:
        rep = analyze_trace(load_trace(shared_trace(rel)), None, Options(only=IDS))
        assert not rep.errored, rep.errored
        _cache[rel] = rep
    return _cache[rel]


@pytest.mark.parametrize("rel", RESNET)
def test_resnet50_blocking_pageable_batch_copy(rel: str) -> None:
    rep = report(rel)
    # the same copies: one row, led by blocking-copy (issue 25), pageable-memcpy under it
    assert not found(rep, "pageable-memcpy")
    alone = analyze_trace(
        load_trace(shared_trace(rel)), None, Options(only=frozenset(["pageable-memcpy"]))
    )
    pg = one(alone, "pageable-memcpy")
    assert pg.evidence[0].what == "Memcpy HtoD (Pageable -> Device), 19.3 MB each"
    assert pg.evidence[0].count == 6
    # V100 pinned rate capped at 12 GB/s: 19.3 MB cannot go below 1.6 ms
    assert 0.05 < pg.est_savings_ms < 2.0
    bc = one(rep, "blocking-copy")
    assert "1 host-to-device blocking copy (19.3 MB) per step" in bc.summary
    assert "cudaMemcpyAsync + cudaStreamSynchronize" in bc.evidence[0].what
    assert 1.5 < bc.est_savings_ms < 4.0
    lo, hi = bc.est_savings_range_ms or (0.0, 0.0)
    # replayed: with the copy left in the stream (non_blocking=True alone) the host waits for
    # it later anyway; only taking it off the critical path (prefetch) saves the step time
    assert 0 <= lo < hi == bc.est_savings_ms
    assert any("Replayed:" in a for a in bc.assumptions)
    assert [r.id for r in bc.related] == ["pageable-memcpy"] and bc.related[0].shared_pct > 99
    assert bc.related[0].est_savings_ms == pg.est_savings_ms
    assert pg.locations[0].file == "resnet50_profiler_api.py" and pg.locations[0].line == 44


@pytest.mark.parametrize("rel", RESNET[:1])
def test_resnet50_other_checklist_items(rel: str) -> None:
    rep = report(rel)
    zg = one(rep, "zero-grad-not-none")  # torch 1.8: zero_grad() zeroes 161 gradients
    assert "fills 161 gradient(s)" in zg.summary and zg.est_savings_ms > 1.0
    assert zg.locations[0].line == 49
    # torchvision ResNet convs have no bias; 0.09 ms/step of layout conversions is below 0.5%
    for det in ("conv-bias-before-bn", "channels-last", "host-tensor-creation"):
        assert not found(rep, det), det
    assert any(s.id == "cudnn-benchmark" and "run.json" in s.reason for s in rep.skipped)


def test_alexnet_weight_upload_is_one_time_not_pageable_memcpy() -> None:
    # the 16 pageable copies (244.4 MB) are model.to(device) before the first forward: set-up
    # the window captured once, so no per-step pageable-memcpy/blocking-copy claim
    rep = analyze_trace(load_trace(shared_trace(ALEXNET)), None, Options())
    assert not found(rep, "pageable-memcpy") and not found(rep, "blocking-copy")
    f = one(rep, "one-time-init")
    assert "host-to-device uploads" in f.summary
    up = [e for e in f.evidence if "uploads" in e.what]
    assert up and up[0].count == 16 and "244.4 MB" in up[0].what


def test_nccl_conv_net_layout_conversions() -> None:
    rep = report(NCCL)
    f = one(rep, "channels-last")
    # the conversions take 5.04 ms of GPU time per step, but the host limits these steps (100%
    # of the critical path): replayed without them the step is not shorter
    assert f.est_savings_ms <= 0.5
    assert rep.run.bound.by == "host"
    assert f.confidence == "medium"
    assert {e.what.split(" ")[0] for e in f.evidence} == {
        "cudnn::ops::nchwToNhwcKernel",
        "cudnn::ops::nhwcToNchwKernel",
    }
    # no conv bias (no add_ under the convolutions), zero_grad sets to None (torch 2.x)
    assert not found(rep, "conv-bias-before-bn")
    assert not found(rep, "zero-grad-not-none")


def test_amd_toy_randn_on_host_then_copied() -> None:
    f = one(
        report("hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"), "host-tensor-creation"
    )
    assert f.evidence[0].what.startswith("aten::randn [5, 128] on the host")


@pytest.mark.parametrize(
    "rel",
    [
        "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
        "hta/mtia_trace_single_rank/mtia_rank_0.json.gz",
    ],
)
def test_no_saving_claimed_without_gpu(rel: str) -> None:
    rep = report(rel)
    assert [f.id for f in rep.findings if f.est_savings_ms > 0] == []
    gpu_only = {
        "pageable-memcpy",
        "blocking-copy",
        "host-tensor-creation",
        "channels-last",
        "cudnn-benchmark",
    }
    assert gpu_only <= {s.id for s in rep.skipped}
