"""Arrival-based lateness (advisor/derive/lag.py) and the job replay (advisor/replay/job.py,
skeleton.py) on built multi-rank traces and on the shared ones."""

from __future__ import annotations

from dataclasses import replace

import pytest

from advisor.analysis.digest import digest_file, digest_trace
from advisor.analysis.pipeline import analyze_trace
from advisor.derive.lag import arrivals, explain
from advisor.digest import Digest
from advisor.replay.job import job_replay
from tests.conftest import shared_trace
from tests.mr_helpers import rank_builder


def _digests(arrive: dict[int, int], sync: bool = True, **kw: float) -> list[Digest]:
    out = []
    for r, a in sorted(arrive.items()):
        t = rank_builder(r, len(arrive), arrive_us=a, sync=sync, **kw).load()  # type: ignore[arg-type]
        out.append(digest_trace(t, analyze_trace(t, None), r))
    return out


def test_lateness_waiting_and_lag_by_arrival() -> None:
    ds = _digests({0: 3_000, 1: 8_000, 2: 4_000})
    arr = arrivals(ds)
    assert arr is not None and arr.per_step_count() == 1
    late, wait, lag = arr.lateness_ms(), arr.waiting_ms(), arr.lag_ms()
    assert late == pytest.approx({0: 0.0, 1: 5.0, 2: 1.0})
    assert wait == pytest.approx({0: 5.0, 1: 0.0, 2: 4.0})
    # rank 1 arrives 4.5 ms after the others' median (3.5 ms); the waiting ranks lag nothing
    assert lag[1] == pytest.approx(4.5) and lag[0] == 0.0
    assert arr.last_counts() == {0: 0, 1: 1, 2: 0}


def test_explain_names_what_the_late_rank_did_before_it_arrived() -> None:
    # rank 1's compute kernel runs 5 ms longer before the all-reduce
    ds = _digests({0: 3_000, 1: 8_000, 2: 3_000})
    arr = arrivals(ds)
    assert arr is not None
    ex = explain(ds, arr, 1)
    assert ex is not None and ex.instances == 1
    assert ex.extra_ms["compute"] == pytest.approx(5.0, abs=0.01)
    assert ex.extra_ms["idle"] == pytest.approx(0.0, abs=0.01) and ex.late_start_ms == 0.0
    assert ex.kernel == "volta_sgemm_128x64_nn" and ex.kernel_ms == pytest.approx(7.9, abs=0.01)


def test_a_late_step_start_is_time_before_the_recorded_step() -> None:
    # rank 1 does the same work as rank 0 but its (only) step starts 4 ms later: the all-reduce
    # ends together, so rank 1 arrives 4 ms late, all of it before its recorded step
    b0 = rank_builder(0, 2, steps=1, arrive_us=3_000, end_us=9_000)
    b1 = rank_builder(1, 2, steps=1, arrive_us=3_000, end_us=5_000, base_ts=1_004_000.0)
    ds = [digest_trace(b.load(), analyze_trace(b.load(), None), r) for r, b in ((0, b0), (1, b1))]
    arr = arrivals(ds)
    assert arr is not None and arr.lateness_ms()[1] == pytest.approx(4.0, abs=0.01)
    ex = explain(ds, arr, 1)
    assert ex is not None and ex.first_step
    assert ex.late_start_ms == pytest.approx(4.0, abs=0.01)
    assert ex.extra_ms["compute"] == pytest.approx(0.0, abs=0.01)


def test_job_replay_gives_back_every_ranks_step() -> None:
    ds = _digests({0: 3_000, 1: 8_000, 2: 3_000})
    job = job_replay(ds)
    assert job is not None and job.matched == 4 and len(job.steps) == 4
    assert job.worst_error_pct < 0.5
    assert job.job_measured_ms == pytest.approx(10.0) and job.job_replayed_ms == pytest.approx(10.0)


