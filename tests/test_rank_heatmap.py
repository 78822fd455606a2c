"""Many ranks: who stands out (advisor.multirank.rankstats) and the report's heatmap in place of one row
per rank above 16 ranks (advisor.output.rankmap)."""

from __future__ import annotations

import dataclasses

import numpy as np

from advisor import record
from advisor.multirank.rankstats import ranks_summary
from advisor.output.html import render_html
from advisor.output.rankmap import HEATMAP_ABOVE
from advisor.output.viewmodel import build_viewmodel
from advisor.runfacts import RankRow, Ranks
from tests.report_samples import gpu_builder, sample_report


def _ranks(n: int, slow: int | None = None, chatty: int | None = None) -> list[RankRow]:
    rng = np.random.default_rng(0)
    rows = []
    for r in range(n):
        step = 100.0 * (1 + 0.004 * rng.standard_normal())
        comm = 20.0 + 0.3 * rng.standard_normal()
        lag = 0.0
        if r == slow:
            step, lag = 112.0, 11.5
        if r == chatty:
            comm = 35.0
        rows.append(
            RankRow(
                rank=r,
                trace=f"trace.rank{r}.json.gz",
                steps=5,
                step_ms_median=round(step, 3),
                gpu_busy_pct=80.0,
                comm_pct=comm,
                comm_overlap_pct=50.0,
                exposed_comm_ms_per_step=2.0,
                lag_ms_per_step=lag,
                findings=3,
            )
        )
    return rows


def test_outliers_and_straggler_are_named() -> None:
    s = record.dump(ranks_summary(_ranks(256, slow=77, chatty=200), straggler_found=True))
    m = s["metrics"]
    assert [o["rank"] for o in m["step_ms_median"]["outliers"]] == [77]
    assert [o["rank"] for o in m["comm_pct"]["outliers"]] == [200]
    assert [o["rank"] for o in m["lag_ms_per_step"]["outliers"]] == [77]
    assert s["straggler"] == {"rank": 77, "lag_ms_per_step": 11.5}
    assert m["step_ms_median"]["max_rank"] == 77


def test_even_ranks_name_nobody() -> None:
    s = ranks_summary(_ranks(64), straggler_found=False)
    assert all(not m.outliers for m in s.metrics.values()) and s.straggler is None
    # no straggler finding: the largest lag is not called a straggler
    assert ranks_summary(_ranks(64, slow=3), straggler_found=False).straggler is None


def _report(n: int, **kw):
    rep = sample_report(gpu_builder().load())
    ranks = _ranks(n, **kw)
    group = Ranks(ranks=tuple(ranks), ranks_summary=ranks_summary(ranks, straggler_found=True))
    run = dataclasses.replace(rep.run, ranks=group, world_size=n)
    return dataclasses.replace(rep, run=run)


def test_many_ranks_get_a_heatmap_and_a_short_table() -> None:
    vm = build_viewmodel(_report(256, slow=77, chatty=200), "2026-01-01 00:00")
    hm = vm["rankmap"]
    assert hm["ranks"] == 256 and [g["label"] for g in hm["grids"]] == [
        "Step time",
        "Communication share",
        "Lag per step",
    ]
    assert all(len(g["cells"]) == 256 for g in hm["grids"])
    step_cells = hm["grids"][0]["cells"]
    assert step_cells[77]["cls"].startswith("hm7") and "hm-out" in step_cells[77]["cls"]
    assert "hm-strag" in hm["grids"][2]["cells"][77]["cls"]
    assert "rank 77: step time 112.00 ms" in step_cells[77]["title"]
    shown = {int(r["rank"]) for r in vm["ranks"]}
    assert {77, 200} <= shown and len(shown) <= 8
    assert vm["ranks_short"].startswith("Straggler: rank 77")
    html = render_html(_report(256, slow=77, chatty=200), {"generated_at": "x"})
    assert 'id="rank-heatmap"' in html and html.count('<rect class="hm') == 3 * 256


def test_few_ranks_keep_one_row_each() -> None:
    vm = build_viewmodel(_report(HEATMAP_ABOVE, slow=3), "2026-01-01 00:00")
    assert vm["rankmap"] is None and len(vm["ranks"]) == HEATMAP_ABOVE
