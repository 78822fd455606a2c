"""For code that runs torch.profiler itself, or cannot be launched through ``advisor profile``.

``advisor.on_trace_ready(out_dir)``: a drop-in for ``torch.profiler.tensorboard_trace_handler``.
Each time the profiler's schedule completes a window it exports the trace the same way
(``<worker>.<time ns>.pt.trace.json.gz`` in ``out_dir``, which TensorBoard reads) and writes
``<same name>.findings.json`` and ``<same name>.report.html`` beside it::

    with torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),
                                on_trace_ready=advisor.on_trace_ready("runs/prof"),
                                record_shapes=True, with_stack=True) as prof:
        for batch in loader:
            train_step(batch)
            prof.step()

``with advisor.capture(out="advisor-runs/cell"):`` profiles the block (a notebook cell, a
request in a service): CPU, and CUDA when there is a GPU, with shapes and Python stacks; each
``optimizer.step()`` ends a step (loops without an optimizer call ``advisor.step()``). On leaving the block it writes
``trace.json.gz``, ``findings.json`` and ``report.html`` into ``out`` (an existing non-empty
folder is refused unless ``force=True``) and the result is ``.report``.

Both write the exact line of each call the user's code made into the trace when the profiler
records Python stacks (:func:`export_with_call_sites`, as ``advisor profile`` does), so a
finding names the line of the ``.item()`` itself, not the line the loop stood on when the
window began. The analysis never raises into the training loop: a trace that cannot be
analysed gives one warning and the trace is kept.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from advisor.api import Report
from advisor.errors import AdvisorError
from advisor.runfolder import TRACE_NAME
from advisor.runinfo import Device, RunInfo


def _options(
    only: Iterable[str],
    skip: Iterable[str],
    thresholds: Mapping[str, float] | None,
    no_source: bool,
) -> Any:
    from advisor.analysis.pipeline import options_from_cli
    from advisor.trace.source import DEFAULT_MAX_TRACE_BYTES

    sets = [f"{k}={v}" for k, v in (thresholds or {}).items()]
    return options_from_cli(list(only), list(skip), sets, False, no_source, DEFAULT_MAX_TRACE_BYTES)


def live_context() -> RunInfo:
    """What this process knows that a trace does not: script, argv, cwd, versions, device."""
    ctx = RunInfo(
        script=os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else None,
        argv=tuple(sys.argv[1:]),
        cwd=os.getcwd(),
    )
    torch = sys.modules.get("torch")
    if torch is not None:
        version = getattr(torch, "__version__", None)
        cuda = getattr(getattr(torch, "version", None), "cuda", None)
        ctx = replace(
            ctx,
            torch=version if isinstance(version, str) else None,
            cuda=cuda if isinstance(cuda, str) else None,
        )
        try:
            if torch.cuda.is_available():
                i = torch.cuda.current_device()
                p = torch.cuda.get_device_properties(i)
                dev = Device(
                    name=p.name,
                    compute_capability=f"{p.major}.{p.minor}",
                    total_memory_bytes=int(p.total_memory),
                )
                ctx = replace(ctx, device=dev)
        except Exception:  # noqa: BLE001 (facts only; never break the caller)
            pass
    return ctx


def export_with_call_sites(prof: Any, trace: Path) -> None:
    """Export ``prof``'s trace to ``trace`` (gzipped when its name ends in ``.gz``) with the
    exact line of each call the user's code made written in (:mod:`advisor.profile.callsites`,
    as ``advisor profile`` does), when the profiler recorded Python stacks: without them every
    frame has only the line it stood on when the trace began, or its ``def`` line. A failure
    to read the call sites keeps those lines (the export itself is as torch's)."""
    from advisor.profile import callsites
    from advisor.profile.capture import export_trace

    amend = None
    if getattr(prof, "with_stack", False):
        amend = callsites.amender(prof, lambda n, error: None, lambda t0: None)
    if amend is None:
        prof.export_chrome_trace(str(trace))
        return
    if trace.name.endswith(".gz"):
        error = export_trace(prof, trace, amend)
        if error is not None:
            raise OSError(error)
        return
    prof.export_chrome_trace(str(trace))
    amend(trace)


def analyze_exported(trace: Path, options: Any, outputs: Callable[[Any], None]) -> Report | None:
    """Analyse a trace this process just exported and hand the raw report to ``outputs``;
    a failure is one warning (the caller's loop goes on), and None."""
    from advisor.analysis.pipeline import analyze_trace
    from advisor.trace import load_trace

    try:
        raw = analyze_trace(load_trace(trace, options.max_trace_bytes), live_context(), options)
        outputs(raw)
    except (AdvisorError, OSError, MemoryError, ValueError) as err:
        warnings.warn(f"torch-advisor: {trace}: not analysed ({err})", RuntimeWarning, stacklevel=3)
        return None
    return Report(raw)


class TraceReadyHandler:
    """The callable ``on_trace_ready`` returns; ``.reports`` lists the results so far."""

    def __init__(
        self, out_dir: str | Path, worker_name: str | None, use_gzip: bool, options: Any
    ) -> None:
        self.out_dir = Path(out_dir)
        self.worker_name = worker_name
        self.use_gzip = use_gzip
        self.options = options
        self.reports: list[Report] = []
        self.traces: list[Path] = []

    def __call__(self, prof: Any) -> None:
        from advisor.output.html import render_html
        from advisor.output.outfiles import atomic_write

        self.out_dir.mkdir(parents=True, exist_ok=True)
        worker = self.worker_name or f"{socket.gethostname()}_{os.getpid()}"
        stem = f"{worker}.{time.time_ns()}.pt.trace"
        trace = self.out_dir / (stem + (".json.gz" if self.use_gzip else ".json"))
        export_with_call_sites(prof, trace)
        self.traces.append(trace)

        def outputs(raw: Any) -> None:
            atomic_write(self.out_dir / f"{stem}.findings.json", raw.to_json())
            atomic_write(self.out_dir / f"{stem}.report.html", render_html(raw).encode("utf-8"))

        report = analyze_exported(trace, self.options, outputs)
        if report is not None:
            self.reports.append(report)


def on_trace_ready(
    out_dir: str | Path,
    worker_name: str | None = None,
    use_gzip: bool = True,
    *,
    only: Iterable[str] = (),
    skip: Iterable[str] = (),
    thresholds: Mapping[str, float] | None = None,
    no_source: bool = False,
) -> TraceReadyHandler:
    """A ``torch.profiler.profile(on_trace_ready=...)`` handler: exports the trace as
    ``tensorboard_trace_handler`` does and writes findings.json and report.html beside it
    (see the module doc). Options as :func:`advisor.analyze`."""
    return TraceReadyHandler(
        out_dir, worker_name, use_gzip, _options(only, skip, thresholds, no_source)
    )


class capture:  # noqa: N801 (a context manager used like a function: ``with advisor.capture()``)
    """Profile the ``with`` block and write the advisor's report (see the module doc)."""

    def __init__(
        self,
        out: str | Path = "advisor-runs/capture",
        *,
        force: bool = False,
        profile_memory: bool = False,
        only: Iterable[str] = (),
        skip: Iterable[str] = (),
        thresholds: Mapping[str, float] | None = None,
        no_source: bool = False,
    ) -> None:
        self.out = Path(out)
        self.force = force
        self.profile_memory = profile_memory
        self.options = _options(only, skip, thresholds, no_source)
        self.report: Report | None = None
        self.written: dict[str, Path] = {}
        self._prof: Any = None
        self._saved_step: Any = None

    def __enter__(self) -> capture:
        import advisor
        from advisor.output.outfolder import prepare_out_dir

        if advisor._step_hook is not None:
            raise AdvisorError(
                "advisor.capture() cannot run inside `advisor profile`, which "
                "profiles the whole script already"
            )
        prepare_out_dir(self.out, self.force, create=False)
        import torch
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            acts.append(ProfilerActivity.CUDA)
        # no schedule, so no ProfilerStep ranges: the steps end at each optimizer step (the
        # Optimizer.step#... ranges torch records) or advisor.step() mark, and the block's
        # tail after the last one is no step (advisor.derive.steps)
        self._prof = profile(
            activities=acts, record_shapes=True, with_stack=True, profile_memory=self.profile_memory
        )
        self._prof.__enter__()
        self._saved_step = advisor._step_hook
        advisor._step_hook = self.step
        return self

    def step(self) -> None:
        """End one step (``advisor.step()`` calls this; optimizer steps need no call)."""
        if self._prof is not None:
            from torch.autograd.profiler import record_function

            from advisor.derive.steps import STEP_MARK

            with record_function(STEP_MARK):
                pass

    def __exit__(self, *exc: object) -> None:
        import advisor
        from advisor.analysis.pipeline import write_outputs
        from advisor.output.outfolder import prepare_out_dir

        advisor._step_hook = self._saved_step
        prof, self._prof = self._prof, None
        prof.__exit__(None, None, None)
        prepare_out_dir(self.out, self.force)
        trace = self.out / TRACE_NAME
        export_with_call_sites(prof, trace)

        def outputs(raw: Any) -> None:
            self.written = {"trace": trace, **write_outputs(raw, self.out)}

        self.report = analyze_exported(trace, self.options, outputs)
