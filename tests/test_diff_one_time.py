"""advisor diff keeps one-time work out of the headline: the steady step (each step less the
one-time work it held with the GPU idle), the one-time work shown apart, and the bound."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.analysis.pipeline import Options
from advisor.multirank.diff import diff_sides, load_side
from advisor.output.diff_terminal import print_diff
from tests.diff_builders import ab_run


def test_one_time_work_on_one_side_is_kept_out(tmp_path: Path) -> None:
    """B's second step starts with 5 ms of cudaMalloc (the GPU idle): measured, B is slower;
    in the steady state the runs are the same."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = ab_run(tmp_path / "a" / "t.json", steps=2)
    b = ab_run(tmp_path / "b" / "t.json", steps=2, one_time_us={1: 5_000.0})
    d = diff_sides(load_side(a, Options()), load_side(b, Options()))
    assert d["step_ms_median"]["a"] == pytest.approx(6.0)
    assert d["step_ms_median"]["b"] == pytest.approx(8.5)  # (6 + 11) / 2
    st = d["steady_step_ms"]
    assert st["a"] == pytest.approx(6.0) and st["b"] == pytest.approx(6.0, abs=0.01)
    once = d["one_time"]
    assert once["kept_out"] and once["a"]["held_ms_per_step"] == 0.0
    assert once["b"]["by_kind_ms"] == {"alloc": pytest.approx(4.99)}
    assert once["b"]["held_ms_per_step"] == pytest.approx(2.495, abs=0.01)
    assert d["verdict"].startswith("step time unchanged in the steady state (6.00 -> 6.00 ms)")
    assert "one-time work per step kept out (B 2.50 ms; measured 6.00 -> 8.50 ms)" in d["verdict"]
    out = tmp_path / "out.txt"
    with out.open("w") as fh:
        print_diff(d, file=fh)
    text = out.read_text()
    assert "steady step (one-time work out)" in text
    assert "caching-allocator growth (cudaMalloc) 4.99 ms" in text


def test_the_bound_of_each_side_and_a_flip(tmp_path: Path) -> None:
    """A: the host works long after a short GEMM (host-bound); B: the host queues a long GEMM
    and its copy at once, then waits for them (GPU-bound)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = ab_run(tmp_path / "a" / "t.json", mm_us=500.0, gap_us=8_000.0)
    b = ab_run(tmp_path / "b" / "t.json", mm_us=9_000.0, gap_us=0.0, early_copy=True)
    d = diff_sides(load_side(a, Options()), load_side(b, Options()))
    bound = d["bound"]
    assert bound["a"] == "host" and bound["b"] == "gpu" and bound["flipped"]
    assert "the step was bound by host in A, by GPU compute in B" in d["verdict"]
