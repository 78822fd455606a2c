"""What a fix saves: the steady steps replayed with it, against the unchanged replay.

``whatif(trace, fix)`` replays every steady step with the fix applied; a step's saving is its
unchanged replayed time (the measured step, see :mod:`advisor.replay.model`) minus its time with
the fix; the saving reported is the mean over all the steady steps: a cause found in k of n
steps (a stall every few steps, a periodic checkpoint, a recompile) is valued over the steps
that have it, as its mean per step over all n (``Saving.steps_with``, ``Saving.steps``). Every
per-step figure of a finding reads the same statistic (its share: of the mean step).
Uncertain fixes (a range of speedups) are replayed at both ends too. Detectors reach it as
``ctx.whatif(fix)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from advisor.replay.engine import Replayed, one_step_of, replay
from advisor.replay.fixes import Combined, Fix, Level
from advisor.replay.model import graph
from advisor.replay.mods import Mods
from advisor.trace.model import Trace


@dataclass(frozen=True)
class Saving:
    """The replayed saving of one fix, per step (ms): ``ms`` at the detector's estimate,
    ``low_ms``/``high_ms`` at the ends of its range (equal to ``ms`` for a certain fix)."""

    ms: float  # the mean per steady step
    low_ms: float
    high_ms: float
    per_step_ms: tuple[float, ...]
    measured_ms: float  # mean steady step, as replayed unchanged
    replayed_ms: float  # mean steady step with the fix
    fix: Fix | None = field(default=None, compare=False, repr=False)
    replayed: bool = True  # False: the trace has no steps the replay can place
    trace_ms: float | None = None  # mean steady step as the trace measured it
    steps: int = 0  # steady steps replayed
    steps_with: int = 0  # ...of which the fix saves in (at least a tenth of its largest saving)

    @property
    def in_steps(self) -> str:
        """ " in k of n steps" when the saving comes from some of the steps only, else ""."""
        if 0 < self.steps_with < self.steps:
            return f" in {self.steps_with} of {self.steps} steps"
        return ""

    @property
    def range_ms(self) -> tuple[float, float] | None:
        if self.low_ms == self.high_ms == self.ms:
            return None
        return (round(min(self.low_ms, self.high_ms), 3), round(max(self.low_ms, self.high_ms), 3))

    @property
    def assumption(self) -> str:
        """One sentence for the finding's assumptions: how the figure was obtained."""
        if not self.replayed:
            return "Not replayed: the trace has no steady step the replay can place."
        rng = self.range_ms
        span = f" ({rng[0]:.2f}-{rng[1]:.2f} ms over the range)" if rng else ""
        t = self.trace_ms
        steady = (
            f" (its steady state, in which every step is like it: the trace measured "
            f"{t:.2f} ms, as GPU work ran on from one step into the next)"
            if t and abs(t - self.measured_ms) > 0.01 * t
            else ""
        )
        some = f"; it saves in {self.steps_with} of the {self.steps} steps" if self.in_steps else ""
        return (
            f"Replayed: each steady step's dependency graph (host calls, launches, stream "
            f"order, cross-stream waits, syncs) with the fix applied runs "
            f"{self.replayed_ms:.2f} ms instead of {self.measured_ms:.2f} ms{steady}; the "
            f"saving is the mean over the {self.steps} steps{some}{span}. See docs/savings.md."
        )

    def at_most(self, cap_ms: float) -> Saving:
        """This saving with every figure (the estimate, the range's ends, each step's) no larger
        than ``cap_ms`` per step: a bound the replay's graph does not hold (the fix's own
        limit, stated by the detector that applies it)."""
        if self.ms <= cap_ms and self.low_ms <= cap_ms and self.high_ms <= cap_ms:
            return self
        c = round(max(cap_ms, 0.0), 3)
        return replace(
            self,
            ms=min(self.ms, c),
            low_ms=min(self.low_ms, c),
            high_ms=min(self.high_ms, c),
            per_step_ms=tuple(min(x, c) for x in self.per_step_ms),
            replayed_ms=round(self.measured_ms - min(self.ms, c), 3),
        )

    @staticmethod
    def stated(fix: Fix, ms: float, range_ms: Sequence[float] | None = None) -> Saving:
        """The saving a detector stated itself for ``fix`` (not replayed here): ``ms`` per step
        and the ends of its range (a plugin handing its fix over as ``extra["fix"]``)."""
        lo, hi = (range_ms[0], range_ms[1]) if range_ms is not None else (ms, ms)
        return Saving(ms, lo, hi, (), 0.0, 0.0, fix, replayed=False)

    def draft_fields(self) -> dict[str, Any]:
        """``est_savings_ms``, ``est_savings_range_ms`` and ``saving`` (this record: its fix
        is replayed with the others' for the headline) for a :class:`~advisor.detect.Draft`."""
        return {
            "est_savings_ms": self.ms,
            "est_savings_range_ms": self.range_ms,
            "saving": self,
        }


def base(trace: Trace) -> Replayed:
    """The unchanged replay of ``trace`` (once per trace)."""
    gr = graph(trace)
    return trace.memo("whatif.base", lambda: replay(gr, Mods.of(gr)))


