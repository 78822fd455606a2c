"""``advisor profile`` under torchrun: which rank this process is, its file names, the output
folder rule for several ranks writing into one ``--out``, and rank 0 waiting for the others.

Every rank writes ``trace.rank<R>.json.gz`` and ``run.rank<R>.json`` into the same folder;
rank 0 then waits (bounded) for the other ranks' run files and writes one merged
``findings.json`` and ``report.html``. A rank that never arrives is reported, not fatal.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from advisor import settings
from advisor.runfolder import rank_run_name, rank_trace_name


@dataclass(frozen=True)
class RankEnv:
    """The torchrun (torchelastic) environment of this process."""

    rank: int
    world_size: int
    local_rank: int
    run_id: str | None = None

    @property
    def trace_name(self) -> str:
        return rank_trace_name(self.rank)

    @property
    def run_name(self) -> str:
        return rank_run_name(self.rank)

    @property
    def is_leader(self) -> bool:
        return self.rank == 0

    def run_names(self) -> list[str]:
        return [rank_run_name(r) for r in range(self.world_size)]


def _int(env: Mapping[str, str], key: str) -> int | None:
    try:
        return int(env[key])
    except (KeyError, ValueError):
        return None


def rank_env(env: Mapping[str, str] | None = None) -> RankEnv | None:
    """RANK / WORLD_SIZE / LOCAL_RANK as torchrun sets them; None for a single process
    (no WORLD_SIZE, or a world of one)."""
    e = settings.torchrun_env(env)
    world = _int(e, "WORLD_SIZE")
    rank = _int(e, "RANK")
    if world is None or rank is None or world <= 1 or not 0 <= rank < world:
        return None
    local = _int(e, "LOCAL_RANK")
    run_id = e.get("TORCHELASTIC_RUN_ID")
    return RankEnv(rank, world, local if local is not None else rank, run_id or None)


def default_rank_out_dir(stem: str, renv: RankEnv, base: Path | None = None) -> Path:
    """The default ``--out`` all local ranks of one launch agree on without talking:
    ``advisor-runs/<stem>-<launch time>-<run id>`` (torchrun's run id, else the launcher's pid;
    ranks on other nodes need a shared ``--out``)."""
    from advisor.output.outfolder import default_out_dir, process_start_time

    ppid = os.getppid()
    rid = renv.run_id if renv.run_id and renv.run_id != "none" else f"p{ppid}"
    return default_out_dir(stem, base, when=process_start_time(ppid), tag=rid[:12])


def wait_for_ranks(
    out: Path,
    renv: RankEnv,
    timeout_s: float,
    notify: Callable[[list[int]], None] | None = None,
    poll_s: float = 0.25,
) -> list[int]:
    """Rank 0: wait until every rank's run file exists or ``timeout_s`` passes; returns the
    ranks still missing. (Each rank writes its run file after its trace, atomically.)"""
    deadline = time.monotonic() + max(timeout_s, 0.0)
    told = False
    while True:
        missing = [r for r, n in enumerate(renv.run_names()) if not (out / n).is_file()]
        if not missing or time.monotonic() >= deadline:
            return missing
        if notify is not None and not told:
            notify(missing)
            told = True
        time.sleep(poll_s)


def rank_traces(out: Path, world_size: int) -> list[Path]:
    """The per-rank traces present in ``out`` (rank order)."""
    files = [out / rank_trace_name(r) for r in range(world_size)]
    return [f for f in files if f.is_file()]
