"""The contract every registered detector keeps (ARCHITECTURE.md, "Where new code goes"), checked
for each one: a new detector is covered the moment it registers.

- its module is ``advisor.detectors.<id with underscores>`` and its docstring, shown in the
  report, has the five sections, in order;
- README.md lists its id; its thresholds are keyed by its module's name;
- run on a GPU trace and a CPU-only one (the samples), it returns drafts of its own id with a
  valid confidence and finite savings (a range around them), or says why it skipped; a GPU-only
  detector is skipped on the CPU-only trace.
"""

from __future__ import annotations

import math
import re
from functools import cache
from typing import Any

import pytest

from advisor.analysis.detection import all_detectors
from advisor.derive.locate import Locator
from advisor.derive.steps import steady_trace
from advisor.detect import Context, Draft, Skip
from advisor.detect.registry import Detector
from advisor.detect.thresholds import THRESHOLDS, Thresholds
from advisor.trace import Trace, load_trace
from tests.conftest import REPO, SAMPLES

SECTIONS = (
    "**What it detects.**",
    "**Why it costs time.**",
    "**How the saving is estimated.**",
    "**How to fix.**",
    "**Known false positives.**",
)
DETECTORS = all_detectors()
IDS = [d.id for d in DETECTORS]
GPU_TRACE = SAMPLES / "resnet50_v100.kineto.json.gz"
CPU_TRACE = SAMPLES / "sync_point.cpu.json.gz"


def test_every_detector_module_is_registered() -> None:
    """Each module of heuristics/ not starting with ``_`` registers the detector named after it."""
    modules = {p.stem for p in (REPO / "heuristics").glob("[a-z]*.py")}
    assert {d.id.replace("-", "_") for d in DETECTORS} == modules


@pytest.mark.parametrize("det", DETECTORS, ids=IDS)
def test_module_and_documentation(det: Detector) -> None:
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", det.id), det.id
    assert det.func.__module__ == "advisor.detectors." + det.id.replace("-", "_")
    assert det.title and "\n" not in det.title
    at = [det.doc.find(s) for s in SECTIONS]
    assert all(i >= 0 for i in at), [s for s, i in zip(SECTIONS, at, strict=True) if i < 0]
    assert at == sorted(at), "sections out of order"
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert any(ln.startswith("| ") and f"`{det.id}`" in ln for ln in readme.splitlines())


def test_thresholds_are_keyed_by_their_detector() -> None:
    owners = {d.id.replace("-", "_") for d in DETECTORS} | {"rank"}
    assert {k.split(".")[0] for k in THRESHOLDS} <= owners


@cache
def _prepared(name: str) -> tuple[Trace, Context]:
    trace = steady_trace(load_trace(SAMPLES / name))
    ctx = Context(
        run=None,
        thresholds=Thresholds(),
        step_ms_median=trace.median_step_ms(),
        locator=Locator(trace),
        trace=trace,
    )
    return trace, ctx


def _run(det: Detector, name: str) -> list[Draft] | str:
    """The detector's drafts on a sample, or why it skipped."""
    trace, ctx = _prepared(name)
    reason = det.missing(trace, ctx)
    if reason:
        return reason
    try:
        return det.func(trace, ctx)
    except Skip as s:
        return str(s) or "skipped"


def _check(det: Detector, got: Any) -> None:
    if isinstance(got, str):
        assert got.strip(), f"{det.id} skipped without a reason"
        return
    assert isinstance(got, list), type(got)
    for d in got:
        assert isinstance(d, Draft), type(d)
        assert d.id == det.id
        assert d.confidence in ("high", "medium", "low")
        assert math.isfinite(d.est_savings_ms) and d.est_savings_ms >= 0
        if d.est_savings_range_ms is not None:
            lo, hi = d.est_savings_range_ms
            assert math.isfinite(lo) and math.isfinite(hi) and 0 <= lo <= hi
        assert d.summary and d.recommendation


@pytest.mark.parametrize("det", DETECTORS, ids=IDS)
def test_results_on_a_gpu_trace(det: Detector) -> None:
    _check(det, _run(det, GPU_TRACE.name))


@pytest.mark.parametrize("det", DETECTORS, ids=IDS)
def test_results_on_a_cpu_only_trace(det: Detector) -> None:
    got = _run(det, CPU_TRACE.name)
    _check(det, got)
    if det.gpu_only:
        assert got == "no GPU activity in this trace"


def test_the_seven_op_pattern_detectors_register_thresholds() -> None:
    """inference-without-no-grad, data-parallel, python-loop, cat-in-loop,
    single-tensor-optimizer, fusible-elementwise and memory-headroom are registered and declare
    their thresholds."""
    ids = {
        "inference-without-no-grad",
        "data-parallel",
        "python-loop",
        "cat-in-loop",
        "single-tensor-optimizer",
        "fusible-elementwise",
        "memory-headroom",
    }
    assert {d.id for d in all_detectors() if d.id in ids} == ids
    assert {k.split(".")[0] for k in THRESHOLDS} >= {
        "python_loop",
        "cat_in_loop",
        "single_tensor_optimizer",
        "fusible_elementwise",
        "memory_headroom",
        "inference_without_no_grad",
    }
    assert math.isfinite(THRESHOLDS["python_loop.min_ops_per_step"].default)