def replayable(trace: Trace) -> bool:
    gr = graph(trace)
    st = gr.steps
    return gr.n_h > 0 and gr.n_g > 0 and len(st.bounds_ns) >= 2 and bool((st.anchor >= 0).any())


def replay_with(trace: Trace, fix: Fix, level: Level = "mid", one_step: bool = False) -> Replayed:
    gr = graph(trace)
    return replay(gr, _applied(trace, fix, level), one_step)


def _applied(trace: Trace, fix: Fix, level: Level) -> Mods:
    """The unchanged replay's :class:`Mods` with ``fix`` applied at ``level``."""
    gr = graph(trace)
    mods = Mods.of(gr)
    fix.apply(trace, gr, mods, level)
    return mods


def _base_one(trace: Trace) -> Replayed:
    gr = graph(trace)
    return trace.memo("whatif.base_one", lambda: one_step_of(gr, Mods.of(gr), base(trace)))


def whatif(trace: Trace, fix: Fix, ends: bool = True) -> Saving:
    """The saving of ``fix`` on the steady steps of ``trace`` (see the module doc); ``ends``:
    also replay the ends of an uncertain fix's range (False: the estimate only, and the range
    is the estimate)."""
    if not replayable(trace):
        return Saving(0.0, 0.0, 0.0, (), 0.0, 0.0, fix, replayed=False)
    gr = graph(trace)
    chosen = gr.steps.chosen
    before = base(trace).step_ns.astype(float)[chosen]
    out: dict[str, tuple[float, np.ndarray, float]] = {}
    applied: dict[str, Mods] = {}  # the fix applied at each level, once (a replay only reads it)

    def mods(level: Level) -> Mods:
        if level not in applied:
            applied[level] = _applied(trace, fix, level)
        return applied[level]

    one_mid: list[float] = []
    full_mid: list[Replayed] = []  # the estimate's full replay (its one step is read off it)
    for level in ("mid", "low", "high") if fix.uncertain and ends else ("mid",):
        if level != "mid":
            if out["mid"][0] <= 0:
                # nothing saved at the estimate: the fix's work is off the critical path, and
                # the range ends are not replayed (a smaller effect saves nothing either)
                out[level] = out["mid"]
                continue
            # the range ends: the step closest to the median only, scaled to the estimate's
            # mean (the range is about the effect, not about which step)
            k = gr.steps.median_step
            b1 = float(_base_one(trace).step_ns[k])
            a1 = float(replay(gr, mods(level), True).step_ns[k])
            m1 = (
                float(one_step_of(gr, mods("mid"), full_mid[0]).step_ns[k])
                if not one_mid
                else one_mid[0]
            )
            one_mid[:] = [m1]
            saved1, mid1 = max(b1 - a1, 0.0) / 1e6, max(b1 - m1, 0.0) / 1e6
            ms = out["mid"][0] * saved1 / mid1 if mid1 > 0 else saved1
            # the shortcut holds where that step replayed alone saves what it saves in the full
            # replay at the estimate; where it does not (its time is decided by work carried
            # from the step before, which the one step lacks), the range ends replay in full
            full1 = (float(base(trace).step_ns[k]) - float(full_mid[0].step_ns[k])) / 1e6
            if mid1 <= 0 or abs(mid1 - full1) > 0.05 * max(full1, 1e-9):
                after = replay(gr, mods(level)).step_ns.astype(float)[chosen]
                ms = float(np.mean(np.maximum(before - after, 0.0) / 1e6))
            out[level] = (ms, out["mid"][1], out["mid"][2])
            continue
        full_mid[:] = [replay(gr, mods(level))]
        after = full_mid[0].step_ns.astype(float)[chosen]
        per = np.maximum(before - after, 0.0) / 1e6
        out[level] = (float(np.mean(per)), per, float(np.mean(after)) / 1e6)
    mid, per, rep = out["mid"]
    low = out.get("low", out["mid"])[0]
    high = out.get("high", out["mid"])[0]
    return Saving(
        ms=round(mid, 3),
        low_ms=round(low, 3),
        high_ms=round(high, 3),
        per_step_ms=tuple(round(float(x), 3) for x in per),
        measured_ms=round(float(np.mean(before)) / 1e6, 3),
        replayed_ms=round(rep, 3),
        fix=fix,
        trace_ms=round(float(np.mean(np.diff(gr.steps.bounds_ns)[chosen])) / 1e6, 3),
        steps=len(per),
        steps_with=int((per >= 0.1 * per.max()).sum()) if len(per) and per.max() > 0 else 0,
    )


def combined_bound_ms(
    trace: Trace, fixes: Sequence[Fix], rest_ms: float, step_ms: float
) -> float | None:
    """The headline "together at most X ms": ``fixes`` (every reported finding's) replayed at
    once, plus ``rest_ms`` (the savings of the findings that carry no fix), never above the
    step. None: no fix, or a trace the replay cannot place (the caller sums the savings)."""
    if not fixes or not replayable(trace):
        return None
    both = whatif(trace, Combined(list(fixes)), ends=False).ms + rest_ms  # the headline: no range
    return round(min(both, step_ms) if step_ms > 0 else both, 3)
