"""Shared fixtures for the report tests: a small GPU trace with a known time breakdown and
hand-made findings (detectors are not needed to test the report)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from advisor import runinfo
from advisor.analysis.pipeline import run_summary
from advisor.analysis.ranking import rank
from advisor.analysis.views import build_views
from advisor.detect import Draft, Evidence, Location
from advisor.detect.thresholds import Thresholds
from advisor.findings import savings_bound_ms
from advisor.report import Errored, Report, Skipped
from advisor.trace import Trace
from tests.tracebuilder import TraceBuilder

GOLDEN = Path(__file__).resolve().parent / "golden"
EVIL = "<script>alert(1)</script>"
KERNEL = "void at::native::vectorized_elementwise_kernel<4, at::native::<lambda()>&, float>"
DOCS: dict[str, tuple[str, str]] = {
    "sync-point": (
        "Host waits on the device",
        "Host waits on the device.\n\nWhy it costs "
        "time: the CPU stops issuing work while\nthe GPU drains its queue.\n\n"
        "- `.item()` copies a scalar to the host\n- `cudaStreamSynchronize`\n"
        "  blocks the thread\n\nFix: keep values on the GPU.",
    ),
    "dataloader-stall": ("Steps wait on the DataLoader", "Steps waiting on `DataLoader.__next__`."),
    "tiny-kernels": (
        "Launch-bound tiny kernels",
        "Many tiny kernels <b>starve</b> the GPU & more.",
    ),
    "memory-headroom": ("Memory headroom", "Peak memory far below capacity."),
    "gpu-idle": ("GPU idle inside steps", "Idle GPU time."),
}


def gpu_builder(kernel_name: str = KERNEL) -> TraceBuilder:
    """3 steps (times in us). Step 1: data loading 0-300, compute 400-700, communication
    700-800 (overlaps compute from 650), memcpy 800-850, idle the rest (250)."""
    b = TraceBuilder(cc=(8, 0))
    b.header["baseTimeNanoseconds"] = 1_700_000_000_000_000_000
    b.step(1, 0, 1000)
    b.step(2, 1000, 1000)
    b.step(3, 2000, 500)
    b.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 300)
    mm = b.op("aten::mm", 300, 100)
    b.launch(mm, "cudaLaunchKernel", 310, 10, kernel=kernel_name, gpu_ts=400, gpu_dur=300)
    ar = b.op("c10d::allreduce_", 400, 50)
    b.launch(
        ar,
        "cudaLaunchKernel",
        410,
        10,
        kernel="ncclKernel_AllReduce_RING_LL_Sum_float",
        gpu_ts=650,
        gpu_dur=150,
    )
    cp = b.op("aten::copy_", 450, 50)
    b.launch(
        cp,
        "cudaMemcpyAsync",
        460,
        10,
        memcpy=("Memcpy HtoD (Pageable -> Device)", 4096),
        gpu_ts=800,
        gpu_dur=50,
    )
    mm2 = b.op("aten::mm", 1010, 50)
    b.launch(mm2, "cudaLaunchKernel", 1020, 10, kernel=kernel_name, gpu_ts=1100, gpu_dur=800)
    z = b.op("aten::zero_", 2000, 20)
    b.launch(
        z, "cudaMemsetAsync", 2001, 5, memcpy=("Memset (Device)", 1024), gpu_ts=2000, gpu_dur=100
    )
    mm3 = b.op("aten::mm", 2050, 20)
    b.launch(mm3, "cudaLaunchKernel", 2060, 10, kernel=kernel_name, gpu_ts=2100, gpu_dur=100)
    b.memory(100, 1 << 30, 1 << 30, 2 << 30)
    b.memory(500, 1 << 30, 3 << 30, 4 << 30)
    b.memory(900, -(1 << 30), 2 << 30, 4 << 30)
    return b


def sample_drafts(trace: Trace, evil: bool = True) -> list[Draft]:
    o = trace.to_trace_us(0)
    return [
        Draft(
            "sync-point",
            "Host waits on the device",
            0.2,
            "high",
            "`loss.item()` makes the host wait 0.20 ms per step for the GPU.",
            "Keep the loss on the GPU and call `.item()` every N steps.",
            "if step % 100 == 0:\n    print(loss.item())",
            evidence=tuple(
                Evidence(f"cudaStreamSynchronize #{i}", 3, 0.6 - i / 100, o + 700 + i)
                for i in range(10)
            ),
            locations=(
                Location("train_example.py", 12, "train", 3),
                Location("/nonexistent/dir/lib.py", 7, "helper", 1),
            ),
            assumptions=("the GPU stays busy once the host stops waiting",),
            est_savings_range_ms=(0.1, 0.25),
        ),
        Draft(
            "dataloader-stall",
            "Steps wait on the DataLoader",
            0.3,
            "high",
            "Each step waits 0.30 ms (36%) in `DataLoader.__next__` with num_workers=0.",
            "Load in worker processes: `DataLoader(num_workers=4, pin_memory=True)`.",
            "loader = DataLoader(ds, batch_size=64, num_workers=4, pin_memory=True)",
            evidence=(
                Evidence("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 1, 0.3, o),
            ),
            locations=(Location("train_example.py", 6, "train", 1),),
            assumptions=("workers hide the loading time completely",),
        ),
        Draft(
            "tiny-kernels",
            (EVIL + " & <b>kernels</b>") if evil else "Tiny kernels",
            0.02,
            "low",
            f"Kernel {EVIL if evil else 'k'} runs 3 times for 0.02 ms & more.",
            "Fuse with `torch.compile`.",
            "model = torch.compile(model)",
            evidence=(Evidence(EVIL if evil else "k", 3, 0.06, o + 400),),
        ),
        Draft(
            "memory-headroom",
            "Memory headroom",
            0.0,
            "medium",
            "Peak memory is 3.0 GiB of 80 GiB.",
            "Raise the batch size.",
            "",
            latent=True,
        ),
    ]


def sample_report(
    trace: Trace, run_ctx: dict[str, Any] | None = None, evil: bool = True, no_source: bool = False
) -> Report:
    ctx = (
        {
            "script": "train_example.py",
            "argv": ["--epochs", "1"],
            "torch": "2.5.1",
            "cuda": "12.4",
            "cwd": str(GOLDEN),
        }
        if run_ctx is None
        else run_ctx
    )
    th = Thresholds({})
    step = trace.median_step_ms()
    findings = rank(sample_drafts(trace, evil), step, th)
    run = dataclasses.replace(
        run_summary(trace, runinfo.read(ctx)), est_savings_bound_ms=savings_bound_ms(findings, step)
    )
    views = build_views(trace, runinfo.read(ctx), findings, DOCS, no_source=no_source)
    return Report(
        run=run,
        findings=tuple(findings),
        skipped=(
            Skipped(
                "fp32-matmul", "no input shapes in this trace (profile with record_shapes=True)"
            ),
        ),
        errored=(Errored("gpu-idle", "ZeroDivisionError: division by zero", "Traceback ..."),),
        thresholds={"rank.high_pct": 10.0, "rank.medium_pct": 3.0},
        advisor_version="0.0.0-test",
        views=views,
    )


def with_run(report: Report, **changes: Any) -> Report:
    return dataclasses.replace(report, run=dataclasses.replace(report.run, **changes))
