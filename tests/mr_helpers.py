"""Builders of small per-rank traces for the multi-rank tests (times in microseconds)."""

from __future__ import annotations

from pathlib import Path

from tests.tracebuilder import TraceBuilder

ALLREDUCE = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"


def rank_builder(rank: int | None, world: int | None = 2, steps: int = 4, step_us: float = 10_000,
                 arrive_us: float = 6_000, end_us: float = 9_000, compute_end_us: float | None = None,
                 base_ts: float = 1_000_000.0, comm: bool = True,
                 sync: bool = False) -> TraceBuilder:  # fmt: skip
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
        b.launch(op, "cudaLaunchKernel", t0 + 20, 5, kernel="volta_sgemm_128x64_nn",
                 gpu_ts=t0 + 100, gpu_dur=cend - 100)  # fmt: skip
        if comm:
            op2 = b.op("c10d::allreduce_", t0 + arrive_us - 80, 40)
            b.launch(op2, "cudaLaunchKernel", t0 + arrive_us - 70, 5, kernel=ALLREDUCE,
                     gpu_ts=t0 + arrive_us, gpu_dur=end_us - arrive_us, stream=20)  # fmt: skip
        if sync:
            last = max(end_us if comm else 0, cend)
            b.runtime("cudaDeviceSynchronize", t0 + arrive_us - 60, last - arrive_us + 65)
    return b


def write_ranks(tmp: Path, builders: dict[int, TraceBuilder]) -> list[Path]:
    return [b.write(tmp / f"trace.rank{r}.json") for r, b in sorted(builders.items())]
