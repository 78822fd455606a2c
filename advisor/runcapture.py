"""run.json's record of how the run went and what was captured: the evaluation window, the
phases not captured, what the recording limits cut, the profiler's settings, the software, the
ranks, the script's forks, ``advisor try``'s block, and the run.json written before the script
starts (:class:`RunStarted`). :class:`advisor.runinfo.RunInfo` holds them beside the facts the
detectors read; docs/run-json.md says what each key means.

Each field is declared as ``advisor profile`` writes it (``record.dump`` of the record it builds
is the file): a key the file holds only sometimes is ``omit_none()`` (left out while None) or,
where a ``null`` and a missing key say different things, ``omit_unset()``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from advisor.record import Unset, omit_none, omit_unset


@dataclass(frozen=True)
class WaitFacts:
    """``eval.wait``: how the wait for the evaluation phase went."""

    steps: int | None = None  # training steps during it
    seconds: float | None = None
    budget_s: float | None = None
    by_steps: bool | None = None
    step_s: float | None = None  # the script's pace


@dataclass(frozen=True)
class Eval:
    """``eval``: the evaluation window (docs/run-json.md "Phases")."""

    scope: str | None = omit_none()  # window | partial-window | none
    trace_written: bool | None = omit_none()
    missing: str | None | Unset = omit_unset()  # why there is no window (null: none missing)
    module: str | None = omit_none()
    steps_seen: int | None = omit_none()
    ended_by: str | None = omit_none()
    activities: tuple[str, ...] | None = omit_none()
    steps: tuple[int, ...] | None = omit_none()  # [first, last]
    trace: str | None = omit_none()
    call_sites: int | None | Unset = omit_unset()
    call_sites_error: str | None | Unset = omit_unset()
    export_error: str | None = omit_none()
    wait: WaitFacts | None = omit_none()
    epoch_left: int | None = omit_none()


@dataclass(frozen=True)
class MissingPhase:
    """A phase the run did not capture (``missing_phases``)."""

    phase: str | None = None  # train | eval
    missing: str | None = None  # a code (docs/run-json.md)
    why: str | None = None  # the sentence the terminal and the report show


@dataclass(frozen=True)
class CaptureLimit:
    """What a recording limit of the live run cut (``capture_limits``)."""

    what: str | None = None
    effect: str | None = None


@dataclass(frozen=True)
class Profile:
    """``profile``: the profiler's settings."""

    wait: int | None = None
    warmup: int | None = None
    active: int | None = None
    record_shapes: bool | None = None
    with_stack: bool | None = None
    profile_memory: bool | None = None
    max_seconds: float | None = None
    run_to_end: bool | None = None
    phases: tuple[str, ...] = ()
    eval_steps: int | None = None
    eval_wait: float | None = None
    max_window_seconds: float | None = None
    activities: tuple[str, ...] = ()


@dataclass(frozen=True)
class Versions:
    """``versions``: the software the script ran on."""

    torch: str | None = None
    cuda: str | None = None
    hip: str | None = None
    cudnn: int | None = None
    python: str | None = None
    platform: str | None = None


@dataclass(frozen=True)
class Distributed:
    """``distributed``: this rank under torchrun."""

    rank: int | None = None
    world_size: int | None = None
    local_rank: int | None = None
    run_id: str | None = None


@dataclass(frozen=True)
class Forks:
    """``forks``: the script's own ``os.fork()`` calls."""

    total: int | None = None
    while_recording: int | None = None


@dataclass(frozen=True)
class Try:
    """``try``: the fixes ``advisor try`` applied to this run (docs/try.md)."""

    fixes: tuple[str, ...] = ()
    applied: tuple[str, ...] = ()
    seed: int | None = None
    losses: tuple[float | None, ...] = ()
    outputs: tuple[float | None, ...] = ()
    notes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    counts: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    errors: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RunStarted:
    """The run.json written before the script starts, replaced when the run ends: it stays
    only when the process died before the advisor could write its report."""

    schema_version: int
    advisor_version: str
    script: str
    module: str | None
    argv: tuple[str, ...]
    cwd: str
    pid: int
    started_at: str
    trace: str
    notes: tuple[str, ...]
    ended_early: bool = True
    end_reason: str = "process-died"
    error: str = "the process ended before the advisor could write its report"
