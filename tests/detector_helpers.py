"""Helpers for the detector tests (not a test module): run one detector through the whole engine
(thresholds, ranking) on a trace and pick its finding or skip reason; builders of common trace
fragments."""

from __future__ import annotations

from typing import Any

from advisor import runinfo
from advisor.analysis.pipeline import Options, analyze_trace
from advisor.findings import Finding
from advisor.report import Report
from advisor.trace.model import Trace
from tests.tracebuilder import TraceBuilder


def analyze(
    trace: Trace,
    det: str,
    run: dict[str, Any] | None = None,
    overrides: dict[str, float] | None = None,
    **more: float,
) -> Report:
    """Analyze ``trace`` with only detector ``det``; thresholds in ``overrides`` or as keyword
    arguments (``tiny_kernels__min_per_step=5``: dots as ``__``). No detector may error."""
    over = {**(overrides or {}), **{k.replace("__", "."): float(v) for k, v in more.items()}}
    rep = analyze_trace(trace, runinfo.read(run), Options(only=frozenset({det}), overrides=over))
    assert not rep.errored, rep.errored
    return rep


def found(rep: Report, det: str) -> list[Finding]:
    return [f for f in rep.findings if f.id == det]


def one(rep: Report, det: str) -> Finding:
    """The one finding of ``det`` (there must be exactly one)."""
    fs = found(rep, det)
    assert len(fs) == 1, rep.findings
    return fs[0]


def finding(rep: Report, det: str) -> Finding | None:
    """The finding of ``det``, or None (never more than one)."""
    fs = found(rep, det)
    assert len(fs) <= 1, fs
    assert not rep.errored, rep.errored
    return fs[0] if fs else None


def skip_reason(rep: Report, det: str) -> str | None:
    return next((s.reason for s in rep.skipped if s.id == det), None)


def htod(
    b: TraceBuilder,
    ts: float,
    nbytes: int,
    gpu_dur: float,
    *,
    src: str = "Pageable",
    call_dur: float | None = None,
    sync: bool = True,
    shape: list[int] | None = None,
    gpu_delay: float = 2.0,
    kind: str = "HtoD",
    wait: float = 6.0,
) -> dict[str, Any]:
    """``tensor.to(device)``: aten::to > aten::copy_ > cudaMemcpyAsync (+ cudaStreamSynchronize).

    Returns the aten::to op. The host call lasts ``call_dur`` us (default: the copy, as for a
    pageable copy that blocks the call)."""
    call = gpu_dur + gpu_delay if call_dur is None else call_dur
    wait = wait if sync else 0.0
    total = 4 + call + wait + 4
    dims = [shape, [], [], [], []] if shape else None
    to = b.op("aten::to", ts, total, dims=dims, types=["float"] if shape else None)
    cp = b.op("aten::copy_", ts + 1, total - 2, dims=[shape, shape, []] if shape else None)
    name = f"Memcpy HtoD ({src} -> Device)" if kind == "HtoD" else f"Memcpy DtoH (Device -> {src})"
    b.launch(
        cp,
        "cudaMemcpyAsync",
        ts + 2,
        call,
        memcpy=(name, nbytes),
        gpu_ts=ts + 2 + gpu_delay,
        gpu_dur=gpu_dur,
    )
    if sync:
        b.runtime("cudaStreamSynchronize", ts + 2 + call + 1, wait - 1, cp)
    return to


def kernel_op(
    b: TraceBuilder,
    name: str,
    ts: float,
    dur: float,
    kernel: str,
    gpu_ts: float,
    gpu_dur: float,
    dims: list[Any] | None = None,
    types: list[Any] | None = None,
) -> dict[str, Any]:
    """An op that launches one kernel."""
    op = b.op(name, ts, dur, dims=dims, types=types)
    b.launch(
        op,
        "cudaLaunchKernel",
        ts + 1,
        min(5.0, dur - 2),
        kernel=kernel,
        gpu_ts=gpu_ts,
        gpu_dur=gpu_dur,
    )
    return op
