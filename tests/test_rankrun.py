"""Per-rank runs: environment, file names, the output-folder rule, rank 0's bounded wait."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from advisor.output.outfolder import foreign_entries, process_start_time
from advisor.profile.torchrun import RankEnv, rank_env, rank_traces, wait_for_ranks
from tests.conftest import HANG_S


def test_rank_env_from_torchrun_variables() -> None:
    env = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "TORCHELASTIC_RUN_ID": "abc"}
    r = rank_env(env)
    assert r == RankEnv(3, 8, 1, "abc")
    assert (r.trace_name, r.run_name, r.is_leader) == (
        "trace.rank3.json.gz",
        "run.rank3.json",
        False,
    )
    assert rank_env({}) is None
    assert rank_env({"RANK": "0", "WORLD_SIZE": "1"}) is None  # one process: a normal run
    assert rank_env({"RANK": "x", "WORLD_SIZE": "2"}) is None
    assert rank_env({"RANK": "2", "WORLD_SIZE": "2"}) is None  # inconsistent
    assert rank_env({"RANK": "1", "WORLD_SIZE": "2"}) == RankEnv(1, 2, 1, None)


def test_process_start_time_is_in_the_past() -> None:
    t = process_start_time()
    assert time.time() - 86400 * 30 < t <= time.time()


def test_other_ranks_files_of_this_launch_are_not_foreign(tmp_path: Path) -> None:
    since = time.time()
    (tmp_path / "trace.rank1.json.gz").write_bytes(b"x")
    (tmp_path / "run.rank1.json").write_text("{}")
    (tmp_path / ".trace.rank2.json.gz.123.tmp").write_bytes(b"")
    (tmp_path / ".run.rank2.json.x1y2.tmp").write_bytes(b"")
    (tmp_path / ".advisor-write-test-1234567").write_bytes(b"")  # another rank's probe
    assert foreign_entries(tmp_path, since) == []
    old = tmp_path / "trace.rank3.json.gz"  # an earlier run's file
    old.write_bytes(b"x")
    os.utime(old, (since - 3600, since - 3600))
    (tmp_path / "notes.txt").write_text("mine")  # the user's file
    (tmp_path / "findings.json").write_text("{}")  # merged outputs are only written at the end
    assert foreign_entries(tmp_path, since) == ["findings.json", "notes.txt", "trace.rank3.json.gz"]


def test_default_out_dir_is_the_same_for_every_local_rank(tmp_path: Path) -> None:
    from advisor.profile.torchrun import default_rank_out_dir

    a = default_rank_out_dir("train", RankEnv(0, 2, 0, "5f3c0e1a-aaaa"), tmp_path)
    b = default_rank_out_dir("train", RankEnv(1, 2, 1, "5f3c0e1a-aaaa"), tmp_path)
    assert a == b and a.parent == tmp_path / "advisor-runs" and a.name.endswith("-5f3c0e1a-aaa")
    c = default_rank_out_dir("train", RankEnv(1, 2, 1, "none"), tmp_path)
    assert c.name.endswith(f"-p{os.getppid()}")


def test_rank0_waits_until_every_rank_is_there(tmp_path: Path) -> None:
    renv = RankEnv(0, 3, 0)
    for r in (0, 1):
        (tmp_path / f"run.rank{r}.json").write_text("{}")
    told: list[list[int]] = []
    waiting = threading.Event()

    def tell(missing: list[int]) -> None:
        told.append(missing)
        waiting.set()

    def late() -> None:
        waiting.wait(HANG_S)  # rank 2 arrives while rank 0 waits for it, however slow the machine
        (tmp_path / "run.rank2.json").write_text("{}")

    th = threading.Thread(target=late)
    th.start()
    assert wait_for_ranks(tmp_path, renv, 2 * HANG_S, tell, poll_s=0.05) == []
    th.join()
    assert told == [[2]]  # (rank 2 came: nothing is missing, and the wait said so once)


class _Clock:
    """A clock that moves only when slept on: the wait's own timing, whatever the load."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def test_rank0_wait_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from advisor.profile import torchrun

    (tmp_path / "run.rank0.json").write_text("{}")
    clock = _Clock()
    monkeypatch.setattr(torchrun, "time", clock)
    assert wait_for_ranks(tmp_path, RankEnv(0, 3, 0), 0.3, poll_s=0.05) == [1, 2]
    assert 0.3 <= clock.now < 0.3 + 0.05 + 1e-9  # it gave up at the limit
    monkeypatch.undo()
    (tmp_path / "trace.rank0.json.gz").write_bytes(b"")
    (tmp_path / "trace.rank2.json.gz").write_bytes(b"")
    assert [p.name for p in rank_traces(tmp_path, 3)] == [
        "trace.rank0.json.gz",
        "trace.rank2.json.gz",
    ]
