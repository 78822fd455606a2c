"""Each collective's effective bandwidth (advisor/derive/commbw.py, findings.json
``views.collectives``, ``Report.collectives``): bytes from the collective's metadata, transfer
and waiting apart, bus bandwidth by algorithm against the link's peak; checked by hand on built
traces and on the HTA traces with NCCL metadata."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from typing import Any

import pytest

from advisor.analysis.pipeline import Options, analyze_trace
from advisor.api import Report as ApiReport
from advisor.derive.commbw import collectives, factor, message_bytes
from advisor.output.html import render_html
from advisor.trace import load_trace
from advisor.trace.model import Trace
from tests.conftest import shared_trace
from tests.kineto2021 import load_2021
from tests.tracebuilder import TraceBuilder

NCCL_AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
NCCL_AG = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
LOADERS: dict[str, Callable[[TraceBuilder], Trace]] = {
    "current": lambda b: b.load(),
    "kineto-2021": load_2021,
}


def _meta(name: str, n_in: int, n_out: int, dtype: str, group: int) -> dict[str, Any]:
    return {
        "Collective name": name,
        "In msg nelems": n_in,
        "Out msg nelems": n_out,
        "dtype": dtype,
        "Group size": group,
    }


def _job(
    durs: tuple[float, ...] = (100.0, 150.0, 100.0),
    on_kernel: bool = True,
    devices: int = 1,
    world: int = 4,
    kernel: str = NCCL_AR,
    meta: dict[str, Any] | None = None,
) -> TraceBuilder:
    """2 steps: all-reduces of 1,048,576 floats (4 MiB) over 4 ranks lasting ``durs`` us, their
    metadata on the kernel (torch >= 2.3) or on the launching record_param_comms op."""
    b = TraceBuilder(rank=0, world_size=world)
    for _ in range(devices - 1):
        b.header["deviceProperties"].append(dict(b.header["deviceProperties"][0]))
    meta = _meta("allreduce", 1_048_576, 1_048_576, "Float", 4) if meta is None else meta
    for s in range(2):
        t0 = s * 1000.0
        b.step(s + 1, t0, 1000)
        gpu = t0 + 100
        for i, d in enumerate(durs):
            ar = b.op("c10d::allreduce_", t0 + 10 + 30 * i, 25)
            rpc = b.op("record_param_comms", t0 + 11 + 30 * i, 20, **({} if on_kernel else meta))
            _, k = b.launch(
                rpc, "cudaLaunchKernel", t0 + 12 + 30 * i, 5, kernel=kernel, gpu_ts=gpu,
                gpu_dur=d, stream=21,
            )  # fmt: skip
            assert ar and k
            if on_kernel:
                k["args"].update(meta)
            gpu += d + 10
        b.runtime("cudaDeviceSynchronize", t0 + 120, 800)
    return b


def _only(trace: Trace):  # type: ignore[no-untyped-def]
    (c,) = collectives(trace)
    return c


@pytest.mark.parametrize("fmt", LOADERS)
@pytest.mark.parametrize("on_kernel", [True, False])
def test_all_reduce_by_hand(fmt: str, on_kernel: bool) -> None:
    c = _only(LOADERS[fmt](_job(on_kernel=on_kernel)))
    # 4 MiB a call; the shortest of the same size (100 us) is the transfer: 6 calls, 600 us of
    # transfer, 100 us waiting (the 150 us instances' extra 50 us)
    assert (c.kind, c.ranks, c.calls, c.dtype) == ("all_reduce", 4, 6, "Float")
    assert c.bytes_per_call == 4 * 1_048_576
    assert c.time_ns == 700_000 and c.wait_ns == 100_000
    algbw = 4 * 1_048_576 / 100_000  # bytes per ns = GB/s: 41.94
    assert c.algbw_gbs == pytest.approx(algbw)
    assert c.busbw_gbs == pytest.approx(algbw * 2 * 3 / 4)  # 2(n-1)/n: 62.9 GB/s
    # the A100 SXM's NVLink: 300 GB/s per direction; one GPU listed: the note says what it
    # cannot tell
    assert (c.link, c.link_gbs) == ("NVLink", 300.0)
    assert c.link_pct == pytest.approx(100 * algbw * 1.5 / 300)
    assert "lists one GPU" in c.note


def test_all_gather_counts_its_whole_output() -> None:
    meta = _meta("_allgather_base", 1_048_576, 4_194_304, "BFloat16", 4)
    c = _only(_job(durs=(200.0,), kernel=NCCL_AG, meta=meta).load())
    assert c.kind == "all_gather" and c.bytes_per_call == 2 * 4_194_304
    assert c.busbw_gbs == pytest.approx(2 * 4_194_304 / 200_000 * 3 / 4)  # (n-1)/n


def test_a_group_beyond_the_machine_runs_over_the_network() -> None:
    meta = _meta("allreduce", 1_048_576, 1_048_576, "Float", 16)
    c = _only(_job(devices=8, world=16, meta=meta).load())
    assert c.ranks == 16 and c.link == "network (InfiniBand/RoCE)" and c.link_gbs == 50.0
    assert "assumed" in c.note
    assert c.busbw_gbs == pytest.approx(4 * 1_048_576 / 100_000 * 2 * 15 / 16)


def test_one_rank_moves_nothing_and_no_sizes_say_so() -> None:
    # DDP on one rank: NCCL launches no kernel; the calls and bytes are shown, no bandwidth
    b = TraceBuilder(rank=0, world_size=1)
    b.step(1, 0, 1000)
    for i in range(3):
        b.op("record_param_comms", 10 + 30 * i, 20, **_meta("allreduce", 256, 256, "Float", 1))
    (c,) = collectives(b.load())
    assert (c.kind, c.ranks, c.calls, c.bytes_per_call) == ("all_reduce", 1, 3, 1024.0)
    assert c.time_ns is None and c.busbw_gbs is None and "one rank" in c.note
    # kernels without metadata (torch before 2.3 without record_param_comms): time, no sizes
    d = _only(_job(meta={}, on_kernel=True).load())
    assert d.kind == "all_reduce" and d.dtype == "f32"  # from the kernel's name
    assert d.bytes_per_call is None and d.algbw_gbs is None and "sizes not in" in d.note


def test_factors() -> None:
    assert factor("all_reduce", 8) == 1.75 and factor("reduce_scatter", 8) == 0.875
    assert factor("broadcast", 8) == 1.0 and factor("all_reduce", 1) == 0.0
    assert message_bytes("reduce_scatter", 4096, 1024, "Half") == 8192
    assert message_bytes("all_reduce", 10, 10, "NoSuchType") is None


def test_table_in_the_report_json_and_api() -> None:
    rep = analyze_trace(_job().load(), None, Options(only=frozenset({"comm-overlap"})))
    (row,) = rep.views.collectives
    assert row.collective == "all_reduce" and row.busbw_gbs == pytest.approx(62.91, abs=0.01)
    assert json.loads(rep.to_json())["views"]["collectives"][0]["link"] == "NVLink"
    df = ApiReport(rep).collectives
    assert list(df["collective"]) == ["all_reduce"] and df["link_pct"].iloc[0] == 21.0
    html = render_html(rep, {"generated_at": "x"})
    table = html.split('id="collectives"', 1)[1].split("</table>", 1)[0]
    assert "all-reduce" in table and "62.9 GB/s" in table and "NVLink 300 GB/s" in table


# ---- the HTA traces with NCCL metadata, checked by hand from their raw JSON


def _raw_all_reduces(rel: str) -> list[tuple[int, float, int]]:
    """(elements, duration us, stream) of every NCCL all-reduce kernel inside a ProfilerStep."""
    ev = json.load(gzip.open(shared_trace(rel)))["traceEvents"]
    steps = [
        (e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("name", "").startswith("ProfilerStep#")
    ]
    return [
        (e["args"]["In msg nelems"], e["dur"], e["args"]["stream"])
        for e in ev
        if e.get("cat") == "kernel"
        and e.get("args", {}).get("Collective name") == "allreduce"
        and any(a <= e["ts"] < b for a, b in steps)
    ]  # fmt: skip


@pytest.mark.shared
def test_nccl_parser_config_by_hand() -> None:
    rel = "hta/nccl_parser_config/nccl_data.json.gz"
    raw = _raw_all_reduces(rel)
    # per size and stream the shortest instance is the transfer
    best: dict[tuple[int, int], float] = {}
    for n, d, s in raw:
        best[(n, s)] = min(best.get((n, s), d), d)
    nbytes = sum(4 * n for n, _, _ in raw)
    transfer_us = sum(best[(n, s)] for n, _, s in raw)
    c = next(c for c in collectives(load_trace(shared_trace(rel))) if c.kind == "all_reduce")
    assert c.calls == len(raw) == 15 and c.ranks == 2 and c.dtype == "Float"
    assert c.algbw_gbs == pytest.approx(nbytes / (transfer_us * 1e3), rel=1e-3)  # 9.16 GB/s
    assert c.busbw_gbs == pytest.approx(c.algbw_gbs)  # 2(n-1)/n = 1 for two ranks
    assert c.wait_ns / 1e3 == pytest.approx(sum(d for _, d, _ in raw) - transfer_us, abs=1)
    assert c.link == "NVLink" and c.link_pct == pytest.approx(100 * c.algbw_gbs / 300)
    assert {x.kind for x in collectives(load_trace(shared_trace(rel)))} == {
        "all_reduce",
        "broadcast",
    }


@pytest.mark.shared
def test_ns_resolution_trace_one_rank() -> None:
    rel = "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    rows = {c.kind: c for c in collectives(load_trace(shared_trace(rel)))}
    # DDP on one rank: record_param_comms carries the sizes; NCCL ran no kernel
    ar = rows["all_reduce"]
    assert ar.ranks == 1 and ar.calls == 25 and ar.dtype == "Float"
    assert ar.bytes_per_call == 4 * 6_563_840 and ar.busbw_gbs is None
    assert ar.note == "one rank: nothing crosses a link (NCCL ran no kernel)"
    assert set(rows) == {"all_reduce", "broadcast"}


def test_kernels_without_metadata_are_named_by_their_family() -> None:
    # a symmetric-memory all-reduce kernel in an anonymous namespace, no metadata
    kern = (
        "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*)"
    )
    c = _only(_job(meta={}, kernel=kern).load())
    assert c.kind == "all_reduce" and c.ranks == 4 and c.bytes_per_call is None
