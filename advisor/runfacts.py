"""The run facts: findings.json's ``run`` block (DESIGN section 3), as records.

What was analysed (trace, script, device, versions), the steady steps and the median step, the
GPU's busy share, how the run ended, what the trace is missing (``trace_quality``), what limits
the step (``bound``), the combined saving, the phases of a profile run and, for several ranks,
one row per rank. Built by :func:`advisor.analysis.pipeline.run_summary` (one trace) and
:func:`advisor.multirank.merge.run_block` (several); read by the renderers.

**Adding a fact** is one line in :class:`RunFacts` (or the record it belongs to), ``name: type =
default``; ``omit_none()`` / ``omit_empty()`` when findings.json should leave it out while unset
(:mod:`advisor.record`). The writer and the lenient reader follow from the declaration.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from advisor.record import flat, omit_empty, omit_none, renamed


@dataclass(frozen=True)
class QualityNote:
    """Something the trace is missing and what it costs the figures (``run.trace_quality``)."""

    what: str
    effect: str
    # what is missing (advisor.derive.quality.Issue.kind: "untraced", "graph", "harness"...);
    # "untraced" notes lead the report's header: the figures cannot claim what they hold
    kind: str | None = omit_none()


@dataclass(frozen=True)
class ExcludedStep:
    """A step (or stretch of the window) left out of the per-step figures, and why."""

    step: int | None
    start_ms: float
    ms: float
    reason: str


@dataclass(frozen=True)
class SteadySteps:
    """How the steps were found, when not simply every ProfilerStep (keys in ``run``)."""

    steps_source: str
    steps_excluded: tuple[ExcludedStep, ...] = ()


@dataclass(frozen=True)
class BoundStep:
    """One walked step's critical path: its share per kind of work, in %."""

    step: int
    shares_pct: Mapping[str, float] = flat(mapping=True)  # host, gpu, comm, copies, peer


@dataclass(frozen=True)
class Bound:
    """What limits the step (``run.bound``, :mod:`advisor.replay.bound`): the kind of work
    with the largest median share of the critical path (``by``) and the shares."""

    by: str
    shares_pct: Mapping[str, float]
    per_step: tuple[BoundStep, ...] = ()


@dataclass(frozen=True)
class PhaseWindow:
    """A captured phase: its trace, steps, median step and the ids of its findings."""

    trace: str
    steps_profiled: int
    step_ms_median: float
    findings: tuple[str, ...] = ()


@dataclass(frozen=True)
class PhaseMissed:
    """A phase that was not captured: ``missing`` a code (``ended``, ``eval-wait``,
    ``epoch-left``, ``next-epoch``, ``no-eval-code``, ...), ``why`` the sentence run.json
    ``missing_phases`` holds."""

    captured: bool = False
    missing: str | None = None
    why: str | None = omit_none()


@dataclass(frozen=True)
class Phase:
    """One row of ``run.phases`` (:mod:`advisor.analysis.phases`)."""

    phase: str
    window: PhaseWindow | None = flat()
    missed: PhaseMissed | None = flat()


@dataclass(frozen=True)
class RankRow:
    """One rank of a multi-rank analysis (``run.ranks``; docs/multirank.md)."""

    rank: int | None
    trace: str = ""
    steps: int = 0
    step_ms_median: float = 0.0
    gpu_busy_pct: float | None = None
    comm_pct: float | None = None
    comm_overlap_pct: float | None = None
    exposed_comm_ms_per_step: float | None = None
    lag_ms_per_step: float | None = None
    findings: int = 0
    error: str | None = omit_none()
    # by arrival at the collectives matched across ranks (advisor.derive.lag)
    late_ms_per_step: float | None = omit_none()  # its arrivals after the earliest rank's
    wait_ms_per_step: float | None = omit_none()  # inside collectives, waiting for the last rank
    replayed_step_ms: float | None = omit_none()  # its step in the job replay (advisor.replay.job)


@dataclass(frozen=True)
class Outlier:
    rank: int
    value: float
    median: float
    z: float


