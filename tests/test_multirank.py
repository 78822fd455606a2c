"""Multi-rank analysis: merge, straggler (positive, negative, missing data), worker planning."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from advisor import record
from advisor.analysis.pipeline import Options
from advisor.multirank.analyze import analyze_files, plan_workers, raw_size
from tests.conftest import HANG_S, shared_trace
from tests.mr_helpers import rank_builder, write_ranks
from tests.tracebuilder import TraceBuilder

MiB = 1024**2
GiB = 1024**3


def _analyze(tmp_path: Path, builders: dict, jobs: int = 1, **opts):  # type: ignore[no-untyped-def]
    files = write_ranks(tmp_path, builders)
    report, digests = analyze_files(files, Options(**opts), tmp_path, jobs=jobs)
    return report, digests


def _ids(report) -> list[str]:  # type: ignore[no-untyped-def]
    return [f.id for f in report.findings]


# ---- straggler ---------------------------------------------------------------------------


def test_late_rank_is_named_with_its_lag_per_step(tmp_path: Path) -> None:
    # rank 1 reaches the all-reduce 5 ms after ranks 0 and 2; all finish together at 9 ms; every
    # rank's host then waits for the GPU, so the others' steps wait for rank 1
    b = {
        0: rank_builder(0, 3, arrive_us=3_000, sync=True),
        1: rank_builder(1, 3, arrive_us=8_000, sync=True),
        2: rank_builder(2, 3, arrive_us=3_000, sync=True),
    }
    report, _ = _analyze(tmp_path, b)
    (f,) = [f for f in report.findings if f.id == "straggler"]
    assert f.title == "Rank 1 holds the other ranks back"
    # the job replay: rank 1 on time, the all-reduce ends 5 ms earlier on every rank
    assert f.est_savings_ms == pytest.approx(5.0, abs=0.01)
    assert "Rank 1" in f.summary and "5.00 ms per step after the earliest rank" in f.summary
    assert "rank 0 longest, 5.00 ms per step" in f.summary  # the others wait: the victims
    assert "5.00 ms more computation on the GPU than the others" in f.summary
    assert f.severity == "high" and f.confidence == "medium"
    assert len(f.evidence) == 4 and f.evidence[0].what.startswith("step 1: rank 1 late")
    assert f.evidence[0].example_ts_us == pytest.approx(1_000_000.0 + 8_000)
    rows = {r["rank"]: r for r in record.dump(report.run)["ranks"]}
    assert rows[1]["lag_ms_per_step"] == pytest.approx(5.0, abs=0.01)
    assert rows[0]["lag_ms_per_step"] == pytest.approx(0.0, abs=0.01)
    # no rank is blamed for its waiting: rank 0 waits 5 ms per step, its lateness is 0
    assert rows[0]["wait_ms_per_step"] == pytest.approx(5.0, abs=0.01)
    assert rows[0]["late_ms_per_step"] == pytest.approx(0.0, abs=0.01)
    assert rows[1]["late_ms_per_step"] == pytest.approx(5.0, abs=0.01)
    assert rows[1]["wait_ms_per_step"] == pytest.approx(0.0, abs=0.01)
    # the job replay gives every rank's measured step back
    job = record.dump(report.run)["job_step"]
    assert job["measured_ms"] == pytest.approx(10.0) and job["worst_rank_error_pct"] < 1
    assert all(r["replayed_step_ms"] == pytest.approx(10.0, abs=0.1) for r in rows.values())
    assert "straggler" not in {s.id for s in report.skipped}


def test_a_late_rank_nobody_waits_for_saves_the_job_nothing(tmp_path: Path) -> None:
    # the same lateness, but no host waits for its collectives: the steps are the host's and the
    # job replay finds nothing to save (the lateness is named, at no cost)
    b = {
        0: rank_builder(0, 3, arrive_us=3_000),
        1: rank_builder(1, 3, arrive_us=8_000),
        2: rank_builder(2, 3, arrive_us=3_000),
    }
    report, _ = _analyze(tmp_path, b)
    (f,) = [f for f in report.findings if f.id == "straggler"]
    assert f.title == "Rank 1 holds the other ranks back"
    assert f.est_savings_ms == 0.0 and f.severity == "info"
    assert "is 0.00 ms shorter" in f.summary


def test_two_ranks_and_a_skewed_clock(tmp_path: Path) -> None:
    # rank 1's clock runs 40 ms ahead; only the shorter-kernel signal is trusted, so the real
    # 4 ms lag is found and the skew is not reported as lag
    b = {
        0: rank_builder(0, arrive_us=4_000, sync=True),
        1: rank_builder(1, arrive_us=8_000, base_ts=1_040_000.0, sync=True),
    }
    report, _ = _analyze(tmp_path, b)
    (f,) = [f for f in report.findings if f.id == "straggler"]
    assert "Rank 1" in f.summary and f.est_savings_ms == pytest.approx(4.0, abs=0.01)


def test_ranks_arriving_together_are_not_stragglers(tmp_path: Path) -> None:
    b = {r: rank_builder(r, 4, arrive_us=6_000) for r in range(4)}
    report, _ = _analyze(tmp_path, b)
    assert "straggler" not in _ids(report)
    assert all(abs(r["lag_ms_per_step"]) < 0.01 for r in record.dump(report.run)["ranks"])


def test_clock_skew_alone_is_not_a_straggler(tmp_path: Path) -> None:
    b = {0: rank_builder(0), 1: rank_builder(1, base_ts=1_050_000.0)}
    assert "straggler" not in _ids(_analyze(tmp_path, b)[0])


def test_ranks_taking_turns_are_not_stragglers(tmp_path: Path) -> None:
    # rank 0 is late in odd steps, rank 1 in even steps: mutual waiting, no consistent straggler
    b0, b1 = TraceBuilder(rank=0, world_size=2), TraceBuilder(rank=1, world_size=2)
    from tests.mr_helpers import ALLREDUCE

    for i in range(4):
        t0 = i * 10_000
        for r, b in ((0, b0), (1, b1)):
            late = (i % 2) == r
            arrive = t0 + (8_000 if late else 3_000)
            b.step(i + 1, t0, 10_000)
            op = b.op("c10d::allreduce_", arrive - 50, 20)
            b.launch(
                op,
                "cudaLaunchKernel",
                arrive - 40,
                5,
                kernel=ALLREDUCE,
                gpu_ts=arrive,
                gpu_dur=t0 + 9_000 - arrive,
            )
    report, _ = _analyze(tmp_path, {0: b0, 1: b1})
    assert "straggler" not in _ids(report)


def test_slow_steps_without_collectives_are_reported_with_low_confidence(tmp_path: Path) -> None:
    b = {r: TraceBuilder(cc=None, rank=r, world_size=3) for r in range(3)}
    for r, bb in b.items():
        dur = 13_000 if r == 2 else 10_000
        for i in range(3):
            bb.step(i + 1, i * 15_000, dur)
            bb.op("aten::mm", i * 15_000 + 10, dur - 100)
    report, _ = _analyze(tmp_path, b)
    (f,) = [f for f in report.findings if f.id == "straggler"]
    assert "Rank 2" in f.summary and "3.00 ms longer per step" in f.summary
    assert f.confidence == "low"


def test_straggler_needs_several_known_ranks(tmp_path: Path) -> None:
    # one trace: the registered detector skips
    from advisor.analysis.pipeline import analyze_trace

    rep = analyze_trace(rank_builder(0).load(), None, Options(only=frozenset({"straggler"})))
    assert rep.skipped[0].id == "straggler" and "one trace per rank" in rep.skipped[0].reason
    # two traces without rank information
    files = [rank_builder(None, None).write(tmp_path / f"w{i}.json") for i in range(2)]
    report, _ = analyze_files(files, Options(), tmp_path, jobs=1)
    reason = {s.id: s.reason for s in report.skipped}["straggler"]
    assert "distinct ranks" in reason
    assert [r["rank"] for r in record.dump(report.run)["ranks"]] == [None, None]


def test_straggler_respects_skip(tmp_path: Path) -> None:
    b = {0: rank_builder(0, arrive_us=3_000), 1: rank_builder(1, arrive_us=8_000)}
    report, _ = _analyze(tmp_path, b, skip=frozenset({"straggler"}))
    assert "straggler" not in _ids(report)
    assert {s.id: s.reason for s in report.skipped}["straggler"] == "skipped with --skip"


# ---- merge -------------------------------------------------------------------------------


def test_merged_report_has_ranks_side_by_side_and_findings_once(tmp_path: Path) -> None:
    b = {
        0: rank_builder(0, 4, arrive_us=6_000),
        1: rank_builder(1, 4, arrive_us=6_000),
        3: rank_builder(3, 4, arrive_us=6_000),
    }
    report, digests = _analyze(tmp_path, b)
    run = record.dump(report.run)
    assert [r["rank"] for r in run["ranks"]] == [0, 1, 3]
    assert run["world_size"] == 4 and run["ranks_missing"] == [2]
    row = run["ranks"][0]
    assert row["step_ms_median"] == pytest.approx(10.0)
    assert row["comm_pct"] == pytest.approx(30.0) and row["comm_overlap_pct"] == 0.0
    assert row["gpu_busy_pct"] is not None and row["exposed_comm_ms_per_step"] == pytest.approx(3.0)
    (f,) = [f for f in report.findings if f.id == "comm-overlap"]  # once, not once per rank
    assert "seen on 3 of 3" in f.summary
    d = report.to_dict()
    assert set(d["run"]["ranks"][0]) >= {"rank", "step_ms_median", "gpu_busy_pct", "comm_pct"}
    # digests are small: no tables travel back from the workers
    assert all(len(pickle.dumps(x)) < 50_000 for x in digests)


def test_unreadable_rank_is_reported_not_fatal(tmp_path: Path) -> None:
    files = write_ranks(tmp_path, {0: rank_builder(0), 1: rank_builder(1)})
    bad = tmp_path / "trace.rank2.json"
    bad.write_text("{not json")
    report, _ = analyze_files([*files, bad], Options(), tmp_path, jobs=1)
    rows = {r["rank"]: r for r in record.dump(report.run)["ranks"]}
    assert "error" in rows[2] and "error" not in rows[0]
    assert report.findings  # the readable ranks are analysed


def test_worker_processes_give_the_same_report(tmp_path: Path) -> None:
    b = {0: rank_builder(0, arrive_us=3_000), 1: rank_builder(1, arrive_us=8_000)}
    files = write_ranks(tmp_path, b)
    seq, _ = analyze_files(files, Options(), tmp_path, jobs=1)
    par, _ = analyze_files(files, Options(), tmp_path, jobs=2)
    assert seq.to_json() == par.to_json()


def test_worker_plan_is_bounded_by_cpus_and_memory() -> None:
    sizes = [50 * MiB] * 128
    assert plan_workers(sizes, cpus=64, available=64 * GiB) == 4  # at most 4
    assert plan_workers(sizes, cpus=2, available=64 * GiB) == 2
    # 2 GiB traces in 8 GiB: 0.6 * 8 GiB / (200 MiB + 5 * 2 GiB) -> one worker at a time
    assert plan_workers([2 * GiB] * 128, cpus=16, available=8 * GiB) == 1
    assert plan_workers([10 * MiB], cpus=16, available=64 * GiB) == 1  # one trace: in process
    assert plan_workers(sizes, jobs=3, cpus=16, available=64 * GiB) == 3


def test_raw_size_reads_the_gzip_trailer(tmp_path: Path) -> None:
    p = rank_builder(0).write(tmp_path / "t.json.gz")
    import gzip

    assert raw_size(p) == len(gzip.decompress(p.read_bytes()))


def test_analyze_command_on_rank_folder(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    (tmp_path / "in").mkdir()
    write_ranks(
        tmp_path / "in",
        {
            0: rank_builder(0, arrive_us=3_000, sync=True),
            1: rank_builder(1, arrive_us=8_000, sync=True),
        },
    )
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "advisor",
            "analyze",
            str(tmp_path / "in"),
            "--out",
            str(out),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert [r["rank"] for r in d["run"]["ranks"]] == [0, 1]
    assert d["findings"][0]["id"] == "straggler"
    html = (out / "report.html").read_text()
    assert "<h3>Ranks</h3>" in html and "trace.rank1.json" in html and "+5.00 ms" in html


# ---- real traces ---------------------------------------------------------------------------


@pytest.mark.shared
def test_trace_filter_pair_side_by_side() -> None:
    from advisor.trace import find_traces

    root = shared_trace("hta/trace_filter")
    report, digests = analyze_files(find_traces(root), Options(), root)
    rows = record.dump(report.run)["ranks"]
    assert [r["rank"] for r in rows] == [0, 1]
    # GPU busy is each rank's own run.gpu_busy_pct, of its steps' wall time (HTA's temporal
    # breakdown over the active span, busy 46.4% / 45.3%, is advisor inspect's: test_inspect)
    assert [r["gpu_busy_pct"] for r in rows] == [d.report.run.gpu_busy_pct for d in digests]
    assert 40 < rows[0]["gpu_busy_pct"] < 50 and 40 < rows[1]["gpu_busy_pct"] < 50
    assert 600 < rows[0]["step_ms_median"] < 640 and 600 < rows[1]["step_ms_median"] < 640
    assert all(r["comm_pct"] > 20 for r in rows)
    # HTA 0.5.0 get_comm_comp_overlap on this folder (run here): 11.81% and 20.05%
    assert (
        abs(rows[0]["comm_overlap_pct"] - 11.81) <= 2
        and abs(rows[1]["comm_overlap_pct"] - 20.05) <= 2
    )
    assert report.run.world_size == 128 and len(report.run.ranks.ranks_missing) == 126
    # two ranks of a 128-rank all-to-all, sampled: no consistent straggler between them
    assert "straggler" not in _ids(report)
    assert all(abs(r["lag_ms_per_step"]) < 0.05 * r["step_ms_median"] for r in rows)


def test_workers_never_rerun_the_callers_main_module(tmp_path: Path) -> None:
    # under `advisor profile` the main module may be the user's (unguarded) training script
    import subprocess
    import sys

    write_ranks(tmp_path, {0: rank_builder(0), 1: rank_builder(1)})
    script = tmp_path / "unguarded.py"
    script.write_text(
        "print('TOP-LEVEL RAN', flush=True)\n"
        "from pathlib import Path\n"
        "from advisor.multirank.analyze import analyze_files\n"
        "from advisor.analysis.pipeline import Options\n"
        "root = Path(__file__).parent\n"
        "files = sorted(root.glob('trace.rank*.json'))\n"
        "report, _ = analyze_files(files, Options(), root, jobs=2)\n"
        "print('RANKS', len(report.run.ranks.ranks))\n"
    )
    p = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=HANG_S
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("TOP-LEVEL RAN") == 1 and "RANKS 2" in p.stdout


# ---- the cross-rank detector API -------------------------------------------------------


def test_cross_rank_checks_run_through_the_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from advisor.detect import Draft, registry

    seen: list[list[int]] = []

    def check(drafts: list[Draft], digests: list, ctx: registry.RanksContext) -> list[Draft]:  # type: ignore[type-arg]
        seen.append([d.rank for d in digests])
        assert ctx.step_ms_median > 0 and ctx.t("straggler.min_lag_ms") > 0
        return [
            *drafts,
            Draft(
                id="zz-demo",
                title="demo",
                est_savings_ms=0.5,
                confidence="low",
                summary="seen across ranks",
                recommendation="-",
                snippet="",
            ),
        ]

    def broken(drafts: list[Draft], digests: list, ctx: registry.RanksContext) -> list[Draft]:  # type: ignore[type-arg]
        raise ValueError("bad check")

    def skips(drafts: list[Draft], digests: list, ctx: registry.RanksContext) -> list[Draft]:  # type: ignore[type-arg]
        raise registry.Skip("not today")

    monkeypatch.setitem(
        registry._RANK_CHECKS, "zz-demo", registry.RankCheck("zz-demo", check, False)
    )
    monkeypatch.setitem(
        registry._RANK_CHECKS, "zz-broken", registry.RankCheck("zz-broken", broken, False)
    )
    monkeypatch.setitem(
        registry._RANK_CHECKS, "zz-skips", registry.RankCheck("zz-skips", skips, True)
    )
    b = {1: rank_builder(1), 0: rank_builder(0)}
    report, _ = _analyze(tmp_path, b)
    assert seen == [[0, 1]]  # every rank's digest, in rank order
    assert "zz-demo" in _ids(report)
    assert {e.id: e.error for e in report.errored}["zz-broken"] == "ValueError: bad check"
    assert {s.id: s.reason for s in report.skipped}["zz-skips"] == "not today"
    # --skip leaves a check out
    seen.clear()
    (tmp_path / "again").mkdir()
    report, _ = _analyze(tmp_path / "again", b, skip=frozenset({"zz-demo"}))
    assert not seen and "zz-demo" not in _ids(report)
