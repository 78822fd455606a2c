"""fusible-elementwise on built traces: the chains (maximal runs of linked elementwise kernels),
kernel short names, and positive, negative and missing-data cases.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from advisor.detectors.fusible_elementwise import _chain_ns, _chains, short_name
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.detector_helpers import analyze, finding, skip_reason
from tests.tracebuilder import TraceBuilder


def _chains_by_loop(k: pd.DataFrame, ew: np.ndarray, min_chain: int) -> list[list[int]]:
    """The per-kernel walk that _chains replaced (the definition of a chain)."""
    order = np.lexsort((k["ts_ns"].to_numpy(), k["stream"].to_numpy(), k["device"].to_numpy()))
    dev, stream, step = (k[c].to_numpy()[order] for c in ("device", "stream", "step"))
    e = ew[order]
    out, start = [], None
    for i in range(len(order) + 1):
        if (
            i < len(order)
            and e[i]
            and i > 0
            and e[i - 1]
            and dev[i] == dev[i - 1]
            and stream[i] == stream[i - 1]
            and step[i] == step[i - 1]
        ):
            continue
        if start is not None and i - start >= min_chain:
            out.append(order[start:i].tolist())
        start = i if i < len(order) and e[i] else None
    return out


_kernel_rows = st.lists(
    st.tuples(st.integers(0, 1), st.integers(0, 2), st.integers(-1, 2), st.booleans()), max_size=60
)


@settings(max_examples=200, deadline=None)
@given(rows=_kernel_rows, min_chain=st.integers(1, 4))
def test_chains_are_the_maximal_runs_of_linked_elementwise_kernels(
    rows: list[tuple[int, int, int, bool]], min_chain: int
) -> None:
    k = pd.DataFrame(
        {
            "ts_ns": np.arange(len(rows), dtype=np.int64) * 10,
            "device": [r[0] for r in rows],
            "stream": [r[1] for r in rows],
            "step": [r[2] for r in rows],
        },
        dtype=np.int64,
    )
    ew = np.array([r[3] for r in rows], dtype=bool)
    got = [c.tolist() for c in _chains(SimpleNamespace(kernels=k), ew, min_chain)]  # type: ignore[arg-type]
    assert got == _chains_by_loop(k, ew, min_chain)


def test_chain_ns_sums_each_chains_kernel_time() -> None:
    dur = np.array([5, 7, 11, 13, 17, 19], dtype=np.int64)
    chains = [np.array([4, 1, 2]), np.array([0]), np.array([5, 3])]
    assert _chain_ns(dur, chains) == {4: 35.0, 0: 5.0, 5: 32.0}


def test_short_kernel_names() -> None:
    assert (
        short_name(
            "void at::native::vectorized_elementwise_kernel<4, at::native::"
            "CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int)"
        )
        == "add"
    )
    assert (
        short_name(
            "void at::native::vectorized_elementwise_kernel<4, at::native::"
            "BinaryFunctor<float, float, float, at::native::binary_internal::"
            "MulFunctor<float> >, at::detail::Array<char*, 3> >(int)"
        )
        == "mul"
    )
    assert (
        short_name(
            "void at::native::vectorized_elementwise_kernel<4, at::native::"
            "tanh_backward_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}"
            "::operator()() const>(int)"
        )
        == "tanh_backward"
    )


FUSE = "fusible-elementwise"
EW = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::{}<float>, at::detail::"
    "Array<char*, 3> >(int)"
)


def fusible_trace(
    chain: tuple[str, ...] = ("MulFunctor", "CUDAFunctor_add", "tanh_kernel_cuda"),
    steps: int = 3,
    only_step: int | None = None,
    wrap: str | None = None,
) -> TraceBuilder:
    b = TraceBuilder()
    for s in range(steps):
        t0 = s * 100.0
        b.step(s + 1, t0, 100)
        b.frame("model.py", 19, "forward", t0 + 0.5, 60)
        kernels = [("gemm", 35.0)]
        if only_step is None or s == only_step:
            kernels += [(EW.format(k), 10.0) for k in chain]
        kernels += [("gemm", 100.0 - 35.0 - 10.0 * (len(kernels) - 1))]
        g = t0
        for i, (kname, dur) in enumerate(kernels):
            o = b.op(wrap or "aten::op", t0 + 1 + i * 5, 4)
            if wrap:
                o = b.op("aten::mul", t0 + 1.5 + i * 5, 3)
            b.launch(o, "cudaLaunchKernel", t0 + 2 + i * 5, 1, kernel=kname, gpu_ts=g, gpu_dur=dur)
            g += dur
        # the host then waits for the GPU: the kernels are the step's critical path
        b.runtime("cudaDeviceSynchronize", t0 + 3 + len(kernels) * 5, g - t0 - 3 - len(kernels) * 5)
    return b


def test_fusible_chain_saves_k_minus_one_over_k_of_its_time() -> None:
    f = finding(analyze(fusible_trace().load(), FUSE), FUSE)
    assert f is not None
    # 3 kernels x 10 us, GPU busy the whole step: 2/3 of 30 us per step is the kernel time
    # removed (top of the range); replayed, the later kernels wait for their launches (the
    # trace's launch latency), so the step loses 15 us of it
    assert f.est_savings_ms == pytest.approx(0.015, abs=0.002)
    assert f.est_savings_range_ms is not None and f.est_savings_range_ms[1] == pytest.approx(0.02)
    assert f.evidence[0].what.startswith("mul -> add -> tanh")
    assert "torch.compile" in f.snippet
    assert f.locations[0].file == "model.py"


def _shaped_trace(ops: list[tuple[str, str, list]], lines: list[int] | None = None) -> TraceBuilder:
    """3 steps whose elementwise ops (name, functor, input dims) run back to back, each op
    called from its line of model.py (``lines``; one line for all when None)."""
    b = TraceBuilder()
    for s in range(3):
        t0 = s * 100.0
        b.step(s + 1, t0, 100)
        g = t0 + 20
        for i, (name, functor, dims) in enumerate(ops):
            ts = t0 + 1 + i * 5
            b.frame("model.py", (lines or [19] * len(ops))[i], "forward", ts - 0.2, 4.5)
            o = b.op(name, ts, 4, dims=dims, types=["float"] * len(dims))
            b.launch(
                o, "cudaLaunchKernel", ts + 1, 1, kernel=EW.format(functor), gpu_ts=g, gpu_dur=10
            )
            g += 10
        b.runtime("cudaDeviceSynchronize", t0 + 2 + len(ops) * 5, g - t0 - 2 - len(ops) * 5)
    return b


def test_only_ops_that_feed_each_other_make_a_chain() -> None:
    n = [4096, 1024]
    chain = [("aten::mul", "MulFunctor", [n, n]), ("aten::add", "CUDAFunctor_add", [n, n])]
    chain.append(("aten::tanh", "tanh_kernel_cuda", [n]))
    assert finding(analyze(_shaped_trace(chain).load(), FUSE), FUSE) is not None
    # the same ops on tensors of unrelated shapes: the next never takes the previous' result
    unrelated = [(a, f, [[d[0][0] + i, 1024]] * len(d)) for i, (a, f, d) in enumerate(chain)]
    assert finding(analyze(_shaped_trace(unrelated).load(), FUSE), FUSE) is None


def test_independent_repeats_are_not_a_chain() -> None:
    # c = a + b ten times from one line (a benchmark loop, elem_01): nothing to fuse
    add = ("aten::add", "CUDAFunctor_add", [[8192, 8192], [8192, 8192], []])
    assert finding(analyze(_shaped_trace([add] * 10).load(), FUSE), FUSE) is None
    # x = x + a; x = x + b; x = x + c on three lines: each add takes the previous result
    f = finding(analyze(_shaped_trace([add] * 3, lines=[19, 20, 21]).load(), FUSE), FUSE)
    assert f is not None and f.evidence[0].what.startswith("add -> add -> add")


def test_short_chains_and_one_off_chains_are_not_reported() -> None:
    assert (
        finding(analyze(fusible_trace(chain=("MulFunctor", "CUDAFunctor_add")).load(), FUSE), FUSE)
        is None
    )
    assert finding(analyze(fusible_trace(only_step=1).load(), FUSE), FUSE) is None


def test_gradient_accumulation_and_fills_are_not_fusible_chains() -> None:
    t = fusible_trace(wrap="torch::autograd::AccumulateGrad").load()
    assert finding(analyze(t, FUSE), FUSE) is None
    t = fusible_trace(chain=("FillFunctor", "FillFunctor", "FillFunctor")).load()
    assert finding(analyze(t, FUSE), FUSE) is None


def test_chains_inside_compiled_regions_point_at_the_backend() -> None:
    f = finding(analyze(fusible_trace(wrap="CompiledFunction").load(), FUSE), FUSE)
    assert f is not None and "Inductor" in f.recommendation


def test_fusible_on_cpu_only_trace_is_skipped() -> None:
    b = TraceBuilder(cc=None)
    b.step(1, 0, 100)
    b.op("aten::mul", 1, 5)
    assert "no GPU activity" in (skip_reason(analyze(b.load(), FUSE), FUSE) or "")
