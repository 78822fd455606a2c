"""advisor diff says first when the two runs computed different things: the top ops' input
shapes and dtypes, and the steps normalised per unit of work or per sample."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.analysis.pipeline import Options
from advisor.derive.workload import signature
from advisor.multirank.diff import diff_sides, load_side
from tests.diff_builders import ab_run


def _diff(tmp_path: Path, a_kw: dict, b_kw: dict) -> dict:  # type: ignore[type-arg]
    for side in ("a", "b"):
        (tmp_path / side).mkdir()
    a = ab_run(tmp_path / "a" / "t.json", **a_kw)
    b = ab_run(tmp_path / "b" / "t.json", **b_kw)
    return diff_sides(load_side(a, Options()), load_side(b, Options()))


def test_signature_keeps_tensors_only() -> None:
    dims = [[4, 128, 1024], [1024, 1024], [], [[2, 3], [4]]]
    types = ["float", "c10::BFloat16", "Scalar", "TensorList"]
    assert signature(dims, types) == "4x128x1024 float; 1024x1024 c10::BFloat16"
    assert signature(None, None) == ""


def test_a_shape_change_is_said_before_the_attribution(tmp_path: Path) -> None:
    """Batch 4 -> 8: the GEMM takes twice as long; per unit of A's work B is no slower."""
    d = _diff(
        tmp_path,
        {},
        {"mm_dims": [[8, 128, 1024], [1024, 1024]], "mm_us": 4_000.0},
    )
    w = d["workload"]
    assert w["differs"]
    assert w["text"].startswith(
        "a different workload: aten::mm [4x128x1024 float; 1024x1024 float] -> "
        "[8x128x1024 float; 1024x1024 float]"
    )
    (op,) = w["ops"]
    assert op["ratio"] == 2.0 and w["scale"] == 2.0
    n = w["normalised"]
    assert n["unit"] == "unit of A's work"
    assert n["a_ms"] == pytest.approx(6.0) and n["b_ms"] == pytest.approx(4.0)
    assert d["verdict"].startswith("a different workload: aten::mm")


def test_a_dtype_change_is_a_different_workload(tmp_path: Path) -> None:
    d = _diff(tmp_path, {}, {"mm_dims": [[4, 128, 1024], [1024, 1024]], "mm_types": "c10::Half"})
    w = d["workload"]
    assert w["differs"] and "c10::Half" in w["text"] and w["scale"] == 1.0
    assert w["normalised"] is None  # the same number of elements: nothing to normalise


def test_the_same_shapes_are_the_same_workload(tmp_path: Path) -> None:
    d = _diff(tmp_path, {}, {"mm_us": 1_500.0})
    assert d["workload"]["differs"] is False and d["workload"]["ops"] == []
    assert d["verdict"].startswith("B is ")


def test_samples_per_step_from_the_run_context(tmp_path: Path) -> None:
    loader = {"num_workers": 0, "phase": "train"}
    d = _diff(
        tmp_path,
        {"run_json": {"dataloaders": [{**loader, "batch_size": 32}]}},
        {
            "run_json": {"dataloaders": [{**loader, "batch_size": 64}]},
            "mm_dims": [[8, 128, 1024], [1024, 1024]],
            "mm_us": 4_000.0,
        },
    )
    w = d["workload"]
    assert w["samples_per_step"]["a"] == 32 and w["samples_per_step"]["b"] == 64
    n = w["normalised"]
    assert n["unit"] == "sample"
    assert n["a_ms"] == pytest.approx(6.0 / 32, abs=1e-4)
    assert n["b_ms"] == pytest.approx(8.0 / 64, abs=1e-4)
