"""Tests on a name column (operators, kernels, runtime calls, ranges) evaluated once per
distinct name: on the categories of a categorical column, else on the factorized values. Every
layer that picks rows by name (the trace's derived facts, the replay's graph, the views and the
detectors) uses these, so a column of a million rows costs one test per distinct name."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from typing import Any

import numpy as np
import pandas as pd


def name_flags(names: Any, pred: Callable[[str], bool], missing: bool = False) -> np.ndarray:
    """``pred(name)`` for each row of a name column (a Series, a Categorical or any sequence),
    evaluated once per distinct name (on the categories of a categorical, else on the factorized
    values); a missing name gives ``missing``."""
    if isinstance(getattr(names, "dtype", None), pd.CategoricalDtype):
        cat = names.array if isinstance(names, pd.Series) else names
        codes, uniq = cat.codes, cat.categories
    else:
        arr = np.asarray(names, dtype=object)
        if not len(arr):
            return np.zeros(0, dtype=bool)
        codes, uniq = pd.factorize(arr)  # hashing, not sorting fixed-width strings
    hits = np.fromiter((bool(pred(str(u))) for u in uniq), bool, len(uniq))
    return np.append(hits, missing)[np.asarray(codes)]  # code -1: the missing flag at the end


def name_values(names: Any, fn: Callable[[str], str | None]) -> np.ndarray:
    """``fn(name)`` for each row of a name column (object array; None for a missing name),
    evaluated once per distinct name as in :func:`name_flags`."""
    if isinstance(getattr(names, "dtype", None), pd.CategoricalDtype):
        cat = names.array if isinstance(names, pd.Series) else names
        codes, uniq = cat.codes, cat.categories
    else:
        arr = np.asarray(names, dtype=object)
        if not len(arr):
            return np.zeros(0, dtype=object)
        codes, uniq = pd.factorize(arr)
    vals = np.array([fn(str(u)) for u in uniq] + [None], dtype=object)
    return vals[np.asarray(codes)]


def name_mask(values: Any, pattern: re.Pattern[str]) -> np.ndarray:
    """``pattern.search`` over names, evaluated once per distinct name."""
    return name_flags(values, lambda n: pattern.search(n) is not None)


def name_in(values: Any, names: Collection[str]) -> np.ndarray:
    """Whether each name is one of ``names`` (``np.isin`` without comparing every row)."""
    return name_flags(values, frozenset(names).__contains__)
