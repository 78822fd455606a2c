"""Launch calls linked to their GPU work, per layout: by correlation id, through flow events
(ac2g: start on the call, finish on the kernel; or the other way round), else by External id."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from advisor.derive.quality import trace_quality
from advisor.trace import load_trace
from tests.conftest import shared_trace
from tests.tracebuilder import TraceBuilder

KERNEL = "Cijk_Ailk_Bljk_BBS_BH_MT256x128x64_MI16x16x16x1_ISA942_WG64_4_1"


def _layout(kind: str, n: int = 3) -> TraceBuilder:
    """n aten::mm calls, each launching one kernel, linked the way ``kind`` says."""
    b = TraceBuilder(cc=None)
    for i in range(n):
        t0 = 100.0 * i
        op = b.op("aten::mm", t0, 20, dims=[[256, 512], [512, 256]], types=["c10::BFloat16"] * 2)
        rt, k = b.launch(
            op, "hipExtModuleLaunchKernel", t0 + 5, 3, kernel=KERNEL, gpu_ts=t0 + 40, gpu_dur=50
        )
        fid = 500 + i
        if kind != "correlation":
            for ev in (rt, k):
                del ev["args"]["correlation"]
        if kind == "flow":
            _flow(b, "s", fid, rt)
            _flow(b, "f", fid, k)
        if kind == "flow-reversed":  # some writers put the start on the GPU side
            _flow(b, "s", fid, k)
            _flow(b, "f", fid, rt)
        if kind in ("external", "flow", "flow-reversed"):
            # the call and its kernel share an External id that no op has (as ROCm writes it)
            rt["args"]["External id"] = k["args"]["External id"] = fid
        if kind.startswith("flow"):
            k["args"]["External id"] = 0  # nothing but the flow joins them
    return b


def _flow(b: TraceBuilder, ph: str, fid: int, at: dict[str, Any]) -> None:
    ev = {
        "ph": ph,
        "id": fid,
        "pid": at["pid"],
        "tid": at["tid"],
        "ts": at["ts"],
        "cat": "ac2g",
        "name": "ac2g",
    }
    if ph == "f":
        ev["bp"] = "e"
    b.events.append(ev)


@pytest.mark.parametrize("kind", ["correlation", "flow", "flow-reversed", "external"])
def test_each_layout_links_every_kernel(kind: str) -> None:
    t = _layout(kind).load()
    li = t.kernels["launch_idx"].to_numpy()
    assert (li >= 0).all()
    assert list(t.runtime["name"].astype(str).iloc[li]) == ["hipExtModuleLaunchKernel"] * 3
    # each kernel to its own call, in order
    assert list(np.argsort(t.runtime["ts_ns"].to_numpy()[li])) == [0, 1, 2]
    assert not [q for q in trace_quality(t) if q.kind == "lost-launch"]


def test_nothing_links_without_evidence() -> None:
    b = _layout("external")
    for ev in b.events:
        if ev["cat"] == "kernel":
            ev["args"]["External id"] = 0
    assert (b.load().kernels["launch_idx"].to_numpy() < 0).all()


def test_a_flow_never_overrules_correlation() -> None:
    # a kernel whose call was not recorded (launched before the window) keeps no launch even
    # when a flow's start falls inside another call
    b = TraceBuilder(cc=(9, 0), gpu_name="NVIDIA H100 80GB HBM3")
    op = b.op("aten::add", 0, 20)
    rt, _ = b.launch(op, "cudaLaunchKernel", 5, 3, kernel="k_now", gpu_ts=30, gpu_dur=5)
    old = b.kernel("k_before", 10, 5, corr=999)
    _flow(b, "s", 999, rt)
    _flow(b, "f", 999, old)
    t = b.load()
    names = t.kernels["name"].astype(str).to_numpy()
    assert t.kernels["launch_idx"].to_numpy()[names == "k_before"][0] == -1


@pytest.mark.shared
@pytest.mark.parametrize("name", ["gemm_01_compute_few_tiles", "gemm_02_compute_non_pow2"])
def test_shared_flow_only_traces(name: str) -> None:
    t = load_trace(shared_trace(f"tracelens/microbench/{name}.json.gz"))
    k = t.kernels
    assert (k["correlation"].to_numpy() < 0).all()  # the layout: no correlation ids at all
    assert len(k) and (k["launch_idx"].to_numpy() >= 0).all()
    assert not [q for q in trace_quality(t) if q.kind == "lost-launch"]
    ops = t.runtime["op_idx"].to_numpy()[k["launch_idx"].to_numpy()]
    assert set(t.cpu_ops["name"].astype(str).to_numpy()[ops]) == {"aten::mm"}
