"""Small A/B runs for the ``advisor diff`` tests (times in microseconds)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.tracebuilder import TraceBuilder

GEMM = "ampere_sgemm_128x64_nn"


def ab_run(
    path: Path,
    steps: int = 3,
    mm_dims: list[list[int]] | None = None,
    mm_types: str = "float",
    mm_us: float = 2_000.0,
    dtoh: str = "Pageable",
    sync: bool = True,
    one_time_us: dict[int, float] | None = None,
    run_json: dict[str, Any] | None = None,
    gap_us: float = 3_000.0,
    early_copy: bool = False,
) -> Path:
    """Each step: ``aten::mm`` (input dims ``mm_dims`` of dtype ``mm_types``) launching a GEMM of ``mm_us``, then a
    1 MiB device-to-host copy to ``dtoh`` memory (``sync``: followed by a
    ``cudaStreamSynchronize`` that waits for it), then ``gap_us`` of host time; ``one_time_us``:
    step index -> a ``cudaMalloc`` of that length (the GPU idle) at the start of that step.
    ``run_json``: written beside the trace as run.json; ``early_copy``: the host queues the copy
    right after the GEMM's launch (it runs when the GEMM ends) and the sync waits for both."""
    b = TraceBuilder()
    t0 = 0.0
    dims = mm_dims or [[4, 128, 1024], [1024, 1024]]
    for i in range(steps):
        extra = (one_time_us or {}).get(i, 0.0)
        copy_at = t0 + extra + mm_us + 200
        step_us = extra + mm_us + 1_000 + gap_us
        b.step(i + 1, t0, step_us)
        if extra:
            b.runtime("cudaMalloc", t0 + 5, extra - 10)
        host = t0 + extra
        op = b.op("aten::mm", host + 10, 30, dims=dims, types=[mm_types] * len(dims))
        b.launch(
            op, "cudaLaunchKernel", host + 20, 5, kernel=GEMM, gpu_ts=host + 100, gpu_dur=mm_us
        )
        call_at = host + 60 if early_copy else copy_at - 10
        wait = copy_at + 500 - (call_at + 15) if early_copy else 500
        to = b.op("aten::to", call_at - 10, wait + 100 if sync else 30)
        b.launch(
            to,
            "cudaMemcpyAsync",
            call_at,
            10,
            memcpy=(f"Memcpy DtoH (Device -> {dtoh})", 1 << 20),
            gpu_ts=copy_at,
            gpu_dur=500 if dtoh == "Pageable" else 100,
        )
        if sync:
            b.runtime("cudaStreamSynchronize", call_at + 15, wait, op=to)
        t0 += step_us
    out = b.write(path)
    if run_json is not None:
        (path.parent / "run.json").write_text(json.dumps(run_json))
    return out
