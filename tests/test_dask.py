"""Per-rank analysis on a real dask.distributed cluster: a LocalCluster of worker processes (the
default above 16 traces) and a separate scheduler started by its own command, reached with
``--scheduler ADDRESS``, as on a cluster whose workers see the same files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("distributed")

from advisor.analysis.pipeline import Options  # noqa: E402
from advisor.multirank import analyze as multirank  # noqa: E402
from tests.conftest import HANG_S, REPO  # noqa: E402
from tests.mr_helpers import rank_builder, write_ranks  # noqa: E402

pytestmark = pytest.mark.slow


def _two_ranks(tmp_path: Path) -> list[Path]:
    return write_ranks(
        tmp_path,
        {
            0: rank_builder(0, arrive_us=3_000, sync=True),
            1: rank_builder(1, arrive_us=8_000, sync=True),
        },
    )


def _profiler_on(dask_worker: object) -> bool:
    """In a worker: whether Dask's sampling profiler runs there (its periodic callback)."""
    return "profile" in getattr(dask_worker, "periodic_callbacks", {})


def test_local_cluster_of_processes_with_a_memory_limit() -> None:
    from distributed import Client

    from advisor.multirank.daskrun import local_cluster

    cluster = local_cluster(2, 512 * 1024**2)
    try:
        with Client(cluster, set_as_default=False) as client:
            workers = client.scheduler_info()["workers"]
            assert len(workers) == 2
            assert all(
                w["memory_limit"] == 512 * 1024**2 and w["nthreads"] == 1 for w in workers.values()
            )
            pids = client.run(os.getpid)
            assert len(set(pids.values())) == 2 and os.getpid() not in pids.values()
            # workers ignore Ctrl-C: the caller handles it and closes the cluster
            ign = client.run(lambda: signal.getsignal(signal.SIGINT) == signal.SIG_IGN)
            assert all(ign.values())
            # no sampling profiler in the workers: its samples grew each worker by 130 MB over
            # 1,000 traces (docs/performance.md)
            profiling = client.run(_profiler_on, nanny=False)
            assert profiling and not any(profiling.values()), profiling
    finally:
        cluster.close()


def test_ranks_as_dask_tasks_give_the_same_report(tmp_path: Path, monkeypatch) -> None:
    files = _two_ranks(tmp_path)
    serial, _ = multirank.analyze_files(files, Options(), tmp_path, jobs=1)
    monkeypatch.setattr(multirank, "DASK_ABOVE", 1)  # 2 traces > 1: a LocalCluster
    seen: list[int] = []
    digests = multirank.digest_all(files, Options(), jobs=2, progress=lambda d: seen.append(d.rank))
    assert sorted(seen) == [0, 1] and all(d.error is None for d in digests)
    dask_report = multirank.merge(digests, Options(), tmp_path)
    assert [f.to_dict() for f in dask_report.findings] == [f.to_dict() for f in serial.findings]
    assert dask_report.run.ranks == serial.run.ranks
    assert dask_report.run.ranks.ranks_summary.straggler.rank == 1


@pytest.fixture
def scheduler(tmp_path: Path):
    """A scheduler and one worker, each its own process, on the loopback address."""
    sched_file = tmp_path / "scheduler.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "distributed.cli.dask_scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--no-dashboard",
                "--scheduler-file",
                str(sched_file),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
    ]
    try:
        deadline = time.monotonic() + HANG_S
        while not sched_file.is_file() and time.monotonic() < deadline:
            time.sleep(0.2)
        address = json.loads(sched_file.read_text())["address"]
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "distributed.cli.dask_worker",
                    address,
                    "--nthreads",
                    "1",
                    "--nworkers",
                    "1",
                    "--no-dashboard",
                    "--host",
                    "127.0.0.1",
                    "--memory-limit",
                    "1GiB",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env,
            )
        )
        yield address
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=HANG_S)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def test_scheduler_address_runs_the_ranks_there(tmp_path: Path, scheduler: str) -> None:
    inp = tmp_path / "in"
    inp.mkdir()
    _two_ranks(inp)
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "advisor",
            "analyze",
            str(inp),
            "--out",
            str(tmp_path / "out"),
            "--json",
            "--scheduler",
            scheduler,
        ],
        capture_output=True,
        text=True,
        timeout=HANG_S,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert [r["rank"] for r in d["run"]["ranks"]] == [0, 1]
    assert d["findings"][0]["id"] == "straggler"
    assert p.stderr.strip() == ""  # no Dask log lines on the terminal


def test_unreachable_scheduler_is_one_line(tmp_path: Path) -> None:
    inp = tmp_path / "in"
    inp.mkdir()
    _two_ranks(inp)
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "advisor",
            "analyze",
            str(inp),
            "--out",
            str(tmp_path / "out"),
            "--scheduler",
            "tcp://127.0.0.1:9",
        ],
        capture_output=True,
        text=True,
        timeout=HANG_S,
        cwd=REPO,
        env={
            **os.environ,
            "PYTHONPATH": str(REPO),
            "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "3s",
        },
    )
    assert p.returncode == 1
    assert p.stderr.strip().splitlines() == [p.stderr.strip()]
    assert "--scheduler tcp://127.0.0.1:9: cannot connect" in p.stderr


def test_no_local_cluster_falls_back_to_worker_processes(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    import advisor.multirank.daskrun

    def fail(*a, **k):
        raise OSError("no loopback here")

    monkeypatch.setattr(advisor.multirank.daskrun, "local_cluster", fail)
    files = _two_ranks(tmp_path)
    digests = multirank.digest_all(files, Options(), jobs=2, scheduler=multirank.LOCAL)
    assert [d.rank for d in digests] == [0, 1] and all(d.error is None for d in digests)
    assert "local Dask cluster failed (OSError: no loopback here); using worker processes" in (
        capsys.readouterr().err
    )
