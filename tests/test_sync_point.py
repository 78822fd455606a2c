"""sync-point: host-device syncs, the GPU idle they cause, CPU-only latent finding."""

from __future__ import annotations

import pytest
from advisor.detectors._syncs import sync_events

from advisor.trace import load_trace
from tests.detector_helpers import analyze, finding, skip_reason
from tests.tracebuilder import TraceBuilder

DTOH = ("Memcpy DtoH (Device -> Pageable)", 4)


def _item_steps(n: int = 3, wrap: str | None = None) -> TraceBuilder:
    """Per 1 ms step: a 400 us kernel, then `.item()` waits for it, then the next launch at
    +700 us. The sync returns at +427 us: the GPU idles 283 us (< the 380 us it waited)."""
    b = TraceBuilder()
    for s in range(n):
        t = s * 1000.0
        b.step(s + 1, t, 1000)
        mm = b.op("aten::mm", t + 10, 20)
        b.launch(mm, "cudaLaunchKernel", t + 12, 5, kernel="k_mm", gpu_ts=t + 20, gpu_dur=400)
        b.frame("train.py", 42, "train_step", t + 39, 395)
        if wrap:
            b.op(wrap, t + 39.5, 392)
        item = b.op("aten::item", t + 40, 390)
        lsd = b.op("aten::_local_scalar_dense", t + 41, 388)
        b.launch(lsd, "cudaMemcpyAsync", t + 42, 360, memcpy=DTOH, gpu_ts=t + 421, gpu_dur=2)
        b.runtime("cudaStreamSynchronize", t + 403, 24, op=lsd)  # same op: one sync event
        assert item
        add = b.op("aten::add", t + 700, 20)
        b.launch(add, "cudaLaunchKernel", t + 702, 5, kernel="k_add", gpu_ts=t + 710, gpu_dur=50)
    return b


def test_item_sync_costs_the_idle_gap_it_causes() -> None:
    rep = analyze(_item_steps().load(), "sync-point")
    f = finding(rep, "sync-point")
    assert f is not None
    # replayed without the sync the host no longer waits the 380 us; each step's GPU work
    # (452 us) stays below its host time (620 us), so the whole wait is saved
    assert f.est_savings_ms == pytest.approx(0.38, abs=0.005)
    assert f.locations[0].file == "train.py" and f.locations[0].line == 42
    assert f.locations[0].count == 3
    assert f.evidence[0].count == 3 and "aten::item" in f.evidence[0].what
    assert "cudaMemcpyAsync+cudaStreamSynchronize" in f.evidence[0].what
    assert "1 host-device sync" in f.summary and "item" in f.recommendation
    assert f.severity == "high"  # 28% of the 1 ms step


def test_branch_and_explicit_syncs_are_classified() -> None:
    b = _item_steps(n=1, wrap="aten::is_nonzero")
    b.runtime("cudaDeviceSynchronize", 900, 30)
    b.runtime("cudaEventSynchronize", 950, 10)
    ev = sync_events(b.load())
    assert sorted(ev["kind"]) == ["branch", "explicit-device", "explicit-event"]


def test_already_idle_gpu_and_host_to_device_copies_claim_nothing() -> None:
    b = TraceBuilder()
    for s in range(3):
        t = s * 1000.0
        b.step(s + 1, t, 1000)
        mm = b.op("aten::mm", t + 10, 20)
        b.launch(mm, "cudaLaunchKernel", t + 12, 5, kernel="k", gpu_ts=t + 20, gpu_dur=50)
        # a stream sync long after the GPU finished: returns at once
        b.runtime("cudaStreamSynchronize", t + 500, 3)
        # a blocking host-to-device copy: blocking-copy's finding, not this one
        cp = b.op("aten::copy_", t + 600, 100)
        b.launch(
            cp,
            "cudaMemcpyAsync",
            t + 601,
            50,
            memcpy=("Memcpy HtoD (Pageable -> Device)", 1024),
            gpu_ts=t + 640,
            gpu_dur=10,
        )
        b.runtime("cudaStreamSynchronize", t + 652, 40, op=cp)
        # a non-blocking copy into pinned memory
        cp2 = b.op("aten::copy_", t + 800, 10)
        b.launch(
            cp2,
            "cudaMemcpyAsync",
            t + 801,
            5,
            memcpy=("Memcpy DtoH (Device -> Pinned)", 4),
            gpu_ts=t + 810,
            gpu_dur=2,
        )
    tr = b.load()
    assert list(sync_events(tr)["kind"]) == ["explicit-stream"] * 3
    assert finding(analyze(tr, "sync-point"), "sync-point") is None


def test_gpu_trace_without_runtime_events_is_skipped() -> None:
    b = TraceBuilder()
    b.step(1, 0, 100)
    b.kernel("k", 10, 5)
    rep = analyze(b.load(), "sync-point")
    assert "runtime" in (skip_reason(rep, "sync-point") or "")


def test_cpu_only_item_calls_are_latent_info() -> None:
    b = TraceBuilder(cc=None)
    b.step(1, 0, 1000)
    b.frame("train.py", 7, "loop", 5, 900)
    for i in range(4):
        b.op("aten::item", 10 + i * 100, 10)
        b.op("aten::_local_scalar_dense", 11 + i * 100, 8)
    b.op("aten::nonzero", 600, 20)
    f = finding(analyze(b.load(), "sync-point"), "sync-point")
    assert f is not None and f.severity == "info" and f.est_savings_ms == 0
    assert "5 call(s) per step" in f.summary
    assert f.locations[0].line == 7


def test_cpu_only_optimizer_step_counter_reads_are_not_reported() -> None:
    """torch's single-tensor optimizers read their CPU step counter with .item(): no sync."""
    b = TraceBuilder(cc=None)
    b.step(1, 0, 1000)
    b.frame("train.py", 7, "loop", 5, 900)
    b.annotation("Optimizer.step#AdamW.step", 100, 300)
    for i in range(4):
        b.op("aten::item", 110 + i * 50, 10)
        b.op("aten::_local_scalar_dense", 111 + i * 50, 8)
    assert finding(analyze(b.load(), "sync-point"), "sync-point") is None
    b.op("aten::item", 600, 10)  # the user's own .item() outside the optimizer still counts
    f = finding(analyze(b.load(), "sync-point"), "sync-point")
    assert f is not None and "1 call(s) per step" in f.summary


def test_cpu_only_without_scalar_reads_has_no_finding() -> None:
    b = TraceBuilder(cc=None)
    b.step(1, 0, 100)
    b.op("aten::add", 1, 10)
    assert finding(analyze(b.load(), "sync-point"), "sync-point") is None


def test_op_of_a_runtime_call_found_by_time_when_external_id_is_wrong(tmp_path) -> None:
    b = _item_steps(n=1)
    for ev in b.events:  # 2.0-era traces: runtime External id = correlation id
        if ev["cat"] == "cuda_runtime":
            ev["args"]["External id"] = ev["args"]["correlation"] + 1000
    t = load_trace(b.write(tmp_path / "t.json"))
    names = t.cpu_ops["name"].astype(str).tolist()
    assert [names[i] for i in t.runtime["op_idx"]] == [
        "aten::mm",
        "aten::_local_scalar_dense",
        "aten::_local_scalar_dense",
        "aten::add",
    ]
