"""One cause, one row (advisor/analysis/merge.py): findings that claim the same events or the
same kernel time share one row of the ranked table."""

from __future__ import annotations

from advisor.analysis.merge import one_row_per_cause
from advisor.analysis.pipeline import Options, analyze_trace
from advisor.derive.steps import steady_trace
from advisor.detect.draft import Draft
from advisor.detect.thresholds import Thresholds
from advisor.replay.fixes import ScaleGpu
from advisor.replay.whatif import whatif
from tests.tracebuilder import TraceBuilder

DTOH = ("Memcpy DtoH (Device -> Pageable)", 4 << 20)


def _mid_step_reads(n: int = 3) -> TraceBuilder:
    """Training steps of 4 ms: 20 forward launches, a 4 MB `.cpu()` read in the middle (waits
    for the GPU), then 20 backward launches after 300 us of host work."""
    b = TraceBuilder()
    for s in range(n):
        t = s * 4000.0
        b.step(s + 1, t, 4000)
        for i in range(20):
            op = b.op("aten::mm", t + 10 + i * 8, 6)
            b.launch(op, "cudaLaunchKernel", t + 11 + i * 8, 4, "k_fwd", t + 20 + i * 60, 60)
        to = b.op("aten::to", t + 200, 1100)
        cp = b.op("aten::copy_", t + 201, 1098)
        b.launch(cp, "cudaMemcpyAsync", t + 202, 1095, memcpy=DTOH, gpu_ts=t + 1220, gpu_dur=70)
        assert to
        for i in range(20):
            op = b.op("MmBackward0", t + 1600 + i * 8, 6)
            b.launch(op, "cudaLaunchKernel", t + 1601 + i * 8, 4, "k_bwd", t + 1610 + i * 60, 60)
    return b


def test_sync_point_and_blocking_copy_on_one_read_are_one_row() -> None:
    rep = analyze_trace(_mid_step_reads().load(), None, Options())
    alone = {
        i: analyze_trace(_mid_step_reads().load(), None, Options(only=frozenset([i])))
        for i in ("sync-point", "blocking-copy")
    }
    assert all(r.findings and r.findings[0].est_savings_ms > 0 for r in alone.values())
    rows = [f for f in rep.findings if f.id in alone]
    assert len(rows) == 1, [f.id for f in rep.findings]
    (row,) = rows
    assert [r.id for r in row.related] == [i for i in alone if i != row.id]
    assert row.related[0].shared_pct >= 50
    # the row is led by the fix that saves the most on that read
    assert row.est_savings_ms == max(r.findings[0].est_savings_ms for r in alone.values())
    assert "related" in row.to_dict()


def _kernels(n_steps: int = 3) -> TraceBuilder:
    """Steps of 1 ms, GPU-bound: kernels a (400 us), b (300 us), c (100 us) back to back, which
    the host then waits for."""
    b = TraceBuilder()
    for s in range(n_steps):
        t = s * 1000.0
        b.step(s + 1, t, 1000)
        starts = {"a": 50, "b": 450, "c": 750}
        for j, (name, dur) in enumerate((("a", 400), ("b", 300), ("c", 100))):
            op = b.op("aten::mm", t + 5 + j * 10, 8)
            b.launch(op, "cudaLaunchKernel", t + 6 + j * 10, 4, name, t + starts[name], dur)
        b.runtime("cudaDeviceSynchronize", t + 40, 815)
    return b


def _draft(trace, id_: str, rows: list[int]) -> Draft:  # type: ignore[no-untyped-def]
    rep = whatif(trace, ScaleGpu(kernels=rows, speedup=2.0))
    return Draft(id_, id_, rep.ms, "medium", id_, "", "", saving=rep)


def test_claims_on_the_same_kernels_merge_and_partial_ones_are_valued_apart() -> None:
    trace = steady_trace(_kernels().load())
    names = trace.kernels["name"].astype(str).to_numpy()
    rows = {n: [i for i, m in enumerate(names) if m == n] for n in "abc"}
    th = Thresholds({})
    narrow = _draft(trace, "misaligned-dims", rows["a"])
    wide = _draft(trace, "kernel-efficiency", rows["a"] + rows["c"])
    other = _draft(trace, "fp32-matmul", rows["b"])
    out = one_row_per_cause(trace, [wide, narrow, other], th)
    # a is 400 of wide's 500 us: the same kernel time, one row led by the larger saving
    assert sorted(d.id for d in out) == ["fp32-matmul", "kernel-efficiency"]
    lead = next(d for d in out if d.id == "kernel-efficiency")
    assert [r.id for r in lead.related] == ["misaligned-dims"]
    assert next(d for d in out if d.id == "fp32-matmul").est_savings_ms == other.est_savings_ms
    # wide claims a and b (b is 300 of 700 us): it keeps a row valued on a alone
    wide = _draft(trace, "kernel-efficiency", rows["a"] + rows["b"])
    out = one_row_per_cause(trace, [wide, other], th)
    assert sorted(d.id for d in out) == ["fp32-matmul", "kernel-efficiency"]
    rest = next(d for d in out if d.id == "kernel-efficiency")
    assert 0 < rest.est_savings_ms < wide.est_savings_ms
    assert "fp32-matmul" in rest.assumptions[-1]


def test_diff_does_not_call_a_finding_listed_under_another_row_resolved() -> None:
    from advisor.findings import Finding, Related
    from advisor.multirank.diff import findings_diff

    def f(id_: str, ms: float, related: tuple[Related, ...] = ()) -> Finding:
        return Finding(id_, id_, "high", ms, 10.0, "medium", "s", "r", "", related=related)

    before = [f("gpu-idle", 48.1), f("host-overhead", 48.6)]
    after = [f("host-overhead", 42.7, (Related("gpu-idle", "t", 42.3, "s", 99.4),))]
    d = findings_diff(before, after)
    assert d["resolved"] == [] and [e["id"] for e in d["changed"]] == ["gpu-idle", "host-overhead"]
    # shown with the figure its row lists in B
    assert d["changed"][0]["listed_under"] == {"a": None, "b": "host-overhead"}
    assert d["changed"][0]["est_savings_ms"] == {"a": 48.1, "b": 42.3}
