"""Communication recognised by behaviour (advisor/trace/commroles.by_behaviour): kernels named for
communication on a side stream that runs beside compute with few blocks, said in the trace's
quality notes; the same names on the compute stream, with many blocks or alone on the GPU are
computation."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from advisor.analysis.pipeline import Options, analyze_trace
from advisor.trace.model import Trace
from tests.kineto2021 import load_2021
from tests.tracebuilder import TraceBuilder

DISPATCH = "void fastmoe::token_dispatch_kernel<bf16, 7168>(int4*, float*, int*)"
COMBINE = "void fastmoe::token_combine_kernel<bf16, 7168>(void*, void*)"
LAYOUT = "void fastmoe::get_layout_kernel(int*, int*)"  # not named for communication
GEMM = "sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"
LOADERS: dict[str, Callable[[TraceBuilder], Trace]] = {
    "current": lambda b: b.load(),
    "kineto-2021": load_2021,
}


def _moe(side: int = 21, blocks: int = 20, overlap: bool = True) -> TraceBuilder:
    """3 steps of 3 ms: a 1 ms GEMM (432 blocks) on stream 7; dispatch and combine (300 us each,
    ``blocks`` blocks) with a 10 us layout kernel on stream ``side``, beside the GEMM or after."""
    b = TraceBuilder()
    for s in range(3):
        t0 = s * 3000.0
        b.step(s + 1, t0, 3000)
        op = b.op("aten::mm", t0 + 10, 20)
        b.launch(op, "cudaLaunchKernel", t0 + 12, 5, kernel=GEMM, gpu_ts=t0 + 100, gpu_dur=1000)
        b.events[-1]["args"]["grid"] = [432, 1, 1]
        start = t0 + 150 if overlap else t0 + 1200
        for i, (name, dur) in enumerate(((LAYOUT, 10.0), (DISPATCH, 300.0), (COMBINE, 300.0))):
            o = b.op("moe::exchange", t0 + 40 + 20 * i, 15)
            b.launch(
                o,
                "cudaLaunchKernel",
                t0 + 42 + 20 * i,
                5,
                kernel=name,
                gpu_ts=start,
                gpu_dur=dur,
                stream=side,
                grid=[blocks, 1, 1],
            )
            start += dur
        b.runtime("cudaDeviceSynchronize", t0 + 120, 1900)
    return b


def _comm(trace: Trace) -> dict[str, bool]:
    k = trace.kernels
    return dict(zip(k["name"].astype(str), k["is_comm"].astype(bool), strict=True))


@pytest.mark.parametrize("fmt", LOADERS)
def test_a_side_stream_beside_compute_with_few_blocks_is_communication(fmt: str) -> None:
    trace = LOADERS[fmt](_moe())
    comm = _comm(trace)
    # not by name: the stream also runs a kernel no rule names (the dedicated-stream rule fails)
    assert comm[DISPATCH] and comm[COMBINE]
    assert not comm[LAYOUT] and not comm[GEMM]
    rep = analyze_trace(trace, None, Options(only=frozenset({"comm-overlap"})))
    notes = [q.what for q in rep.run.trace_quality]
    assert any(
        "6 kernel(s) of 2 name(s) (fastmoe::token_combine_kernel, fastmoe::token_dispatch_kernel) "
        "taken for communication by how they run" in n
        for n in notes
    ), notes
    # comm-overlap runs on them (hidden under the GEMM: nothing to report, nothing skipped)
    assert not rep.skipped and not rep.findings
    assert rep.run.bound is not None


@pytest.mark.parametrize(
    "kw",
    [
        {"side": 7},  # on the compute stream itself
        {"blocks": 1024},  # filling the GPU: computation
        {"overlap": False},  # alone on the GPU: nothing runs beside it
    ],
)
@pytest.mark.parametrize("fmt", LOADERS)
def test_otherwise_the_same_names_are_computation(fmt: str, kw: dict) -> None:
    trace = LOADERS[fmt](_moe(**kw))
    comm = _comm(trace)
    assert not comm[DISPATCH] and not comm[COMBINE]
    rep = analyze_trace(trace, None, Options(only=frozenset({"comm-overlap"})))
    assert not any("taken for communication" in q.what for q in rep.run.trace_quality)
    assert [s.id for s in rep.skipped] == ["comm-overlap"]


def test_deepep_under_its_own_namespace_is_named() -> None:
    # a DeepEP build nested in a namespace of its own, by name alone (any stream)
    from advisor.trace.commroles import family_of

    assert family_of("void dpsk::ep::internode::dispatch<8, 768>(int4*, float*)") == "DeepEP"
    assert family_of("void dpsk::ep::intranode::combine<bf16>(void*)") == "DeepEP"
    assert family_of("void sleep::step::dispatch()") != "DeepEP"
