"""Top kernels and top operators (views.kernels / views.ops, advisor.analysis.toptables) and their
report tables: figures, the launching op, names verbatim and escaped."""

from __future__ import annotations

from advisor.analysis.pipeline import analyze_trace
from advisor.analysis.toptables import merge_kernels, top_kernels, top_ops
from advisor.output.html import render_html
from advisor.viewdata import KernelRow
from tests.report_samples import EVIL, KERNEL, gpu_builder

NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float"


def test_top_kernels_figures_and_launching_op() -> None:
    rows = top_kernels(gpu_builder().load())
    assert [r.name for r in rows] == [KERNEL, NCCL]
    k = rows[0]
    assert (k.count, k.total_ms, k.mean_us) == (3, 1.2, 400.0)
    assert k.share_pct == 88.89 and k.op == "aten::mm"
    assert rows[1].op == "c10d::allreduce_" and rows[1].share_pct == 11.11


def test_top_ops_self_gpu_and_share() -> None:
    trace = gpu_builder().load()
    rows = {r.name: r for r in top_ops(trace)}
    mm = rows["aten::mm"]
    assert mm.count == 3 and mm.total_ms == 0.17 and mm.gpu_ms == 1.2
    assert mm.share_pct == round(100 * 0.17 / 2.5, 2)  # of the 2.5 ms of steps
    assert not any(n.startswith("ProfilerStep#") for n in rows)


def test_legacy_profilerstep_operators_are_not_ops(builder) -> None:
    b = builder()
    b.op("ProfilerStep#1", 0, 1000)  # 2020-era traces write the steps as operators
    b.step(1, 0, 1000)
    b.op("aten::add", 10, 100)
    names = [r.name for r in top_ops(b.load())]
    assert names == ["aten::add"]


def test_names_are_verbatim_in_views_and_escaped_in_html() -> None:
    trace = gpu_builder(kernel_name=EVIL).load()
    report = analyze_trace(trace, None)
    assert report.views.kernels[0].name == EVIL
    html = render_html(report, {"generated_at": "x"})
    table = html.split('id="top-kernels"', 1)[1].split("</table>", 1)[0]
    assert EVIL not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in table


def _k(name: str, count: int, total_ms: float, op: str | None, source: str | None) -> KernelRow:
    return KernelRow(name, count, total_ms, 0.0, 0.0, op=op, source=source)


def test_merge_kernels_sums_over_ranks() -> None:
    a = [_k("k1", 2, 4.0, "aten::mm", None), _k("k2", 1, 1.0, None, "t.py:3")]
    b = [_k("k1", 2, 2.0, None, "t.py:9")]
    rows = merge_kernels([a, b])
    assert rows[0] == KernelRow(
        name="k1",
        count=4,
        total_ms=6.0,
        op="aten::mm",
        source="t.py:9",
        mean_us=1500.0,
        share_pct=85.71,
    )
    assert rows[1].name == "k2" and rows[1].share_pct == 14.29