def test_job_whatifs_value_the_job_not_one_rank() -> None:
    ds = _digests({0: 3_000, 1: 8_000, 2: 3_000})
    base = job_replay(ds)
    on_time = job_replay(ds, late_ranks=[1])
    hidden = job_replay(ds, hide_transfer=True)
    assert base is not None and on_time is not None and hidden is not None
    # rank 1 on time: the all-reduce ends 5 ms earlier on every rank, and so does every step
    assert base.job_replayed_ms - on_time.job_replayed_ms == pytest.approx(5.0, abs=0.05)
    assert on_time.replayed_ms == pytest.approx(5.0, abs=0.05)
    # the transfer (the last rank's 1 ms kernel) hidden: every rank's step is 1 ms shorter
    assert base.job_replayed_ms - hidden.job_replayed_ms == pytest.approx(1.0, abs=0.05)
    # a rank nobody waits for (no host sync: the GPU finishes inside the step anyway)
    free = _digests({0: 3_000, 1: 8_000, 2: 3_000}, sync=False)
    b2, o2 = job_replay(free), job_replay(free, late_ranks=[1])
    assert b2 is not None and o2 is not None and b2.job_replayed_ms == o2.job_replayed_ms


def test_no_job_replay_without_every_ranks_graph() -> None:
    ds = _digests({0: 3_000, 1: 8_000})
    assert job_replay(ds) is not None
    assert job_replay([ds[0], replace(ds[1], skeleton=None)]) is None


# ---- the shared multi-rank traces ----------------------------------------------------------


def _shared(name: str) -> list[Digest]:
    from advisor.trace import find_traces

    root = shared_trace(name)
    return sorted((digest_file(f) for f in find_traces(root)), key=lambda d: d.rank_id)


@pytest.mark.shared
def test_dlrm_8ranks_rank_7_arrives_late_and_the_job_replay_holds() -> None:
    ds = _shared("param/dlrm_8ranks")
    arr = arrivals(ds)
    assert arr is not None and arr.per_step_count() == 8
    lag, late, wait = arr.lag_ms(), arr.lateness_ms(), arr.waiting_ms()
    # rank 7 arrives last at the first collectives (collectives 0-4): the straggler
    assert max(lag, key=lag.get) == 7 and arr.last_counts()[7] == 5  # type: ignore[arg-type]
    assert 9.0 < late[7] < 10.5
    # rank 1 waits longest (10.9 ms inside collectives) and is late at nothing: never blamed
    assert lag[1] == 0.0 and late[1] < 0.2 and 10.5 < wait[1] < 11.5
    ex = explain(ds, arr, 7)
    assert ex is not None and ex.first_step and 4.0 < ex.late_start_ms < 5.0
    job = job_replay(ds)
    assert job is not None and job.matched == 8
    assert job.worst_error_pct < 5.0  # every rank's step within 5% (0.01%)
    assert job.job_measured_ms == pytest.approx(19.901, abs=0.01)
    fixed = job_replay(ds, late_ranks=[7])
    assert fixed is not None and 0.3 < job.job_replayed_ms - fixed.job_replayed_ms < 1.0


@pytest.mark.shared
def test_trace_filter_job_replay_holds() -> None:
    ds = _shared("hta/trace_filter")
    job = job_replay(ds)
    assert job is not None and job.matched >= 5 and job.worst_error_pct < 5.0
    # host-bound on both ranks: hiding every transfer saves the job next to nothing (0.11 ms of
    # a 619 ms step: rank 1's small pageable host-to-device copies, staged at once, do not wait)
    hidden = job_replay(ds, hide_transfer=True)
    assert hidden is not None
    assert job.job_replayed_ms - hidden.job_replayed_ms < 0.001 * job.job_replayed_ms
    arr = arrivals(ds)
    assert arr is not None and arr.lateness_ms()[1] > 10 and arr.waiting_ms()[0] > 10
