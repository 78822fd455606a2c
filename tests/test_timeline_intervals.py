"""The one home of covered/busy time (advisor.derive.timeline.Intervals) and of op-name flags
(advisor.detectors._ops.name_flags) agree with the per-row / per-span definitions they replace."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from advisor.derive.timeline import Intervals, covered_ns, union
from advisor.trace.names import name_flags

_spans = st.lists(st.tuples(st.integers(0, 2_000), st.integers(0, 300)), max_size=30)


@settings(max_examples=200, deadline=None)
@given(busy=_spans, host=_spans)
def test_idle_in_spans_matches_the_per_span_sum(busy: list, host: list) -> None:
    bs, be = union(
        np.array([s for s, _ in busy], np.int64), np.array([s + d for s, d in busy], np.int64)
    )
    starts = np.array([s for s, _ in host], np.int64)
    ends = np.array([s + d for s, d in host], np.int64)
    us, ue = union(starts, ends)
    span = int(np.sum(ue - us))
    busy_ns = sum(covered_ns(bs, be, int(s), int(e)) for s, e in zip(us, ue, strict=True))
    assert Intervals(bs, be).idle_in_spans(starts, ends) == (span, span - busy_ns)


@settings(max_examples=200, deadline=None)
@given(busy=_spans, lo=st.integers(-50, 2_400), width=st.integers(0, 600))
def test_covered_matches_brute_force(busy: list, lo: int, width: int) -> None:
    iv = Intervals.union_of(
        np.array([s for s, _ in busy], np.int64), np.array([s + d for s, d in busy], np.int64)
    )
    mask = np.zeros(3_200, dtype=bool)
    for s, d in busy:
        mask[s + 100 : s + d + 100] = True
    want = int(mask[lo + 100 : lo + width + 100].sum())
    assert iv.covered_ns(lo, lo + width) == want
    assert int(iv.covered(np.array([lo]), np.array([lo + width]))[0]) == want
    assert iv.idle_ns(lo, lo + width) == width - want
    assert int(iv.before(np.array([lo]))[0]) == int(mask[: lo + 100].sum())


def test_idle_in_spans_without_spans_or_busy_time() -> None:
    none = np.zeros(0, np.int64)
    empty = Intervals(none, none)
    assert empty.idle_in_spans(none, none) == (0, 0)
    assert empty.idle_in_spans(np.array([10]), np.array([30])) == (20, 20)
    assert Intervals(np.array([0]), np.array([25])).idle_in_spans(none, none) == (0, 0)
    # busy [0, 25) and [28, 40): span [10, 30) is 17 ns busy, 3 ns idle
    two = Intervals(np.array([0, 28]), np.array([25, 40]))
    assert two.idle_in_spans(np.array([10]), np.array([30])) == (20, 3)


def test_name_flags_tests_each_distinct_name_once() -> None:
    names = pd.Series(
        ["aten::zero_", "aten::mm", "aten::zero_", None, "aten::fill_"], dtype="category"
    )
    seen: list[str] = []

    def pred(n: str) -> bool:
        seen.append(n)
        return n in {"aten::zero_", "aten::fill_"}

    got = name_flags(names, pred)
    assert got.tolist() == [True, False, True, False, True]
    assert sorted(seen) == ["aten::fill_", "aten::mm", "aten::zero_"]
    # plain strings are factorized; a missing name gives the ``missing`` flag
    assert name_flags(pd.Series(["a", None]), lambda n: True).tolist() == [True, False]
    assert name_flags(pd.Series(["a", None]), bool, missing=True).tolist() == [True, True]
    assert name_flags(pd.Series([], dtype="category"), bool).tolist() == []


def test_subtract_cuts_intervals_out() -> None:
    from advisor.derive.timeline import subtract

    s, e = subtract(
        np.array([0, 10, 30]), np.array([5, 20, 40]), np.array([3, 12, 25]), np.array([11, 15, 35])
    )
    assert s.tolist() == [0, 11, 15, 35] and e.tolist() == [3, 12, 20, 40]
    s, e = subtract(np.array([0]), np.array([100]), np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert s.tolist() == [0] and e.tolist() == [100]
    s, e = subtract(np.array([10]), np.array([20]), np.array([0]), np.array([30]))
    assert not len(s) and not len(e)


@settings(max_examples=200, deadline=None)
@given(keep=_spans, cut=_spans)
def test_subtract_leaves_exactly_the_uncovered_part(keep: list, cut: list) -> None:
    from advisor.derive.timeline import subtract

    ks, ke = union(
        np.array([s for s, _ in keep], np.int64), np.array([s + d for s, d in keep], np.int64)
    )
    cs, ce = union(
        np.array([s for s, _ in cut], np.int64), np.array([s + d for s, d in cut], np.int64)
    )
    s, e = subtract(ks, ke, cs, ce)
    inside = sum(covered_ns(cs, ce, int(a), int(b)) for a, b in zip(ks, ke, strict=True))
    assert int(np.sum(e - s)) == int(np.sum(ke - ks)) - inside
    assert all(covered_ns(cs, ce, int(a), int(b)) == 0 for a, b in zip(s, e, strict=True))
