"""Vectorized checklist-A helpers agree with the per-row / per-span definitions they replace."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from advisor.timeline import union
from heuristics import _checklist_a as h

_spans = st.lists(st.tuples(st.integers(0, 2_000), st.integers(0, 300)), max_size=30)


@settings(max_examples=200, deadline=None)
@given(busy=_spans, host=_spans)
def test_idle_in_spans_matches_the_per_span_sum(busy: list, host: list) -> None:
    bs, be = union(np.array([s for s, _ in busy], np.int64),
                   np.array([s + d for s, d in busy], np.int64))  # fmt: skip
    starts = np.array([s for s, _ in host], np.int64)
    ends = np.array([s + d for s, d in host], np.int64)
    us, ue = union(starts, ends)
    span = int(np.sum(ue - us))
    busy_ns = sum(h.covered(bs, be, int(s), int(e)) for s, e in zip(us, ue, strict=True))
    assert h.idle_in_spans(bs, be, starts, ends) == (span, span - busy_ns)


def test_idle_in_spans_without_spans_or_busy_time() -> None:
    none = np.zeros(0, np.int64)
    assert h.idle_in_spans(none, none, none, none) == (0, 0)
    assert h.idle_in_spans(none, none, np.array([10]), np.array([30])) == (20, 20)
    assert h.idle_in_spans(np.array([0]), np.array([25]), none, none) == (0, 0)
    # busy [0, 25) and [28, 40): span [10, 30) is 17 ns busy, 3 ns idle
    assert h.idle_in_spans(np.array([0, 28]), np.array([25, 40]), np.array([10]),
                           np.array([30])) == (20, 3)  # fmt: skip


def test_name_flags_tests_each_distinct_name_once() -> None:
    names = pd.Series(["aten::zero_", "aten::mm", "aten::zero_", None, "aten::fill_"],
                      dtype="category")  # fmt: skip
    seen: list[str] = []

    def pred(n: str) -> bool:
        seen.append(n)
        return n in {"aten::zero_", "aten::fill_"}

    got = h.name_flags(names, pred)
    assert got.tolist() == [True, False, True, False, True]
    assert sorted(seen) == ["aten::fill_", "aten::mm", "aten::zero_", "nan"]
    # plain strings are made categorical; a missing name reads "nan"
    assert h.name_flags(pd.Series(["a", None]), lambda n: n == "nan").tolist() == [False, True]
    assert h.name_flags(pd.Series([], dtype="category"), bool).tolist() == []
