"""One file holding several ranks (a trace merger's output: no distributedInfo, each rank's
processes named ``RANK n - CPU``/``RANK n - GPU``, ``args.rank`` on the events): split into its
ranks when loading and analysed as a job (advisor/trace/ranksplit.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from advisor.api import analyze
from advisor.trace import load_ranks, load_trace
from tests.kineto2021 import events_2021
from tests.mr_helpers import rank_builder
from tests.tracebuilder import TraceBuilder

LATE_US = 3_000.0  # rank 3 reaches every all-reduce this much later than the others


def merged(
    builders: dict[int, TraceBuilder],
    rank_args: str = "all",
    names: bool = True,
    legacy: bool = False,
) -> dict[str, Any]:
    """The ranks' traces merged into one, as TraceLens' trace fusion writes it: no header but
    the events, each rank's process ids and correlation ids offset by a multiple of a power of
    ten, ``args.rank`` on every event (``rank_args="all"``) or on the GPU work only
    (``"gpu"``), and (``names``) a ``process_name`` event per process: ``RANK n - CPU`` /
    ``RANK n - GPU``."""
    out: list[dict[str, Any]] = []
    docs = {r: events_2021(b) if legacy else b.to_dict() for r, b in builders.items()}
    top = max(int(e["pid"]) for d in docs.values() for e in d["traceEvents"])
    mult = 10 ** (math.ceil(math.log10(max(top, 1))) + 1)
    for r, doc in sorted(docs.items()):
        pids: dict[int, str] = {}
        for ev in doc["traceEvents"]:
            ev = json.loads(json.dumps(ev))
            gpu = ev.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy")
            pids[int(ev["pid"])] = "GPU" if gpu else "CPU"
            ev["pid"] = int(ev["pid"]) + r * mult
            args = ev.setdefault("args", {})
            if "correlation" in args and args["correlation"]:
                args["correlation"] += r * mult
            if rank_args == "all" or (rank_args == "gpu" and gpu):
                args["rank"] = r
            out.append(ev)
        if names:
            for pid, kind in pids.items():
                out.append(
                    {
                        "ph": "M",
                        "name": "process_name",
                        "pid": pid + r * mult,
                        "tid": 0,
                        "args": {"name": f"RANK {r} - {kind}"},
                    }
                )
    return {"traceEvents": out}


def four_ranks(legacy: bool = False, **kw: Any) -> dict[str, Any]:
    """Four ranks of 10 ms steps; rank 3 computes 3 ms longer before each all-reduce, which
    every rank waits for in an explicit torch.cuda.synchronize() after it."""
    b = {
        r: rank_builder(r, 4, arrive_us=6_000 + (LATE_US if r == 3 else 0), end_us=9_500, sync=True)
        for r in range(4)
    }
    for x in b.values():
        x.header.pop("distributedInfo", None)
    return merged(b, legacy=legacy, **kw)


def _write(tmp: Path, doc: dict[str, Any]) -> Path:
    p = tmp / "merged_all_events.json"
    p.write_text(json.dumps(doc))
    return p


@pytest.mark.parametrize("legacy", [False, True])
def test_a_merged_four_rank_file_is_analysed_as_a_job(tmp_path: Path, legacy: bool) -> None:
    path = _write(tmp_path, four_ranks(legacy=legacy))
    traces = load_ranks(path)
    assert [t.meta.rank for t in traces] == [0, 1, 2, 3]
    assert all(t.meta.world_size == 4 and t.meta.ranks_in_file == 4 for t in traces)
    # each rank holds its own events only: 4 steps, 8 kernels (a GEMM, an all-reduce per step)
    assert all(len(t.kernels) == 8 and len(t.steps) == 4 for t in traces)
    rep = analyze(path)
    run = rep.raw.run
    assert run.ranks is not None and [r.rank for r in run.ranks.ranks] == [0, 1, 2, 3]
    assert run.world_size == 4
    assert any("holds 4 ranks" in q.what for q in run.trace_quality)
    # the straggler: rank 3, 3 ms late at every all-reduce, which the others wait for (their
    # explicit synchronize reads as a wait): on time, the job's step is 3 ms shorter
    f = next(f for f in rep.raw.findings if f.id == "straggler")
    assert "rank 3" in f.summary
    assert f.est_savings_ms == pytest.approx(LATE_US / 1000, abs=0.1)


def test_ranks_named_only_by_process_names_or_only_by_args(tmp_path: Path) -> None:
    for kw in ({"rank_args": "none"}, {"names": False}, {"rank_args": "gpu"}):
        path = _write(tmp_path, four_ranks(**kw))
        assert [t.meta.rank for t in load_ranks(path)] == [0, 1, 2, 3], kw


def test_one_rank_is_one_trace_and_load_trace_reads_the_file_whole(tmp_path: Path) -> None:
    one = rank_builder(0, 1, sync=True)
    one.header.pop("distributedInfo", None)
    path = _write(tmp_path, merged({0: one}))
    traces = load_ranks(path)
    assert len(traces) == 1 and traces[0].meta.ranks_in_file == 0
    # load_trace keeps reading a merged file as one process
    assert len(load_trace(_write(tmp_path, four_ranks())).kernels) == 32
