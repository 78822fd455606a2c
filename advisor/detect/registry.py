"""The detector API: what a detector is given (:class:`Context`), how it registers
(:func:`detector`, :func:`across_ranks`) and the data it may require (``needs``).

A detector is a pure function ``(trace, ctx) -> list[Draft]`` in its own module under
``heuristics/`` (installed as ``advisor.detectors``), registered with :func:`detector`; that
module's docstring is the user-facing explanation (what, why it costs time, how the saving is
estimated, how to fix it). Loading every detector and running them is
:mod:`advisor.analysis.detection`.

A detector may also look across ranks (several traces of one job): :func:`across_ranks`
registers ``(drafts, digests, ctx) -> drafts`` for its id, which the multi-rank merge
(:mod:`advisor.multirank.merge`) calls with the merged drafts and every rank's
:class:`~advisor.digest.Digest`; it returns the drafts with its own added or refined.

A plugin may also teach the loader which kernels are communication (:func:`comm_kernels`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from advisor.derive.locate import Locator
from advisor.detect.draft import Draft
from advisor.detect.thresholds import Thresholds
from advisor.digest import Digest
from advisor.runinfo import RunInfo
from advisor.trace.commroles import CommRule, add_rules
from advisor.trace.model import Trace

if TYPE_CHECKING:
    from advisor.replay.fixes import Fix
    from advisor.replay.whatif import Saving


class Skip(Exception):  # noqa: N818 (a signal, not an error)
    """Raised by a detector when the data it needs is not in this trace."""


@dataclass
class Context:
    """What a detector gets besides the trace."""

    run: RunInfo | None  # run.json from ``advisor profile``; None for bare traces
    thresholds: Thresholds
    step_ms_median: float
    locator: Locator
    trace: Trace | None = None  # the steady trace the detectors read (for the replay)

    def whatif(self, fix: Fix, trace: Trace | None = None) -> Saving:
        """The per-step saving of ``fix`` (:mod:`advisor.replay.fixes`), replayed on the steady
        steps of ``trace`` (default: the trace this context was made for)."""
        from advisor.replay.whatif import whatif

        tr = trace if trace is not None else self.trace
        if tr is None:
            raise ValueError("Context.whatif needs the trace (Context(trace=...))")
        return whatif(tr, fix)

    def t(self, key: str) -> float:
        return self.thresholds[key]

    @property
    def live(self) -> RunInfo:
        """run.json's facts, empty for a bare trace: ``ctx.live.backends.cudnn_benchmark`` is
        None both when the run did not record it and when there was no run."""
        return self.run if self.run is not None else _NO_RUN


_NO_RUN = RunInfo()

DetectFn = Callable[[Trace, Context], list[Draft]]


@dataclass(frozen=True)
class RanksContext:
    """What a cross-rank check gets besides the drafts and digests."""

    thresholds: Thresholds
    step_ms_median: float  # over every rank's steps

    def t(self, key: str) -> float:
        return self.thresholds[key]


RanksFn = Callable[[list[Draft], Sequence[Digest], RanksContext], list[Draft]]


@dataclass(frozen=True)
class RankCheck:
    """The cross-rank part of detector ``id``. ``only_across``: the detector finds nothing in
    one trace (its single-trace run skips), so it is skipped without two or more ranks."""

    id: str
    func: RanksFn
    only_across: bool
    plugin: str | None = None  # the plugin it comes from, run in a process of its own

    @property
    def builtin(self) -> bool:
        """One of torch-advisor's own checks (else a plugin's)."""
        return self.plugin is None and is_builtin(self.func.__module__)


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
        "no step markers and no unit of work that repeats: steps are unknown in this trace",
    ),
    "run": (
        lambda t, c: c.run is not None,
        "needs run.json, which only `advisor profile` records",
    ),
}


BUILTIN_PACKAGE = "advisor.detectors"  # where torch-advisor's own detectors live


def is_builtin(module: str) -> bool:
    """Whether ``module`` is one of torch-advisor's own detector modules (else: a plugin)."""
    return module.startswith(BUILTIN_PACKAGE + ".")


@dataclass(frozen=True)
class Detector:
    id: str
    title: str
    func: DetectFn
    needs: tuple[str, ...]
    doc: str
    gpu_only: bool
    # the plugin (entry point name or --detector value) it comes from: its module is never
    # imported in the analysing process, and ``func`` only stands in (advisor.analysis.plugins)
    plugin: str | None = None

    @property
    def builtin(self) -> bool:
        """One of torch-advisor's own detectors (else a plugin's)."""
        return self.plugin is None and is_builtin(self.func.__module__)

    def missing(self, trace: Trace, ctx: Context) -> str | None:
        for need in self.needs:
            check, reason = NEEDS[need]
            if not check(trace, ctx):
                return reason
        return None


_REGISTRY: dict[str, Detector] = {}
_RANK_CHECKS: dict[str, RankCheck] = {}


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
        _claim(id, func.__module__)
        if id in _REGISTRY and _REGISTRY[id].func is not func:
            raise ValueError(f"detector {id} registered twice")
        _REGISTRY[id] = Detector(id, title, func, all_needs, doc.strip(), gpu_only)
        return func

    return wrap


def across_ranks(id: str, only_across: bool = False) -> Callable[[RanksFn], RanksFn]:
    """Register ``func`` as the cross-rank check of detector ``id`` (see the module doc)."""

    def wrap(func: RanksFn) -> RanksFn:
        _claim(id, func.__module__)
        if id in _RANK_CHECKS and _RANK_CHECKS[id].func is not func:
            raise ValueError(f"cross-rank check {id} registered twice")
        _RANK_CHECKS[id] = RankCheck(id, func, only_across)
        return func

    return wrap


def _claim(id: str, module: str) -> None:
    """A plugin never registers for a built-in detector's id (neither a detector nor a check
    across ranks that would rewrite its drafts)."""
    owner = _REGISTRY.get(id)
    if owner is not None and owner.builtin and not is_builtin(module):
        raise ValueError(f"{id!r} is a built-in detector's id; a plugin needs an id of its own")


def comm_kernels(family: str, pattern: str, dedicated_stream: bool = False) -> None:
    """Count the kernels whose name matches ``pattern`` (a regular expression, searched
    case-insensitively) as communication of ``family``; with ``dedicated_stream``, only on a
    stream where every kernel is communication (:mod:`advisor.trace.commroles`, the one table
    of communication kernels). Call it when the plugin's module is imported."""
    add_rules([CommRule(family, pattern, dedicated_stream)])


def registered() -> list[Detector]:
    """The detectors registered so far, sorted by id."""
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def registered_rank_checks() -> list[RankCheck]:
    """The cross-rank checks registered so far, sorted by id."""
    return [_RANK_CHECKS[k] for k in sorted(_RANK_CHECKS)]
