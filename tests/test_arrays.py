"""advisor.arrays: the sets of integers by sorting give numpy's own results (values and dtype),
and any other kind of value is left to numpy."""

from __future__ import annotations

import numpy as np
import pytest

from advisor.arrays import intersect_ints, setdiff_ints, union_ints, unique_ints

RNG = np.random.default_rng(7)
INTS = [
    np.zeros(0, np.int64),
    np.array([5]),
    RNG.integers(-50, 50, 1000),
    RNG.integers(0, 10**12, 5000),
    RNG.integers(0, 3, (40, 25)).astype(np.int32),  # two-dimensional: flattened
    np.sort(RNG.integers(0, 100, 2000)).astype(np.uint16),
    RNG.integers(0, 2, 100).astype(bool),
]


@pytest.mark.parametrize("a", INTS, ids=lambda a: f"{a.dtype}{a.shape}")
def test_unique_ints_is_np_unique(a: np.ndarray) -> None:
    got, want = unique_ints(a), np.unique(a)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "a",
    [
        np.array([3.0, np.nan, 1.0, np.nan, 3.0]),  # numpy's NaN rule: one NaN
        np.array(["b", "a", "b"]),
        np.array([(1, 2), (1, 2)], dtype=object).ravel(),
    ],
    ids=["float-nan", "str", "object"],
)
def test_other_kinds_are_numpys(a: np.ndarray) -> None:
    got, want = unique_ints(a), np.unique(a)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_set_operations_are_numpys() -> None:
    a, b = RNG.integers(0, 300, 500), RNG.integers(100, 400, 700)
    np.testing.assert_array_equal(union_ints(a, b), np.union1d(a, b))
    np.testing.assert_array_equal(intersect_ints(a, b), np.intersect1d(a, b))
    np.testing.assert_array_equal(setdiff_ints(a, b), np.setdiff1d(a, b))
