"""The detectors shared with a forked helper on a second core (advisor.analysis.sharing): the
results in the jobs' order whoever ran them, a helper that dies or hangs costing time and
never a result, and the same findings as one process, on every sample trace and shared traces.

The helper's part is made certain by the jobs themselves (one job waits until the other process
has run one), never by timing."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from advisor.analysis import pipeline, sharing
from advisor.trace import load_trace
from tests.conftest import HANG_S
from tests.procs import running, wait_for

REPO = Path(__file__).resolve().parent.parent
SAMPLES = sorted((REPO / "sample_traces").glob("*.json.gz"))
SHARED = REPO.parent / "shared" / "traces"

pytestmark = pytest.mark.skipif(not sharing.available(), reason="needs fork and two CPUs")


def _mark(folder: Path, name: str) -> None:
    (folder / f"{name}.{os.getpid()}").write_text("")


def _seen(folder: Path, name: str) -> list[int]:
    return [int(p.suffix[1:]) for p in folder.glob(f"{name}.*")]


def _jobs(folder: Path, n: int) -> list:
    """``n`` jobs returning (their number, the pid that ran them); each waits until the other
    process has started one too, so both take part whichever is quicker to the queue."""

    def job(i: int) -> tuple[int, int]:
        _mark(folder, "started")
        assert wait_for(lambda: set(_seen(folder, "started")) - {os.getpid()}, HANG_S, 0.01)
        return i, os.getpid()

    return [lambda i=i: job(i) for i in range(n)]


def test_results_in_order_from_both_processes(tmp_path: Path) -> None:
    main = os.getpid()
    out = sharing.run_shared(_jobs(tmp_path, 12))
    assert [i for i, _ in out] == list(range(12))
    pids = {pid for _, pid in out}
    assert main in pids and len(pids) == 2  # each ran at least one
    helper = (pids - {main}).pop()
    assert not running(helper)  # ended and reaped


def test_not_shared_when_asked_not_to_or_without_a_second_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = [lambda i=i: (i, os.getpid()) for i in range(6)]
    assert sharing.run_shared(jobs, share=False) == [(i, os.getpid()) for i in range(6)]
    monkeypatch.setenv("ADVISOR_NO_FORK", "1")
    assert not sharing.available()
    assert sharing.run_shared(jobs) == [(i, os.getpid()) for i in range(6)]
    monkeypatch.delenv("ADVISOR_NO_FORK")
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: {0})
    assert not sharing.available()


def test_a_helper_that_dies_loses_no_result(tmp_path: Path) -> None:
    main = os.getpid()

    def job(i: int) -> tuple[int, int]:
        if os.getpid() != main:
            _mark(tmp_path, "died")
            os._exit(3)  # the helper ends in its first job, unreported
        if i == 0:  # this process's first job waits until the helper has died in one
            assert wait_for(lambda: _seen(tmp_path, "died"), HANG_S, 0.01)
        return i, os.getpid()

    out = sharing.run_shared([lambda i=i: job(i) for i in range(8)])
    assert out == [(i, main) for i in range(8)]  # its job too, run here


def test_a_stuck_helper_is_stopped_and_its_job_run_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    main = os.getpid()
    monkeypatch.setattr(sharing, "STALL_MIN_S", 0.5)

    def job(i: int) -> tuple[int, int]:
        if os.getpid() != main:
            _mark(tmp_path, "stuck")
            time.sleep(HANG_S)  # never reports
        if i == 0:
            assert wait_for(lambda: _seen(tmp_path, "stuck"), HANG_S, 0.01)
        return i, os.getpid()

    out = sharing.run_shared([lambda i=i: job(i) for i in range(4)])
    assert out == [(i, main) for i in range(4)]
    (helper,) = _seen(tmp_path, "stuck")
    assert not running(helper)  # killed and reaped


def test_ctrl_c_in_this_process_ends_the_helper(tmp_path: Path) -> None:
    main = os.getpid()

    def job(i: int) -> int:
        if os.getpid() != main:
            _mark(tmp_path, "helper")
            time.sleep(HANG_S)
        assert wait_for(lambda: _seen(tmp_path, "helper"), HANG_S, 0.01)
        raise KeyboardInterrupt  # in this process's first job, the helper busy in its own

    with pytest.raises(KeyboardInterrupt):
        sharing.run_shared([lambda i=i: job(i) for i in range(4)])
    (helper,) = _seen(tmp_path, "helper")
    assert not running(helper)


def test_stall_limit_grows_with_the_slowest_job() -> None:
    assert sharing.stall_limit_s(0.1) == sharing.STALL_MIN_S
    assert sharing.stall_limit_s(100.0) == 100.0 * sharing.STALL_PER_SLOWEST


def _findings(path: Path, share: bool) -> bytes:
    trace = load_trace(path)
    report = pipeline.analyze_run(trace, None, pipeline.Options(share_cores=share))
    text = report.to_json(False)
    return text.encode() if isinstance(text, str) else text


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_same_findings_shared_or_not_on_every_sample(path: Path) -> None:
    assert _findings(path, True) == _findings(path, False)


@pytest.mark.slow
@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/traces absent")
@pytest.mark.parametrize(
    "rel",
    [
        "hta/df_index_resolver/df_index_resolver.json.gz",  # 30 replays, comm and kernels
        "gpupuzzlers",  # micro-benchmarks: a few detectors find anything
    ],
)
def test_same_findings_shared_or_not_on_shared_traces(rel: str) -> None:
    target = SHARED / rel
    paths = [target] if target.is_file() else sorted(target.glob("**/*.json*"))[:3]
    assert paths
    for path in paths:
        assert _findings(path, True) == _findings(path, False), path


def test_a_trace_over_the_bound_runs_on_one_core(monkeypatch: pytest.MonkeyPatch) -> None:
    from advisor.analysis import detection

    asked: list[bool] = []
    real = detection.run_shared

    def spy(jobs: list, share: bool = True, **kw: Any) -> list:
        asked.append(share)
        return real(jobs, share, **kw)

    monkeypatch.setattr(detection, "run_shared", spy)
    path = REPO / "sample_traces" / "sync_point.cpu.json.gz"
    trace = load_trace(path)
    pipeline.analyze_run(trace, None, pipeline.Options(share_cores=True))
    monkeypatch.setattr(detection, "SHARE_MAX_RAW_BYTES", trace.meta.raw_bytes - 1)
    pipeline.analyze_run(trace, None, pipeline.Options(share_cores=True))
    pipeline.analyze_run(trace, None, pipeline.Options())
    assert asked == [True, False, False]
