"""The detector registry: metadata, data requirements, and running them safely.

A detector is a pure function ``(trace, ctx) -> list[Draft]`` in its own module under
``heuristics/``, registered with :func:`detector`. Its module docstring is the user-facing
explanation (what, why it costs time, how the saving is estimated, how to fix it).
"""

from __future__ import annotations

import importlib
import pkgutil
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from advisor.findings import Draft
from advisor.locate import Locator
from advisor.thresholds import Thresholds
from advisor.trace.model import Trace


class Skip(Exception):  # noqa: N818 (a signal, not an error)
    """Raised by a detector when the data it needs is not in this trace."""


@dataclass
class Context:
    """What a detector gets besides the trace."""

    run: dict[str, Any] | None  # run.json from ``advisor profile``; None for bare traces
    thresholds: Thresholds
    step_ms_median: float
    locator: Locator

    def t(self, key: str) -> float:
        return self.thresholds[key]

    def run_get(self, *keys: str, default: Any = None) -> Any:
        """Nested lookup in run.json: ``ctx.run_get("backends", "cudnn_benchmark")``."""
        cur: Any = self.run
        for k in keys:
            if not isinstance(cur, dict) or k not in cur:
                return default
            cur = cur[k]
        return cur


DetectFn = Callable[[Trace, Context], list[Draft]]

NEEDS: dict[str, tuple[Callable[[Trace, Context], bool], str]] = {
    "gpu": (lambda t, c: t.has_gpu, "no GPU activity in this trace"),
    "kernels": (lambda t, c: len(t.kernels) > 0, "no GPU kernels in this trace"),
    "cpu_ops": (lambda t, c: len(t.cpu_ops) > 0, "no CPU operator events in this trace"),
    "shapes": (
        lambda t, c: t.has_shapes,
        "no input shapes in this trace (profile with record_shapes=True)",
    ),
    "stack": (
        lambda t, c: t.has_stack,
        "no Python stacks in this trace (profile with with_stack=True)",
    ),
    "steps": (
        lambda t, c: not t.meta.synthetic_steps,
        "no ProfilerStep markers: steps are unknown in this trace",
    ),
    "run": (
        lambda t, c: c.run is not None,
        "needs run.json, which only `advisor profile` records",
    ),
}


@dataclass(frozen=True)
class Detector:
    id: str
    title: str
    func: DetectFn
    needs: tuple[str, ...]
    doc: str
    gpu_only: bool

    def missing(self, trace: Trace, ctx: Context) -> str | None:
        for need in self.needs:
            check, reason = NEEDS[need]
            if not check(trace, ctx):
                return reason
        return None


_REGISTRY: dict[str, Detector] = {}


def detector(
    id: str, title: str, needs: tuple[str, ...] = (), gpu_only: bool = False
) -> Callable[[DetectFn], DetectFn]:
    """Register ``func`` as the detector for finding ``id``."""
    for n in needs:
        if n not in NEEDS:
            raise ValueError(f"unknown need {n!r} for detector {id}")
    all_needs = tuple(dict.fromkeys((("gpu",) if gpu_only else ()) + needs))

    def wrap(func: DetectFn) -> DetectFn:
        import sys

        mod = sys.modules.get(func.__module__)
        doc = (mod.__doc__ if mod is not None else None) or func.__doc__ or ""
        if id in _REGISTRY and _REGISTRY[id].func is not func:
            raise ValueError(f"detector {id} registered twice")
        _REGISTRY[id] = Detector(id, title, func, all_needs, doc.strip(), gpu_only)
        return func

    return wrap


_loaded = False


def all_detectors() -> list[Detector]:
    """Every registered detector (imports each module of ``heuristics`` once), sorted by id."""
    global _loaded
    if not _loaded:
        import heuristics

        for info in pkgutil.iter_modules(heuristics.__path__):
            if not info.name.startswith("_"):
                importlib.import_module(f"heuristics.{info.name}")
        _loaded = True
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


@dataclass(frozen=True)
class Outcome:
    drafts: list[Draft]
    skipped: list[tuple[str, str]]  # (id, reason)
    errored: list[tuple[str, str, str]]  # (id, one-line error, traceback)


def run_detectors(
    trace: Trace,
    ctx: Context,
    only: set[str] | None = None,
    skip: set[str] | None = None,
) -> Outcome:
    drafts: list[Draft] = []
    skipped: list[tuple[str, str]] = []
    errored: list[tuple[str, str, str]] = []
    for det in all_detectors():
        if only and det.id not in only:
            continue
        if skip and det.id in skip:
            skipped.append((det.id, "skipped with --skip"))
            continue
        reason = det.missing(trace, ctx)
        if reason:
            skipped.append((det.id, reason))
            continue
        try:
            found = det.func(trace, ctx)
        except Skip as s:
            skipped.append((det.id, str(s)))
            continue
        except Exception as err:  # a broken detector never sinks the report
            errored.append((det.id, f"{type(err).__name__}: {err}", traceback.format_exc()))
            continue
        for d in found:
            if det.gpu_only and not trace.has_gpu and not d.latent:
                errored.append(
                    (det.id, "GPU-only detector claimed a saving on a CPU-only trace", "")
                )
                break
            drafts.append(d)
    return Outcome(drafts, skipped, errored)
