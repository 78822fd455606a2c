"""Sets of integers (row numbers, node indices) as sorted numpy arrays, by sorting.

The same results as ``np.unique``, ``np.union1d``, ``np.intersect1d`` and ``np.setdiff1d``
(sorted, without repeats). numpy 2.4 finds the distinct values of an integer array with a hash
table, which on arrays of a hundred thousand rows takes about a second where sorting takes a
few milliseconds; these sort. :func:`as_rows` reads rows as a fix names them (positions or a
boolean mask).
"""

from __future__ import annotations

import numpy as np


def unique_ints(a: np.ndarray) -> np.ndarray:
    """``np.unique(a)`` (flattened), by sorting when ``a`` holds integers or booleans (any other
    kind of value: ``np.unique`` itself, whose NaN and string rules this leaves alone)."""
    flat = np.asarray(a).ravel()
    if flat.dtype.kind not in "iub":
        return np.unique(flat)
    s = np.sort(flat)
    if len(s) < 2:
        return s
    return s[np.r_[True, s[1:] != s[:-1]]]


def union_ints(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.union1d(a, b)``."""
    return unique_ints(np.concatenate([np.asarray(a).ravel(), np.asarray(b).ravel()]))


def intersect_ints(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.intersect1d(a, b)``."""
    ua = unique_ints(a)
    return ua[np.isin(ua, unique_ints(b), assume_unique=True)]


def setdiff_ints(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.setdiff1d(a, b)``."""
    ua = unique_ints(a)
    return ua[~np.isin(ua, unique_ints(b), assume_unique=True)]


def as_rows(rows: object) -> np.ndarray:
    """Row positions (int64) of ``rows``: positions, a boolean mask, or None (no rows)."""
    if rows is None:
        return np.zeros(0, dtype=np.int64)
    a = np.asarray(rows)
    if a.dtype == bool:
        return np.flatnonzero(a)
    return a.astype(np.int64).ravel()
