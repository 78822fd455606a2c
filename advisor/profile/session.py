"""The profiler lifecycle of one ``advisor profile`` run.

Steps are counted by a global optimizer step hook (the first optimizer that steps drives
them) or by ``advisor.step()`` (which then takes over); in a script that never creates an
optimizer, by the top-level calls of its model (:mod:`advisor.profile.fwdsteps`; should an
optimizer step during the probe after all, its steps count from there). Step 0 is everything
before the first step: imports, setup and the first iteration; it is never part of the window.

- **probe**: from the start of the script to the end of the ``wait`` steps a light profiler
  records operators (with shapes; without memory events, Python stacks, which are costly to
  collect across imports, or GPU activity, which would initialize CUDA before the script's
  first line), so a long first step costs little more than under plain Python. It is the fallback trace: the whole run as one step when the script never
  steps (bounded by ``max_seconds``), or the first steps when the run ends before the window.
- **gap**: the probe is stopped inside the step hook, which runs inside the optimizer's own
  ``record_function`` scope. The window's profiler starts one step later: starting a profiler
  while a scope opened under another is still open makes torch write into freed memory when
  that scope closes. This step is the first of the ``warmup`` steps (so there is at least one).
- **window**: a second profiler with every option on runs the other warm-up steps, then records
  ``active`` steps (``ProfilerStep#N`` markers, N counted from the script's first step), and
  exports them to ``trace.json.gz`` the moment they are complete. Unless ``run_to_end``, the
  script is then stopped by raising :class:`WindowCaptured` from the step hook. The recording
  is bounded: once a step is complete, a window that has recorded for more than
  ``--max-window-seconds`` (default 60) or grown the process by more than :data:`WINDOW_MAX_GROWTH_BYTES` (long
  steps: an LBFGS ``step(closure)`` runs the model many times) ends at that step; run.json
  ``capture_limits`` (and the report's trace quality) say what was cut.
- **await-eval**: (``--phases`` with ``eval``, after a training window) the script runs on at
  native speed, only its top-level module calls watched, until its evaluation phase begins, for
  as long as :mod:`advisor.profile.evalwait` allows: a number of its own training steps (at
  least ``--eval-wait`` seconds), less when its epoch cannot end in time or its next epoch
  begins without evaluation (``--max-seconds`` bounds only a script that never steps).
- **eval-window**: the evaluation window (:mod:`advisor.profile.evalwindow`), then the script
  is stopped as after the window.
- **done**: nothing profiles any more; later steps run at native speed.
- **yielded**: the script started torch.profiler itself. Only one profiler can run at a time,
  so the advisor stops its own (keeping what it captured) and lets the script's run.
"""

from __future__ import annotations

import gc
import mmap
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import advisor
from advisor.profile import callsites, facts
from advisor.profile.capture import Capture, SessionConfig, export_trace
from advisor.profile.context import ContextRecorder
from advisor.profile.evalwait import EVAL_WAIT_STEPS, Epochs, EvalWait
from advisor.profile.evalwindow import EvalWindow
from advisor.profile.execute import EXIT_SIGTERM, Outcome, Terminated, WindowCaptured
from advisor.profile.fwdsteps import ForwardSteps, has_parameters, in_eval
from advisor.profile.guards import ForeignProfilerWatch, MaxSecondsAlarm, rss_bytes
from advisor.profile.quiet import NoiseFilter, PhaseProgress
from advisor.runcapture import CaptureLimit

__all__ = ["Capture", "ProfileSession", "SessionConfig"]

_MAX_STEP_TIMES = 20_000
# Address space held back while the script runs and given back before the trace is exported:
# a script that ran out of memory (MemoryError: a ulimit -v, strict overcommit) still holds
# its tensors then, and the export needs room to turn the capture into the trace file. Never
# touched, so it takes no physical memory.
MEMORY_RESERVE_BYTES = 256 << 20
# the window's recording, once a step is complete: the profiler keeps every event in memory,
# so a window of long steps (many model calls each) is ended at the step that passes these
WINDOW_MAX_GROWTH_BYTES = 2 << 30


