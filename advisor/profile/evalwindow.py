"""The evaluation window of ``advisor profile``: a second, short window in the script's
evaluation phase, after the training window.

Once the training window is exported the script runs on at native speed with the profiler off
(only the top-level module calls are watched, see :mod:`advisor.profile.fwdsteps`) for at most
``--eval-wait`` seconds. The first top-level call of a module with parameters that is
evaluation (the module in ``eval()`` mode, or autograd off under ``no_grad`` /
``inference_mode``) starts the phase: its calls of that module are the evaluation steps. The
profiler starts recording at the first one (its start-up happens before the first
``ProfilerStep`` range opens; a slow first step is left out by the steady-step rule of
:mod:`advisor.derive.steps`) and records ``eval_steps`` calls (``ProfilerStep#N``, N counted
from the phase's first call) into ``trace.eval.json.gz``; the script is then stopped (unless
``run_to_end``). The phase ends early, and is recorded as it is, when training resumes: the
module is called outside evaluation, ``model.train()`` is called on it, or an optimizer steps;
or when the script ends. When no phase comes, ``run.json`` ``eval.missing`` and ``eval.why``
say why. With ``--phases eval`` no training window is recorded and this window is the run's
main trace (``trace.json.gz``, run.json ``phase: "eval"``).

:func:`eval_code_path` decides whether waiting can be skipped: a script whose own files never
mention evaluation (no ``eval``, ``valid``, ``no_grad``, ``inference_mode``, ...) cannot reach
an evaluation phase, so ``--eval-wait`` defaults to 0 for it.
"""

from __future__ import annotations

import importlib.util
import os
import re
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from advisor.profile import facts
from advisor.profile.capture import Capture, SessionConfig, export_trace
from advisor.profile.execute import WindowCaptured
from advisor.profile.fwdsteps import has_parameters, in_eval
from advisor.record import UNSET
from advisor.runcapture import Eval
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
    def quiet_off(self) -> None: ...
    def time_it(self, key: str, t0: float) -> None: ...
    def make_profiler(self, cuda: bool, schedule: Any, on_ready: Any) -> Any: ...
    def call_sites(
        self, prof: Any, put: Callable[[int | None, str | None], None]
    ) -> Callable[[Path], None] | None: ...


# what a script that can reach an evaluation phase says somewhere in its own files: the switches
# the phase is detected by, and the words evaluation code is named with (frameworks that run
# validation themselves take "val"/"eval" arguments)
_EVAL_WORDS = re.compile(
    rb"eval|valid|no_grad|inference_mode|set_grad_enabled|\.train\(\s*(mode\s*=\s*)?False"
    rb"|\bval_|_val\b|\bval\b|\btest",
    re.IGNORECASE,
)
_SCAN_MAX_FILES = 64
_SCAN_MAX_BYTES = 4 << 20


def _script_files(kind: str, name: str) -> list[Path]:
    """The script's own file first, then the other ``.py`` files of its folder."""
    if kind == "module":
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            return []
        origin = getattr(spec, "origin", None) if spec is not None else None
        if not origin or not os.path.isfile(origin):
            return []
        main = Path(origin)
    else:
        main = Path(name)
        if main.is_dir():
            main = main / "__main__.py"
    folder = main.parent
    try:
        others = sorted(p for p in folder.glob("*.py") if p.name != main.name)
    except OSError:
        others = []
    return [main, *others[: _SCAN_MAX_FILES - 1]]


def eval_code_path(kind: str, name: str) -> bool:
    """Whether the script can have an evaluation phase, read from its own files (the script and
    the ``.py`` files beside it): False only when none of them mentions evaluation. A file that
    cannot be read counts as a mention (the wait is kept)."""
    files = _script_files(kind, name)
    if not files:
        return True
    for p in files:
        try:
            with open(p, "rb") as fh:
                if _EVAL_WORDS.search(fh.read(_SCAN_MAX_BYTES)):
                    return True
        except OSError:
            return True
    return False


def eval_trace_path(trace_path: Path) -> Path:
    """``trace.json.gz`` -> ``trace.eval.json.gz`` (``trace.rank<R>.eval.json.gz`` per rank)."""
    return trace_path.with_name(eval_trace_name(trace_path.name))