@dataclass(frozen=True)
class MetricSummary:
    """One metric over the ranks: median, extremes with their ranks, outliers."""

    label: str
    unit: str
    median: float
    min_value: float = renamed("min", 0.0)
    min_rank: int = 0
    max_value: float = renamed("max", 0.0)
    max_rank: int = 0
    outliers: tuple[Outlier, ...] = ()


@dataclass(frozen=True)
class Straggler:
    rank: int
    lag_ms_per_step: float


@dataclass(frozen=True)
class RanksSummary:
    """Who stands out among the ranks (``run.ranks_summary``, :mod:`advisor.multirank.rankstats`)."""

    metrics: Mapping[str, MetricSummary]
    straggler: Straggler | None = None


@dataclass(frozen=True)
class JobStep:
    """The job's step (the slowest rank's, median over the steps every rank has) as measured and
    as the job replay gives it back (:mod:`advisor.replay.job`; ``run.job_step``)."""

    measured_ms: float
    replayed_ms: float
    worst_rank_error_pct: float  # the largest difference of one rank's replayed step, in %
    collectives_joined: int  # collective instances matched across the ranks
    steps: int


@dataclass(frozen=True)
class Ranks:
    """The rows of a multi-rank analysis (keys in ``run``)."""

    ranks: tuple[RankRow, ...]
    ranks_missing: tuple[int, ...] = ()
    ranks_summary: RanksSummary | None = omit_none()
    job_step: JobStep | None = omit_none()


@dataclass(frozen=True)
class RunFacts:
    """findings.json's ``run`` block (one trace, or several ranks merged)."""

    trace: str | None = None  # None: an advisor profile run that wrote no trace
    script: str | None = None
    argv: tuple[str, ...] | None = None
    torch: str | None = None
    cuda: str | None = None
    device: str | None = None
    # where the device's name came from: run.json, --device, the trace's deviceProperties, or
    # inferred from kernel names (advisor/trace/identity.py)
    device_source: str | None = None
    compute_capability: str | None = None
    platform: str | None = None
    rank: int | None = None
    world_size: int | None = None
    steps_profiled: int = 0
    steps_synthetic: bool = False
    steady: SteadySteps | None = flat()
    step_ms_median: float = 0.0
    # the mean steady step: findings' savings are means per step, and their shares of it
    step_ms_mean: float | None = omit_none()
    # share of the steady steps' wall time the main GPU was busy (None: no GPU activity);
    # for several ranks the mean of the ranks' (see RankRow)
    gpu_busy_pct: float | None = None
    # share of the steady steps' wall time the host's main thread worked: the steps less the
    # time it waited for the device (advisor.replay.evidence.host_own_pct); None: not measured;
    # for several ranks the mean of the ranks'
    host_own_pct: float | None = omit_none()
    ended_early: bool = False
    end_reason: str | None = None
    # an advisor profile run that ended (an import error, a bad argument) before the script's
    # first step: nothing of the script's work was profiled (run.json steps_seen 0, ended early)
    before_first_step: bool | None = omit_none()
    events_skipped: int = 0
    # what the trace is (advisor/derive/kind.py): training, inference, serving,
    # micro-benchmark, capture, mixed; and the evidence for it
    trace_kind: str | None = None
    trace_kind_evidence: str | None = None
    # the unit of work a step is (advisor/derive/steps.py, iterations.py): the range that
    # carries the iterations ("ProfilerStep#N", "Torch-Compiled Region: 0/0", ".../gpu_model_
    # runner.py(1002): execute_model", "the recording"...) and why it was chosen
    step_unit: str | None = omit_none()
    step_unit_evidence: str | None = omit_none()
    trace_quality: tuple[QualityNote, ...] = ()
    notes: tuple[str, ...] = omit_empty()
    est_savings_bound_ms: float = 0.0
    est_savings_bound_how: str | None = omit_none()
    bound: Bound | None = None
    phases: tuple[Phase, ...] | None = omit_none()
    ranks: Ranks | None = flat()

    @property
    def saving_step_ms(self) -> float:
        """The step a saving is a share of: the mean step (a finding's saving is its mean per
        step), else the median one (a file written before the mean was kept)."""
        mean = self.step_ms_mean
        return float(mean if mean is not None else self.step_ms_median or 0.0)
