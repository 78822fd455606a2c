"""Vectorized op-chain helpers of heuristics/_ops: chain_match against op_chain, and
name_flags against a per-row test."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from advisor.detectors._matmul import CONV_BWD, CONV_FWD, GEMM_OPS, kernel_ops
from advisor.detectors._ops import chain_match, op_chain, op_names

from advisor.trace import load_trace
from advisor.trace.model import Trace
from advisor.trace.names import name_flags
from tests.conftest import shared_trace
from tests.tracebuilder import TraceBuilder

DEPTH = 40  # deeper than op_chain's 32-op limit


def _reference(trace: Trace, rows: np.ndarray, hit: np.ndarray, outermost: bool) -> np.ndarray:
    """chain_match spelled out with op_chain, one row at a time."""
    out = []
    for r in rows.tolist():
        hits = [i for i in op_chain(trace, r) if hit[i]]
        out.append((hits[-1] if outermost else hits[0]) if hits else -1)
    return np.array(out, dtype=np.int64)


def _deep_trace() -> Trace:
    """One chain of DEPTH nested ops (every third one an aten::mm) plus a shallow side tree."""
    b = TraceBuilder()
    b.step(1, 0, 10_000)
    for k in range(DEPTH):
        name = "aten::mm" if k % 3 == 0 else f"aten::op{k}"
        b.op(name, 10 + k, 5_000 - 2 * k)
    b.op("aten::conv2d", 6_000, 500)
    b.op("aten::convolution", 6_010, 400)
    b.op("aten::add_", 7_000, 50)
    return b.load()


def _check_all(trace: Trace, hit: np.ndarray) -> None:
    n = len(trace.cpu_ops)
    rows = np.r_[np.arange(n), -1, n, n + 5]  # out-of-table rows have an empty chain
    for outer in (False, True):
        got = chain_match(trace, rows, hit, outermost=outer)
        np.testing.assert_array_equal(got, _reference(trace, rows, hit, outer))


def test_chain_match_on_a_chain_deeper_than_the_limit() -> None:
    tr = _deep_trace()
    assert int(tr.cpu_ops["depth"].max()) >= DEPTH - 1
    opn = op_names(tr)
    rng = np.random.default_rng(0)
    masks = [
        np.array([n == "aten::mm" for n in opn]),
        np.array([n.startswith("aten::conv") for n in opn]),
        np.ones(len(opn), dtype=bool),
        np.zeros(len(opn), dtype=bool),
        rng.random(len(opn)) < 0.2,
    ]
    for hit in masks:
        _check_all(tr, hit)
    # the deepest op: its chain stops 32 ops up, so the outermost mm it sees is not the root
    deepest = int(np.argmax(tr.cpu_ops["depth"].to_numpy()))
    root = int(np.flatnonzero(tr.cpu_ops["depth"].to_numpy() == 0)[0])
    got = chain_match(tr, np.array([deepest]), masks[2], outermost=True)[0]
    assert got == op_chain(tr, deepest)[-1] != root


def test_chain_match_on_a_real_trace() -> None:
    tr = load_trace(
        shared_trace("kineto/resnet50_num_workers_0/worker0.1623143566756.pt.trace.json.gz")
    )
    names = tr.cpu_ops["name"]
    for pred in (
        GEMM_OPS.__contains__,
        CONV_FWD.__contains__,
        CONV_BWD.__contains__,
        lambda n: not n.startswith("ProfilerStep#"),
    ):
        _check_all(tr, name_flags(names, pred))
    # kernel_ops (vectorized) agrees with the per-kernel op_chain walk it replaced
    opn = op_names(tr)
    li = tr.kernels["launch_idx"].to_numpy()
    oi = np.where(li >= 0, tr.runtime["op_idx"].to_numpy()[np.clip(li, 0, None)], -1)
    want = []
    for o in oi.tolist():
        chain = op_chain(tr, o) if o >= 0 else []
        gemm = [i for i in chain if opn[i] in GEMM_OPS]
        bwd = [i for i in chain if opn[i] in CONV_BWD]
        fwd = [i for i in chain if opn[i] in CONV_FWD]
        want.append(gemm[0] if gemm else bwd[-1] if bwd else fwd[-1] if fwd else -1)
    got = kernel_ops(tr)
    np.testing.assert_array_equal(got, np.array(want, dtype=np.int64))
    assert (got >= 0).sum() > 100


@pytest.mark.parametrize("categorical", [True, False])
def test_name_flags_per_distinct_name(categorical: bool) -> None:
    values = ["aten::mm", "aten::add", None, "aten::mm", "ProfilerStep#1"]
    s = pd.Series(values, dtype="category" if categorical else object)
    got = name_flags(s, lambda n: n.startswith("aten::"))
    np.testing.assert_array_equal(got, [True, True, False, True, False])
    assert name_flags(s.iloc[:0], bool).shape == (0,)
