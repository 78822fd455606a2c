"""Builders of small per-rank traces for the multi-rank tests (times in microseconds)."""

from __future__ import annotations

from pathlib import Path

from tests.tracebuilder import TraceBuilder

ALLREDUCE = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"


def rank_builder(
    rank: int | None,
    world: int | None = 2,
    steps: int = 4,
    step_us: float = 10_000,
    arrive_us: float = 6_000,
    end_us: float = 9_000,
    compute_end_us: float | None = None,
    base_ts: float = 1_000_000.0,
    comm: bool = True,
    sync: bool = False,
) -> TraceBuilder:
    """Each step: a compute kernel from 100 us to ``compute_end_us`` (default: the arrival),
    then an all-reduce kernel from ``arrive_us`` to ``end_us`` (ends align across ranks);
    ``sync``: the host then waits for the GPU (`torch.cuda.synchronize()`), so the step's GPU
    work is on its critical path."""
    b = TraceBuilder(rank=rank, world_size=world, base_ts=base_ts)
    cend = arrive_us if compute_end_us is None else compute_end_us
    for i in range(steps):
        t0 = i * step_us
        b.step(i + 1, t0, step_us)
        op = b.op("aten::mm", t0 + 10, 60)
        b.launch(
            op,
            "cudaLaunchKernel",
            t0 + 20,
            5,
            kernel="volta_sgemm_128x64_nn",
            gpu_ts=t0 + 100,
            gpu_dur=cend - 100,
        )
        if comm:
            op2 = b.op("c10d::allreduce_", t0 + arrive_us - 80, 40)
            b.launch(
                op2,
                "cudaLaunchKernel",
                t0 + arrive_us - 70,
                5,
                kernel=ALLREDUCE,
                gpu_ts=t0 + arrive_us,
                gpu_dur=end_us - arrive_us,
                stream=20,
            )
        if sync:
            last = max(end_us if comm else 0, cend)
            b.runtime("cudaDeviceSynchronize", t0 + arrive_us - 60, last - arrive_us + 65)
    return b


def write_ranks(tmp: Path, builders: dict[int, TraceBuilder]) -> list[Path]:
    return [b.write(tmp / f"trace.rank{r}.json") for r, b in sorted(builders.items())]


STRAGGLER_SLOWDOWN = 1.25


def synth_ranks(
    src: Path, out: Path, n: int, straggler: int | None = None, jitter: float = 0.02
) -> list[Path]:
    """``n`` rank traces ``trace.rank<R>.json.gz`` in ``out``, built from the real trace ``src``:
    each rank is the same trace with ``distributedInfo`` set, its timeline stretched by a small
    per-rank factor (up to ``jitter``), and rank ``straggler`` slower by ``STRAGGLER_SLOWDOWN``."""
    import gzip
    import json

    opener = gzip.open if src.name.endswith(".gz") else open
    with opener(src, "rt", encoding="utf-8") as fh:
        data = json.load(fh)
    if isinstance(data, list):
        data = {"traceEvents": data}
    events = data["traceEvents"]
    t0 = min(float(e["ts"]) for e in events if isinstance(e.get("ts"), int | float))
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for r in range(n):
        f = 1.0 + jitter * ((r * 37) % 11) / 10.0
        if r == straggler:
            f *= STRAGGLER_SLOWDOWN
        evs = []
        for e in events:
            e2 = dict(e)
            if isinstance(e2.get("ts"), int | float):
                e2["ts"] = round(t0 + (float(e2["ts"]) - t0) * f, 3)
            if isinstance(e2.get("dur"), int | float):
                e2["dur"] = round(float(e2["dur"]) * f, 3)
            evs.append(e2)
        doc = {
            **data,
            "traceEvents": evs,
            "distributedInfo": {"backend": "nccl", "rank": r, "world_size": n},
        }
        path = out / f"trace.rank{r}.json.gz"
        with gzip.open(path, "wt", encoding="utf-8", compresslevel=1) as fh:
            json.dump(doc, fh)
        files.append(path)
    return files
