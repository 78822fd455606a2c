"""Communication kernels by library family and stream use (advisor/trace/commroles.py), and the
plugin API that extends the table (advisor.detect.registry.comm_kernels)."""

from __future__ import annotations

import pytest

from advisor.derive.comm import comm_stats
from advisor.trace import commroles
from tests.tracebuilder import TraceBuilder

NAMES = {
    "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)": 20,
    "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*)": 21,
    "void deep_ep::internode_ll::combine<false, 7168>(void*, void*)": 21,
    "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*)": 7,
    "void c10d::symmetric_memory::two_shot_all_reduce_kernel<float, 16, 8>(float**)": 7,
    "multimem_all_reduce_kernel": 7,
    "one_shot_all_reduce_kernel": 7,
}


def _trace(extra: dict[str, int]) -> TraceBuilder:
    b = TraceBuilder()
    b.step(1, 0, 10_000)
    t = 100.0
    for name, stream in {**NAMES, **extra}.items():
        op = b.op("aten::op", t - 20, 15)
        b.launch(
            op, "cudaLaunchKernel", t - 15, 5, kernel=name, gpu_ts=t, gpu_dur=50, stream=stream
        )
        t += 100
    op = b.op("aten::mm", t, 15)
    b.launch(
        op, "cudaLaunchKernel", t + 5, 5, kernel="volta_sgemm_128x64_nn", gpu_ts=t + 20, gpu_dur=500
    )
    return b


def _comm(trace) -> dict[str, bool]:  # type: ignore[no-untyped-def]
    k = trace.kernels
    return dict(zip(k["name"].astype(str), k["is_comm"].astype(bool), strict=True))


def test_library_families_are_communication() -> None:
    comm = _comm(_trace({}).load())
    assert all(comm[n] for n in NAMES)  # NCCL, DeepEP, vLLM custom AR, symmetric memory
    assert not comm["volta_sgemm_128x64_nn"]


def test_generic_names_count_only_on_a_dedicated_stream() -> None:
    # an all-to-all kernel alone on its stream is communication; the same kind of name on the
    # compute stream, beside a GEMM, is not
    trace = _trace({"all_to_all_kernel_v2": 30, "moe_dispatch_kernel": 7}).load()
    comm = _comm(trace)
    assert comm["all_to_all_kernel_v2"] and not comm["moe_dispatch_kernel"]
    cs = comm_stats(trace)
    assert cs is not None and cs.comm_ns > 0  # every figure built on is_comm sees them


def test_family_of_names_the_rule() -> None:
    assert commroles.family_of("ncclKernel_AllReduce_RING_LL_Sum_float") == "NCCL/RCCL"
    assert commroles.family_of("void deep_ep::intranode::combine<bf16>()") == "DeepEP"
    assert commroles.family_of("volta_sgemm_128x64_nn") is None


def test_a_plugin_extends_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    from advisor.analysis.pipeline import analyze_trace
    from advisor.detect.registry import comm_kernels

    monkeypatch.setattr(commroles, "_added", [])
    trace = _trace({"mylib_ring_exchange_kernel": 7}).load()
    assert not _comm(trace)["mylib_ring_exchange_kernel"]
    comm_kernels("MyLib", r"^mylib_\w*exchange")
    assert commroles.family_of("mylib_ring_exchange_kernel") == "MyLib"
    # a trace loaded before the plugin registered its rule is classified again by the analysis
    analyze_trace(trace, None)
    assert _comm(trace)["mylib_ring_exchange_kernel"]
    # and a trace loaded after it from the start
    assert _comm(_trace({"mylib_ring_exchange_kernel": 7}).load())["mylib_ring_exchange_kernel"]
    with pytest.raises(Exception):  # noqa: B017 (re.error: a bad pattern fails at registration)
        comm_kernels("Broken", r"(")