def _memory_reserve() -> mmap.mmap | None:
    try:
        return mmap.mmap(-1, MEMORY_RESERVE_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except (OSError, ValueError, AttributeError):
        return None


class ProfileSession:
    def __init__(self, cfg: SessionConfig, trace_path: Path, recorder: ContextRecorder) -> None:
        import torch
        from torch.profiler import ProfilerAction, ProfilerActivity

        self.cfg = cfg
        self.cap = Capture()
        self._torch = self.torch = torch
        self._action = self.action = ProfilerAction
        self._cpu, self._cuda = ProfilerActivity.CPU, ProfilerActivity.CUDA
        self._trace_path = self.trace_path = trace_path
        self._rec = recorder
        recorder.phase_now = self._phase_now  # which phase a DataLoader is first iterated in
        self._epochs = Epochs()  # the training loader's passes
        recorder.on_iter = lambda loader, it: self._epochs.on_iter(loader, it, self.phase)
        self.phase = "idle"
        self._probe: Any = None
        self._window: Any = None
        self._marker: Any = None
        self._busy = False
        self._explicit = False
        self._primary: int | None = None
        self._hook: Any = None
        self._alarm = MaxSecondsAlarm(cfg.max_seconds, self._on_alarm)
        self._eval_alarm = MaxSecondsAlarm(cfg.eval_wait, self._on_eval_alarm)
        self._watch = ForeignProfilerWatch(
            lambda: self.phase in ("probe", "gap", "window", "eval-window"),
            self._yield_to_foreign,
        )
        self._own = self.own = self._watch.own
        self._fwd = ForwardSteps(self._on_forward)
        self._step_mod: int | None = None
        self._eval = EvalWindow(self)
        self._wait: EvalWait | None = None  # the wait for the evaluation phase (evalwait)
        self._noise = NoiseFilter()  # torch's profiler lines kept off the terminal
        self._progress = PhaseProgress()
        self._t0 = 0.0
        self._t_window = 0.0
        self._rss_window = 0
        self._window_activities = ["cpu"]
        self._probe_activities = ["cpu"]
        self.stop_requested: Callable[[], bool] = lambda: False
        self._reserve: mmap.mmap | None = None
        self._pid = os.getpid()  # only this process is profiled, never a forked child
        # ends the run from inside the script when it swallowed the stop (see advisor.profile.run)
        self.hard_stop: Callable[[Outcome], None] | None = None
        self.terminated_outcome: Callable[[], Outcome] = lambda: Outcome(
            "sigterm", EXIT_SIGTERM, "SIGTERM"
        )

    # ------------------------------------------------------------------ helpers
    def _time(self, key: str, t0: float) -> None:
        t = self.cap.timings_s
        t[key] = round(t.get(key, 0.0) + time.perf_counter() - t0, 6)

    def time_it(self, key: str, t0: float) -> None:
        self._time(key, t0)

    def make_profiler(self, cuda: bool, schedule: Any, on_ready: Any) -> Any:
        """A window's profiler (every option as configured)."""
        return self._make(self.cfg.with_stack, cuda, schedule, on_ready)

    def _make(
        self,
        with_stack: bool,
        cuda: bool,
        schedule: Any = None,
        on_ready: Any = None,
        memory: bool | None = None,
    ) -> Any:
        from torch.profiler import profile

        return profile(
            activities=[self._cpu, self._cuda] if cuda else [self._cpu],
            record_shapes=self.cfg.record_shapes,
            profile_memory=self.cfg.profile_memory if memory is None else memory,
            with_stack=with_stack,
            schedule=schedule,
            on_trace_ready=on_ready,
        )

    def _progress_text(self) -> str:
        """The progress line while the window records: the step under way among the window's
        (steps_seen counts the steps done), never a step number outside the window."""
        first, last = self.cfg.active_first, self.cfg.active_last
        now = self.cap.steps_seen + 1
        if now < first:
            return f"warming up before steps {first}-{last} (step {now})"
        if now > last:
            return f"steps {first}-{last} recorded; writing the trace"
        return f"recording step {now} of steps {first}-{last}"

    def _window_action(self, step: int) -> Any:
        a = self._action
        if step < self.cfg.active_first:
            return a.WARMUP
        if step < self.cfg.active_last:
            return a.RECORD
        return a.RECORD_AND_SAVE if step == self.cfg.active_last else a.NONE

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        t0 = self._t0 = time.perf_counter()
        self._reserve = _memory_reserve()
        # CPU only: CUDA activities would initialize CUDA before the script's first line, and a
        # script that sets CUDA_VISIBLE_DEVICES itself would then run on the wrong devices
        cuda = facts.cuda_in_use()
        self._probe_activities = ["cpu", "cuda"] if cuda else ["cpu"]
        self._probe = self._make(with_stack=False, cuda=cuda, memory=False)
        self._noise.start()
        with self._own():
            self._probe.start()
        self.phase = "probe"
        self._time("profiler_start", t0)
        from torch.optim.optimizer import register_optimizer_step_post_hook

        hook = self._on_optimizer_step
        disable = getattr(self._torch.compiler, "disable", None)
        self._hook = register_optimizer_step_post_hook(disable(hook) if disable else hook)
        advisor._step_hook = self._on_explicit_step
        self._watch.install()
        self._alarm.arm()
        self._fwd.install()  # a loop without an optimizer steps on its model's calls
        cfg = self.cfg
        self._progress.after(
            lambda: (
                f"profiling: the window records steps {cfg.active_first}-{cfg.active_last}; "
                f"{self.cap.steps_seen} step(s) so far"
                if self.phase in ("probe", "gap")
                else None
            )
        )

    def _phase_now(self) -> str:
        return "eval" if self.phase in ("await-eval", "eval-window") else self.cap.phase

    def _on_optimizer_step(self, opt: Any, args: Any, kwargs: Any) -> None:
        if os.getpid() != self._pid:  # a forked worker inherited the hook: not profiled
            return
        if self.phase == "eval-window":  # training resumed: the evaluation phase is over
            self._eval.phase_over("an optimizer step")
        self._rec.on_optimizer(opt)
        if self.cap.step_source == "forward" and self.phase == "probe":
            self._restart_steps()  # a model called before its optimizer was made
        if self._explicit or self.cap.step_source == "forward":
            return
        if self._primary is None:
            self._primary = id(opt)
            self.cap.step_source = "optimizer"
            if self.phase in ("probe", "gap", "window"):
                self._fwd.remove()  # no module hooks in the training window
        if id(opt) == self._primary:
            self._step()

    def _on_explicit_step(self) -> None:
        if os.getpid() != self._pid:
            return
        if self.phase == "eval-window":
            self._eval.phase_over("advisor.step()")
        if not self._explicit:
            self._explicit = True
            self.cap.step_source = "advisor.step"
            if self.phase in ("probe", "gap", "window"):
                self._fwd.remove()
        self._step()

    def _restart_steps(self) -> None:
        """Forward calls counted as steps turn out to come before training: the optimizer's
        steps count from here (the probe's step markers start again at 1)."""
        self._probe_marker(None)
        self._step_mod = None
        self.cap.step_source, self.cap.step_module, self.cap.phase = None, None, "train"
        self.cap.steps_seen = 0
        self.cap.step_times_s.clear()

    def _on_forward(self, mod: Any) -> None:
        """A top-level module call (see :mod:`advisor.profile.fwdsteps`)."""
        if self.phase in ("await-eval", "eval-window"):
            if (
                self.phase == "await-eval"
                and self.cap.step_source == "forward"
                and id(mod) == self._step_mod
                and not in_eval(self._torch, mod)
            ):
                self._step()  # a training step while waiting: the wait counts it
                return
            self._eval.on_forward(mod)
            return
        if self.phase not in ("probe", "gap", "window") or self._busy:
            return
        if (
            self._explicit
            or self._rec.optimizer_made
            or self.cap.step_source
            not in (
                None,
                "forward",
            )
        ):
            return
        if self._step_mod is None:
            if not has_parameters(mod):
                return
            self._step_mod = id(mod)
            self.cap.step_source = "forward"
            self.cap.step_module = type(mod).__name__
            self.cap.phase = "eval" if in_eval(self._torch, mod) else "train"
        if id(mod) == self._step_mod:
            self._step()

    def _step(self) -> None:
        if self._busy:
            return
        main = threading.current_thread() is threading.main_thread()
        if self.stop_requested() and main:  # a SIGTERM whose exception the script swallowed
            if self.hard_stop is not None:
                self.hard_stop(self.terminated_outcome())
            raise Terminated()
        if main and self.phase == "done" and self.cap.stopped_after_window:
            if self.hard_stop is not None:  # the script swallowed WindowCaptured
                self.hard_stop(Outcome("window-captured", 0))
        self._busy = True
        stop = False
        try:
            self.cap.steps_seen += 1
            g = self.cap.steps_seen
            if g <= _MAX_STEP_TIMES:
                self.cap.step_times_s.append(time.perf_counter() - self._t0)
            if self.phase == "probe":
                if g == 1:
                    self._alarm.disarm()
                if "train" not in self.cfg.phases and self._wants_eval():
                    self._stop_probe()
                    self._rec.end_forward_capture()
                    self._probe = None  # no training window: nothing to fall back on
                    self.phase = "done"
                    self._await_eval()
                elif g > self.cfg.wait:
                    self._stop_probe()
                    self._rec.end_forward_capture()
                    self.phase = "gap"
                else:
                    self._probe_marker(g)
            elif self.phase == "gap":
                self._start_window(g)
            elif self.phase == "window":
                if self._over_budget(g):
                    self._cut_window(g)  # exports steps active_first .. g-1 now
                else:
                    with self._own():
                        self._window.step()
                    if g == self.cfg.active_first:
                        facts.reset_peak_memory()
                if self.cap.scope == "window":
                    stop = self._window_done()
        finally:
            self._busy = False
        if self.phase == "await-eval" and main:
            self._judge_wait()  # may end the wait (and the script) here
        if stop and main:
            raise WindowCaptured()
        if stop:  # never raise into the script's own thread: it runs on to its end
            self.cap.stopped_after_window = False
            self.cap.ran_on_in_thread = True

    def _probe_marker(self, step: int | None) -> None:
        if self._marker is not None:
            self._marker.__exit__(None, None, None)
            self._marker = None
        if step is not None:
            self._marker = self._torch.autograd.profiler.record_function(f"ProfilerStep#{step}")
            self._marker.__enter__()

    def _stop_probe(self) -> None:
        t0 = time.perf_counter()
        self._probe_marker(None)
        with self._own():
            self._probe.stop()
        self._time("probe_stop", t0)

    def _start_window(self, g: int) -> None:
        t0 = time.perf_counter()
        cuda = facts.cuda_in_use()  # the script has set up its devices by now
        self._window = self._make(
            self.cfg.with_stack, cuda, lambda s: self._window_action(max(s, g)), self._on_ready
        )
        self._window_activities = ["cpu", "cuda"] if cuda else ["cpu"]
        self._window.step_num = g
        # the progress line's timer thread starts before the recording: never in a step
        self._progress.after(lambda: self._progress_text() if self.phase == "window" else None)
        self.phase = "window"  # before start(): an interrupted start is still stopped
        with self._own():
            self._window.start()
        if g == self.cfg.active_first:
            facts.reset_peak_memory()
        self._t_window = time.perf_counter()
        self._rss_window = rss_bytes() or 0
        self._time("window_start", t0)

    def _over_budget(self, g: int) -> bool:
        """At the hook of step ``g``: the window has recorded a complete active step and more
        than its time or memory allows (see the module doc)."""
        if g - 1 < self.cfg.active_first or g > self.cfg.active_last:
            return False
        took_s = time.perf_counter() - self._t_window
        rss = rss_bytes()
        grew = rss - self._rss_window if rss is not None and self._rss_window else 0
        limit_s = self.cfg.window_max_s
        if (limit_s <= 0 or took_s <= limit_s) and grew <= WINDOW_MAX_GROWTH_BYTES:
            return False
        done, asked = g - self.cfg.active_first, self.cfg.active
        why = (
            f"{took_s:.1f} s of recording (over --max-window-seconds {limit_s:g})"
            if 0 < limit_s < took_s
            else f"{grew / 2**30:.1f} GiB of profiler memory (over {WINDOW_MAX_GROWTH_BYTES / 2**30:.0f} GiB)"
        )
        self.cap.capture_limits.append(
            CaptureLimit(
                what=f"The profiled window was ended after {done} of {asked} active steps: "
                f"{why}, the advisor's limit for one window.",
                effect="Per-step figures come from those steps; the script's steps are long "
                "(raise --max-window-seconds, or --no-stack to record more of them within it).",
            )
        )
        return True

    def _cut_window(self, g: int) -> None:
        self.cap.window_cut = True
        with self._own():
            self._window.stop()  # ends ProfilerStep#(g-1) now, exports through _on_ready

    def _on_ready(self, prof: Any) -> None:
        """on_trace_ready of the window profiler: the active steps are complete (or cut short)."""
        self._time("window", self._t_window)
        g = self.cap.steps_seen
        complete = g > self.cfg.active_last or self.cap.window_cut
        last = self.cfg.active_last if g > self.cfg.active_last else g
        if self.cap.window_cut:
            last = g - 1  # the steps before the one whose hook ended the window
        self.cap.window_steps = [self.cfg.active_first, last]
        self.cap.memory = facts.peak_memory()
        self.cap.backends = facts.backend_facts()

        def put(n: int | None, error: str | None) -> None:
            self.cap.call_sites, self.cap.call_sites_error = n, error

        self._export(prof, "window" if complete else "partial-window", self.call_sites(prof, put))
        if self.cap.trace_written:
            self.cap.activities = self._window_activities

    def _window_done(self) -> bool:
        t0 = time.perf_counter()
        if not self.cap.window_cut:  # a cut window is stopped already (never twice)
            with self._own():
                self._window.stop()
        self._window = None
        self._probe = None  # the fallback is no longer needed
        self.phase = "done"
        self._time("window_stop", t0)
        self.cap.window_end_s = round(time.perf_counter() - self._t0, 3)
        if self._wants_eval():
            self._await_eval()
            return False
        if self._eval_possible():  # --eval-wait 0: the phase is not waited for
            why = "no-eval-code" if self.cfg.eval_wait_why else "eval-wait"
            self.cap.tell_eval(scope="none", trace_written=False, missing=why)
        self.quiet_off()
        self._fwd.remove()
        self.cap.stopped_after_window = not self.cfg.run_to_end
        return not self.cfg.run_to_end

    def _eval_possible(self) -> bool:
        """An evaluation phase can follow this window: asked for, and the window trained (a
        script whose steps are its model's calls in evaluation has no other phase)."""
        return "eval" in self.cfg.phases and self.cap.phase == "train"

    def _wants_eval(self) -> bool:
        """An evaluation window after this training one, waited for up to --eval-wait."""
        return self._eval_possible() and self.cfg.eval_wait > 0

    def _await_eval(self) -> None:
        """Run on at native speed until the evaluation phase, for as long as
        :mod:`advisor.profile.evalwait` allows (its steps, its epoch, --eval-wait)."""
        cfg = self.cfg
        self._wait = EvalWait(
            time.perf_counter() - self._t0,
            self.cap.steps_seen,
            cfg.eval_wait,
            by_steps=not cfg.eval_wait_given,
        )
        self._epochs.next_epoch = False
        self._eval.await_phase()
        self._fwd.install()
        self._eval_alarm.arm()
        self._progress.after(
            lambda: (
                (
                    f"training window captured; waiting up to {EVAL_WAIT_STEPS} training steps "
                    f"(at least {cfg.eval_wait:g} s) for an evaluation phase"
                    if self._wait is not None and self._wait.by_steps
                    else f"training window captured; waiting up to {cfg.eval_wait:g} s for an "
                    "evaluation phase (--eval-wait)"
                )
                if self.phase == "await-eval"
                else None
            )
        )

    def _judge_wait(self) -> None:
        """At a training step while waiting: the next epoch began without evaluation, the
        rest of this epoch cannot end within the wait, or the wait is over: stop waiting now."""
        wait, left = self._wait, self._epochs.left()
        if wait is None:
            return
        now, times = time.perf_counter() - self._t0, self.cap.step_times_s
        if self._epochs.next_epoch:
            self._end_wait("next-epoch")
        elif wait.epoch_out_of_reach(now, times, left):
            self.cap.tell_eval(epoch_left=left)
            self._end_wait("epoch-left")
        elif wait.left_s(now, times) <= 0:  # over (also where no timer could be armed)
            self._end_wait("eval-wait")

    def _end_wait(self, why: str) -> None:
        """No evaluation phase can be captured (``why``, run.json ``eval.missing``)."""
        self._eval_alarm.disarm()
        self._wait_facts()
        self._eval.end(why)
        self._fwd.remove()
        if not self.cfg.run_to_end:
            self.cap.stopped_after_window = True
            raise WindowCaptured()

    def _wait_facts(self) -> None:
        if self._wait is not None:
            now = time.perf_counter() - self._t0
            wait = self._wait.facts(now, self.cap.steps_seen, self.cap.step_times_s)
            self.cap.tell_eval(wait=wait)

    def forward_watch_off(self) -> None:
        self._fwd.remove()

    def quiet_off(self) -> None:
        """No profiler of the advisor's will record again: stderr as it was."""
        self._noise.stop()

    def eval_found(self) -> None:
        self._eval_alarm.disarm()
        self._wait_facts()
        self.phase = "eval-window"
        self._progress.after(
            lambda: "recording the evaluation phase" if self.phase == "eval-window" else None
        )

    def _on_eval_alarm(self) -> None:
        """The wait's timer: on at the script's pace (see evalwait), or over."""
        if self._busy or self.phase != "await-eval":
            return
        if self._wait is not None:
            left = self._wait.left_s(time.perf_counter() - self._t0, self.cap.step_times_s)
            if left > 0.05:
                self._eval_alarm.extend(left)
                return
        self._wait_facts()
        self._eval.end("eval-wait")
        self._fwd.remove()
        if not self.cfg.run_to_end:
            self.cap.stopped_after_window = True
            raise WindowCaptured()

    def call_sites(
        self, prof: Any, put: Callable[[int | None, str | None], None]
    ) -> Callable[[Path], None] | None:
        """What writes the user's call sites into a window's exported trace (with stacks)."""
        if not self.cfg.with_stack:
            return None
        return callsites.amender(prof, put, lambda t0: self._time("call_sites", t0))

    def _export(self, prof: Any, scope: str, amend: Callable[[Path], None] | None = None) -> None:
        t0 = time.perf_counter()
        error = export_trace(prof, self._trace_path, amend)
        if error is None:
            self.cap.trace_written = True
            self.cap.scope = scope
        else:
            self.cap.export_error = error
        self._time("export", t0)

    def _export_probe(self) -> None:
        if self._probe is None:
            return
        g = self.cap.steps_seen
        if g == 0:
            self._export(self._probe, "whole-run")
        else:
            self.cap.window_steps = [1, min(g, self.cfg.wait)]
            self._export(self._probe, "pre-window")
        if self.cap.trace_written:
            self.cap.activities = self._probe_activities
        if self.cap.backends is None:
            self.cap.backends = facts.backend_facts()
        self.cap.memory = facts.peak_memory()
        self._probe = None

    def _stop_profiling(self) -> None:
        """Stop whatever profiler runs and export the best trace there is."""
        if self.phase == "probe":
            self._stop_probe()
            self._export_probe()
        elif self.phase == "gap":
            self._export_probe()
        elif self.phase == "window":
            in_active = self.cap.steps_seen >= self.cfg.active_first
            t0 = time.perf_counter()
            try:
                with self._own():
                    self._window.stop()  # exports a partial window through _on_ready
            except Exception as err:  # noqa: BLE001 (e.g. a start that was interrupted)
                self.cap.export_error = self.cap.export_error or f"{type(err).__name__}: {err}"
            self._time("window_stop", t0)
            self._window = None
            if not in_active or not self.cap.trace_written:
                self._export_probe()
        elif self.phase in ("await-eval", "eval-window"):
            self._eval.end("ended")
        self._rec.end_forward_capture()

    def finish(self) -> Capture:
        """Stop profiling, remove every hook, and return what was captured."""
        if self._reserve is not None:  # room for the export, also after a MemoryError
            self._reserve.close()
            self._reserve = None
        gc.collect()
        self._alarm.disarm()
        self._eval_alarm.disarm()
        self._progress.cancel()
        self._busy = True  # late signals and hooks from other threads do nothing now
        try:
            self._stop_profiling()
        finally:
            self.phase = "finished"
            self._fwd.remove()
            if self._hook is not None:
                self._hook.remove()
            if advisor._step_hook == self._on_explicit_step:
                advisor._step_hook = None
            self._watch.remove()
            self._noise.stop()
        if self.cap.backends is None:
            self.cap.backends = facts.backend_facts()
        return self.cap

    # ------------------------------------------------------------------ guards
    def _on_alarm(self) -> None:
        """--max-seconds ran out before the first step."""
        if self._busy or self.phase != "probe" or self.cap.steps_seen or os.getpid() != self._pid:
            return
        self._busy = True
        try:
            self.cap.max_seconds_hit = True
            self._stop_profiling()
            self.phase = "done"
            self._noise.stop()
        finally:
            self._busy = False
        self._alarm.disarm()
        if not self.cfg.run_to_end:
            self.cap.stopped_after_window = True
            raise WindowCaptured()

    def _yield_to_foreign(self) -> None:
        """The script starts its own profiler: stop ours first, keeping what it captured."""
        self._alarm.disarm()
        self._busy = True
        try:
            self._stop_profiling()
        finally:
            self._busy = False
            self.phase = "yielded"
            self._noise.stop()
        g = self.cap.steps_seen
        self.cap.foreign_profiler_step = g
        covered = {
            "window": "the profiled window",
            "partial-window": "the part of the window recorded before that",
            "pre-window": "the steps before that, without Python stacks or GPU activity",
            "whole-run": "the run up to that point, as one step",
        }.get(self.cap.scope, "nothing")
        print(
            f"advisor: your script starts torch.profiler itself (at step {g}). Only one profiler "
            "can run at a time, so advisor stopped its own profiling there and lets yours run; "
            f"the script runs to its end. advisor's report covers {covered}. To keep your "
            "profiler and get advisor's report from it, pass "
            "`on_trace_ready=advisor.on_trace_ready(DIR)` to your torch.profiler.profile (it "
            "exports like tensorboard_trace_handler and writes the report beside the trace), or "
            "wrap the code in `with advisor.capture(out=DIR):` instead of your profiler; or "
            "analyze your own trace with `advisor analyze TRACE_OR_DIR`.",
            file=sys.stderr,
            flush=True,
        )
