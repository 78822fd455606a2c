"""How long ``advisor profile`` waits for the evaluation phase after the training window: by
what the script does, not by the clock alone.

A loop evaluates after an epoch (or every so many steps), so the phase comes after a number of
the script's own training steps, not after a number of seconds: on a loaded machine each step
takes longer, and a wait counted in seconds ends before the phase comes. So:

- **The wait is counted in steps.** It lasts up to :data:`EVAL_WAIT_STEPS` training steps at the
  script's own pace (the median time between its steps since the training window, which run at
  native speed; before the second of them, between the steps before the window), or
  ``--eval-wait`` seconds (default :data:`DEFAULT_EVAL_WAIT_S`) when
  those are longer (a fast loop), at most :data:`EVAL_WAIT_MAX_S`. A ``--eval-wait`` the user
  gives is kept as given (seconds, no steps).
- **The epoch ends it early.** When the training steps draw from a DataLoader with a length, the
  steps left in its epoch are known: once they cannot end within the wait (at the script's
  pace), no evaluation after this epoch can be captured and the wait ends at once
  (``epoch-left``). When the script starts another pass over that loader and trains again
  without having evaluated, it does not evaluate after every epoch and the wait ends
  (``next-epoch``). Both keep the wait cheap: the script is not run on for nothing.

:class:`EvalWait` holds the arithmetic and :class:`Epochs` the training loader's passes;
:mod:`advisor.profile.session` asks them at each training step and when its timer fires.
"""

from __future__ import annotations

import statistics
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from advisor.runcapture import WaitFacts

EVAL_WAIT_STEPS = 200  # training steps waited for the evaluation phase (at the script's pace)
DEFAULT_EVAL_WAIT_S = 10.0  # --eval-wait: short, so a never-ending script ends soon after
EVAL_WAIT_MAX_S = 600.0  # whatever the pace, the wait never passes this


def pace_s(step_times_s: Sequence[float], first: int, skip: int = 1) -> float | None:
    """The median time between consecutive steps from index ``first`` of ``step_times_s`` (the
    time of each step, in order); None without two of them. ``skip`` leading steps of the list
    are left out when it is used whole (the first step includes the script's set-up)."""
    times = list(step_times_s[max(first, 0) :])
    if first <= 0:
        times = times[skip:]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False) if b >= a]
    return statistics.median(gaps) if gaps else None


@dataclass
class EvalWait:
    """The wait that started at ``t0_s`` after step ``g0`` (``step_times_s`` indexes: the steps
    done by then); ``floor_s`` the seconds it lasts at least; ``by_steps`` whether it extends
    to :data:`EVAL_WAIT_STEPS` steps at the script's pace."""

    t0_s: float
    g0: int
    floor_s: float
    by_steps: bool = True

    def pace(self, step_times_s: Sequence[float]) -> float | None:
        """Seconds per training step: measured on the steps since the wait began (native
        speed), else on the steps before the training window."""
        since = pace_s(step_times_s, self.g0)
        return since if since is not None else pace_s(step_times_s[: self.g0], 0)

    def budget_s(self, step_times_s: Sequence[float]) -> float:
        """How long the wait lasts, from its start."""
        if not self.by_steps:
            return self.floor_s
        p = self.pace(step_times_s)
        steps_s = EVAL_WAIT_STEPS * p if p is not None else 0.0
        return min(max(self.floor_s, steps_s), max(self.floor_s, EVAL_WAIT_MAX_S))

    def left_s(self, now_s: float, step_times_s: Sequence[float]) -> float:
        """Seconds of the wait left at ``now_s`` (0 or less: it is over)."""
        return self.t0_s + self.budget_s(step_times_s) - now_s

    def epoch_out_of_reach(
        self, now_s: float, step_times_s: Sequence[float], epoch_left: int | None
    ) -> bool:
        """The steps left in the training loader's epoch cannot end within the wait (judged
        once two steps since the wait began give the pace)."""
        if epoch_left is None or epoch_left <= 0 or len(step_times_s) - self.g0 < 2:
            return False
        p = pace_s(step_times_s, self.g0)
        return p is not None and now_s + epoch_left * p > self.t0_s + self.budget_s(step_times_s)

    def facts(self, now_s: float, steps_seen: int, step_times_s: Sequence[float]) -> WaitFacts:
        """run.json ``eval.wait``: how the wait went."""
        p = self.pace(step_times_s)
        return WaitFacts(
            steps=max(steps_seen - self.g0, 0),
            seconds=round(now_s - self.t0_s, 3),
            budget_s=round(self.budget_s(step_times_s), 3),
            by_steps=self.by_steps,
            step_s=None if p is None else round(p, 6),
        )


class Epochs:
    """The training loader's passes: the latest DataLoader iterated while training (weak
    references: nothing here keeps a loader or its workers alive) and whether it began another
    pass during the wait."""

    def __init__(self) -> None:
        self._refs: tuple[Any, Any] | None = None
        self.next_epoch = False

    def on_iter(self, loader: Any, iterator: Any, phase: str) -> None:
        """A new pass over ``loader`` while the session is in ``phase``."""
        try:
            if phase in ("probe", "gap", "window"):
                self._refs = (weakref.ref(loader), weakref.ref(iterator))
            elif phase == "await-eval" and self._refs is not None:
                self.next_epoch = self.next_epoch or self._refs[0]() is loader
        except TypeError:  # not weak-referenceable: no epochs known
            self._refs = None

    def left(self) -> int | None:
        """Steps left in the training loader's current pass (None: unknown)."""
        if self._refs is None:
            return None
        loader, it = self._refs[0](), self._refs[1]()
        try:
            return max(int(len(loader)) - int(it._num_yielded), 0)
        except Exception:  # noqa: BLE001 (gone, or no length: an IterableDataset)
            return None
