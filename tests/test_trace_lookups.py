"""Lookups the detectors share: whether a source file is the user's, the op behind a runtime
call, name tests on a column (once per distinct name).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from advisor.detectors._ops import runtime_op

from advisor.trace.build import is_user_file as user_file
from advisor.trace.names import name_in, name_mask
from tests.tracebuilder import TraceBuilder


def test_user_file_rejects_relative_library_and_stdlib_paths() -> None:
    assert user_file("train.py")
    assert user_file("/home/me/proj/model.py")
    assert not user_file("torch/nn/modules/linear.py")  # torch >= 2 writes sys.path-relative
    assert not user_file("typing.py")
    assert not user_file("transformers/models/bert/modeling_bert.py")
    assert not user_file("/usr/lib/python3.11/site-packages/torch/_tensor.py")
    assert not user_file("<built-in method item of Tensor object at 0x7f>")


def test_runtime_op_falls_back_to_the_enclosing_op_when_ids_do_not_link() -> None:
    b = TraceBuilder()
    b.step(1, 0, 100)
    op = b.op("aten::mul", 10, 30)
    b.op("aten::mul_inner", 12, 20)
    rt = b.runtime("cudaLaunchKernel", 15, 3, op=op)
    rt["args"]["External id"] = 999  # an id no op carries (as in some 1.13 traces)
    t = b.load()
    # the loader itself now falls back to the innermost op around the call (same answer)
    assert t.runtime["op_idx"].tolist() == [1]
    assert runtime_op(t).tolist() == [1]  # the innermost op around the call


def test_name_in_and_name_mask_match_per_row_tests() -> None:
    names = ["aten::add_", "aten::mm", None, "aten::add_", "aten::_foreach_add_"]
    for values in (pd.Series(names, dtype="category"), np.array(names, dtype=object)):
        assert name_in(values, ["aten::add_", "aten::mul_"]).tolist() == [
            True,
            False,
            False,
            True,
            False,
        ]
        assert name_mask(values, re.compile("_foreach_|mm")).tolist() == [
            False,
            True,
            False,
            False,
            True,
        ]
    assert name_in(np.zeros(0, dtype=object), ["x"]).tolist() == []
