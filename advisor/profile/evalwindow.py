"""The evaluation window of ``advisor profile``: a second, short window in the script's
evaluation phase, after the training window.

Once the training window is exported the script runs on at native speed with the profiler off
(only the top-level module calls are watched, see :mod:`advisor.profile.fwdsteps`). The first
top-level call of a module with parameters that is evaluation (the module in ``eval()`` mode,
or autograd off under ``no_grad`` / ``inference_mode``) starts the phase: its calls of that
module are the evaluation steps. The profiler starts at the first one, runs ``warmup`` steps
(at least one: the profiler's own start-up is never measured), records ``eval_steps`` steps
(``ProfilerStep#N``, N counted from the phase's first call) and exports them to
``trace.eval.json.gz``; the script is then stopped (unless ``run_to_end``). ``--max-seconds``
bounds the wait for the phase; when none comes, ``run.json`` ``eval.missing`` says why. With
``--phases eval`` no training window is recorded and this window is the run's main trace
(``trace.json.gz``, run.json ``phase: "eval"``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from advisor.profile import facts
from advisor.profile.capture import Capture, SessionConfig, export_trace
from advisor.profile.execute import WindowCaptured
from advisor.profile.fwdsteps import has_parameters, in_eval
from advisor.runfolder import eval_trace_name


class Session(Protocol):
    """What the evaluation window uses of its :class:`advisor.profile.session.ProfileSession`
    (the session owns the window; the window names only this)."""

    phase: str

    @property
    def cfg(self) -> SessionConfig: ...
    @property
    def cap(self) -> Capture: ...
    @property
    def trace_path(self) -> Path: ...
    @property
    def torch(self) -> Any: ...  # the torch module
    @property
    def action(self) -> Any: ...  # torch.profiler.ProfilerAction
    def own(self) -> AbstractContextManager[None]: ...
    def eval_found(self) -> None: ...
    def forward_watch_off(self) -> None: ...
    def time_it(self, key: str, t0: float) -> None: ...
    def make_profiler(self, cuda: bool, schedule: Any, on_ready: Any) -> Any: ...
    def call_sites(
        self, prof: Any, put: Callable[[int | None, str | None], None]
    ) -> Callable[[Path], None] | None: ...


def eval_trace_path(trace_path: Path) -> Path:
    """``trace.json.gz`` -> ``trace.eval.json.gz`` (``trace.rank<R>.eval.json.gz`` per rank)."""
    return trace_path.with_name(eval_trace_name(trace_path.name))


class EvalWindow:
    def __init__(self, session: Session) -> None:
        self.s = session
        cfg = session.cfg
        self.first = 1 + max(cfg.warmup, 1)
        self.last = self.first + max(cfg.eval_steps, 1) - 1
        self.main = "train" not in cfg.phases  # no training window: this is the main trace
        self.path = session.trace_path if self.main else eval_trace_path(session.trace_path)
        self._mod: int | None = None
        self._n = 0
        self._prof: Any = None
        self._done = False
        self._t0 = 0.0

    @property
    def info(self) -> dict[str, Any]:
        return self.s.cap.eval

    def await_phase(self) -> None:
        """The training window is done: watch for the evaluation phase."""
        self.info.update(scope="none", trace_written=False, missing=None)
        self.s.phase = "await-eval"

    def _action(self, step: int) -> Any:
        a = self.s.action
        if step < self.first:
            return a.WARMUP
        if step < self.last:
            return a.RECORD
        return a.RECORD_AND_SAVE if step == self.last else a.NONE

    def on_forward(self, mod: Any) -> None:
        """A top-level module call while awaiting or recording the evaluation phase."""
        s = self.s
        if s.phase == "await-eval":
            if not in_eval(s.torch, mod) or not has_parameters(mod):
                return
            self._mod = id(mod)
            self.info["module"] = type(mod).__name__
            s.eval_found()
        if s.phase != "eval-window" or id(mod) != self._mod:
            return
        self._n += 1
        self.info["steps_seen"] = self._n
        if self._n == 1:
            self._start()
            return
        with s.own():
            self._prof.step()
        if self._done:
            self._stop()
            if not s.cfg.run_to_end:
                s.cap.stopped_after_window = True
                raise WindowCaptured()

    def _start(self) -> None:
        s = self.s
        t0 = time.perf_counter()
        cuda = facts.cuda_in_use()
        self.info["activities"] = ["cpu", "cuda"] if cuda else ["cpu"]
        self._prof = s.make_profiler(cuda, self._action, self._on_ready)
        self._prof.step_num = 1
        with s.own():
            self._prof.start()
        s.time_it("eval_window_start", t0)
        self._t0 = time.perf_counter()

    def _on_ready(self, prof: Any) -> None:
        s = self.s
        s.time_it("eval_window", self._t0)
        complete = self._n > self.last
        self.info["steps"] = [self.first, self.last if complete else self._n]
        t0 = time.perf_counter()

        def put(n: int | None, error: str | None) -> None:
            self.info["call_sites"], self.info["call_sites_error"] = n, error

        error = export_trace(prof, self.path, s.call_sites(prof, put))
        s.time_it("eval_export", t0)
        scope = "window" if complete else "partial-window"
        if error is None:
            self.info.update(scope=scope, trace_written=True, trace=self.path.name)
        else:
            self.info["export_error"] = error
        if self.main:
            self._as_main(scope, error)
        self._done = True

    def _as_main(self, scope: str, error: str | None) -> None:
        """--phases eval: the capture's main window is this one."""
        cap, info = self.s.cap, self.info
        cap.phase, cap.window_steps = "eval", list(info["steps"])
        cap.call_sites, cap.call_sites_error = info.get("call_sites"), info.get("call_sites_error")
        if error is None:
            cap.trace_written, cap.scope, cap.activities = True, scope, info["activities"]
            cap.eval = {}
        else:
            cap.export_error = error

    def _stop(self) -> None:
        s = self.s
        prof, self._prof = self._prof, None
        s.phase = "done"
        s.forward_watch_off()  # later steps (--run-to-end) run without module hooks
        if prof is None:
            return
        t0 = time.perf_counter()
        try:
            with s.own():
                prof.stop()  # a window cut short exports what it has through _on_ready
        except Exception as err:  # noqa: BLE001
            self.info["export_error"] = f"{type(err).__name__}: {err}"
        s.time_it("eval_window_stop", t0)

    def end(self, why: str) -> None:
        """The run ends (or --max-seconds ran out) in the evaluation phase or before it."""
        if self.s.phase == "await-eval":
            self.info["missing"] = why
            self.s.phase = "done"
        elif self.s.phase == "eval-window":
            self._stop()