class EvalWindow:
    def __init__(self, session: Session) -> None:
        self.s = session
        cfg = session.cfg
        self.first = 1  # recorded from the phase's first call: a phase may be that short
        self.last = max(cfg.eval_steps, 1)
        self.main = "train" not in cfg.phases  # no training window: this is the main trace
        self.path = session.trace_path if self.main else eval_trace_path(session.trace_path)
        self._mod: int | None = None
        self._n = 0
        self._prof: Any = None
        self._done = False
        self._t0 = 0.0
        self._train_patch: tuple[Any, Any] | None = None
        self._t_await = 0.0

    @property
    def info(self) -> Eval:
        return self.s.cap.eval or Eval()

    def tell(self, **facts: Any) -> None:
        """Add ``facts`` to run.json's ``eval``."""
        self.s.cap.tell_eval(**facts)

    def await_phase(self) -> None:
        """The training window is done: watch for the evaluation phase."""
        self.tell(scope="none", trace_written=False, missing=None)
        self.s.phase = "await-eval"
        self._t_await = time.perf_counter()

    def _action(self, step: int) -> Any:
        a = self.s.action
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
            self.tell(module=type(mod).__name__)
            s.time_it("eval_wait", self._t_await)
            s.eval_found()
        if s.phase != "eval-window" or id(mod) != self._mod:
            return
        if not in_eval(s.torch, mod):  # training resumed: the phase was shorter
            self.phase_over("a training call of the model")
            return
        self._n += 1
        self.tell(steps_seen=self._n)
        if self._n == 1:
            self._start()
            return
        with s.own():
            self._prof.step()
        if self._done:
            self._stop()
            self._stop_script()

    def phase_over(self, why: str) -> None:
        """Training resumed (``why``) inside the evaluation window: keep what it recorded (the
        whole phase), then stop the script as after a complete window."""
        if self.s.phase != "eval-window":
            return
        self.tell(ended_by=why)
        self._stop()
        self._stop_script()

    def _stop_script(self) -> None:
        if not self.s.cfg.run_to_end:
            self.s.cap.stopped_after_window = True
            raise WindowCaptured()

    def _watch_train_calls(self) -> None:
        """``model.train()`` on the evaluation module ends the phase (most loops switch back
        before anything else of the next epoch runs)."""
        cls = self.s.torch.nn.Module
        orig = cls.__dict__["train"]
        window = self

        def train(mod: Any, mode: bool = True) -> Any:
            out = orig(mod, mode)
            if mode and id(mod) == window._mod and window.s.phase == "eval-window":
                window.phase_over("model.train()")
            return out

        train.__wrapped__ = orig  # type: ignore[attr-defined]
        cls.train = train
        self._train_patch = (cls, train)

    def _unwatch_train_calls(self) -> None:
        if self._train_patch is None:
            return
        cls, ours = self._train_patch
        self._train_patch = None
        if cls.__dict__.get("train") is ours:
            cls.train = ours.__wrapped__

    def _start(self) -> None:
        s = self.s
        t0 = time.perf_counter()
        cuda = facts.cuda_in_use()
        self.tell(activities=("cpu", "cuda") if cuda else ("cpu",))
        self._prof = s.make_profiler(cuda, self._action, self._on_ready)
        self._prof.step_num = 1
        with s.own():
            self._prof.start()
        self._watch_train_calls()
        s.time_it("eval_window_start", t0)
        self._t0 = time.perf_counter()

    def _on_ready(self, prof: Any) -> None:
        s = self.s
        s.time_it("eval_window", self._t0)
        complete = self._n > self.last
        self.tell(steps=(self.first, self.last if complete else self._n))
        t0 = time.perf_counter()

        def put(n: int | None, error: str | None) -> None:
            self.tell(call_sites=n, call_sites_error=error)

        error = export_trace(prof, self.path, s.call_sites(prof, put))
        s.time_it("eval_export", t0)
        # a phase shorter than --eval-steps that ended by itself is captured whole
        whole = not complete and self.info.ended_by is not None
        scope = "window" if complete or whole else "partial-window"
        if error is None:
            self.tell(scope=scope, trace_written=True, trace=self.path.name)
        else:
            self.tell(export_error=error)
        if self.main:
            self._as_main(scope, error)
        self._done = True

    def _as_main(self, scope: str, error: str | None) -> None:
        """--phases eval: the capture's main window is this one."""
        cap, info = self.s.cap, self.info
        cap.phase, cap.window_steps = "eval", list(info.steps or ())
        cap.call_sites = None if info.call_sites is UNSET else info.call_sites
        cap.call_sites_error = None if info.call_sites_error is UNSET else info.call_sites_error
        if error is None:
            cap.trace_written, cap.scope = True, scope
            cap.activities = list(info.activities or ())
            cap.eval = None
        else:
            cap.export_error = error

    def _stop(self) -> None:
        s = self.s
        prof, self._prof = self._prof, None
        s.phase = "done"
        self._unwatch_train_calls()
        s.forward_watch_off()  # later steps (--run-to-end) run without module hooks
        if prof is not None:
            t0 = time.perf_counter()
            try:
                with s.own():
                    prof.stop()  # a window cut short exports what it has through _on_ready
            except Exception as err:  # noqa: BLE001
                self.tell(export_error=f"{type(err).__name__}: {err}")
            s.time_it("eval_window_stop", t0)
        s.quiet_off()

    def end(self, why: str) -> None:
        """The run ends (or --eval-wait ran out) in the evaluation phase or before it."""
        if self.s.phase == "await-eval":
            self.tell(missing=why)
            self.s.time_it("eval_wait", self._t_await)
            self.s.phase = "done"
            self.s.quiet_off()
        elif self.s.phase == "eval-window":
            if self.info.ended_by is None:
                self.tell(ended_by="the end of the script" if why == "ended" else why)
            self._stop()
