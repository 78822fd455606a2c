"""The profiler lifecycle of one ``advisor profile`` run.

Steps are counted by a global optimizer step hook (the first optimizer that steps drives
them) or by ``advisor.step()`` (which then takes over). Step 0 is everything before the first
step: imports, setup and the first iteration; it is never part of the window.

- **probe**: from the start of the script to the end of the ``wait`` steps a light profiler
  records operators (with shapes and memory, without Python stacks, which are costly to collect
  across imports, and without GPU activity, which would initialize CUDA before the script's
  first line). It is the fallback trace: the whole run as one step when the script never
  steps (bounded by ``max_seconds``), or the first steps when the run ends before the window.
- **gap**: the probe is stopped inside the step hook, which runs inside the optimizer's own
  ``record_function`` scope. The window's profiler starts one step later: starting a profiler
  while a scope opened under another is still open makes torch write into freed memory when
  that scope closes. This step is the first of the ``warmup`` steps (so there is at least one).
- **window**: a second profiler with every option on runs the other warm-up steps, then records
  ``active`` steps (``ProfilerStep#N`` markers, N counted from the script's first step), and
  exports them to ``trace.json.gz`` the moment they are complete. Unless ``run_to_end``, the
  script is then stopped by raising :class:`WindowCaptured` from the step hook.
- **done**: nothing profiles any more; later steps run at native speed.
- **yielded**: the script started torch.profiler itself. Only one profiler can run at a time,
  so the advisor stops its own (keeping what it captured) and lets the script's run.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import advisor
from advisor.runner import facts
from advisor.runner.context import ContextRecorder
from advisor.runner.execute import WindowCaptured

_MAX_STEP_TIMES = 20_000


@dataclass(frozen=True)
class SessionConfig:
    wait: int = 2
    warmup: int = 2
    active: int = 5
    record_shapes: bool = True
    with_stack: bool = True
    profile_memory: bool = True
    max_seconds: float = 60.0
    run_to_end: bool = False

    @property
    def active_first(self) -> int:
        """The first step of the active window (steps are numbered from 0). At least one
        unrecorded step separates the probe from the window (see the module docstring)."""
        return self.wait + max(self.warmup, 1) + 1

    @property
    def active_last(self) -> int:
        return self.active_first + self.active - 1


@dataclass
class Capture:
    """What the session captured; the runner turns it into run.json."""

    scope: str = "none"  # window | partial-window | pre-window | whole-run | none
    trace_written: bool = False
    steps_seen: int = 0
    step_source: str | None = None  # "optimizer" | "advisor.step"
    window_steps: list[int] = field(default_factory=list)  # first, last step in the trace
    activities: list[str] = field(default_factory=lambda: ["cpu"])  # of the exported trace
    stopped_after_window: bool = False
    max_seconds_hit: bool = False
    foreign_profiler_step: int | None = None
    export_error: str | None = None
    memory: dict[str, Any] = field(default_factory=dict)
    backends: dict[str, Any] | None = None
    timings_s: dict[str, float] = field(default_factory=dict)
    step_times_s: list[float] = field(default_factory=list)  # each step() call, from start()


class ProfileSession:
    def __init__(self, cfg: SessionConfig, trace_path: Path, recorder: ContextRecorder) -> None:
        import torch
        from torch.profiler import ProfilerAction, ProfilerActivity

        self.cfg = cfg
        self.cap = Capture()
        self._torch = torch
        self._action = ProfilerAction
        self._cpu, self._cuda = ProfilerActivity.CPU, ProfilerActivity.CUDA
        self._trace_path = trace_path
        self._rec = recorder
        self.phase = "idle"
        self._probe: Any = None
        self._window: Any = None
        self._marker: Any = None
        self._own_depth = 0
        self._busy = False
        self._explicit = False
        self._primary: int | None = None
        self._hook: Any = None
        self._patched: Any = None
        self._old_alarm: Any = None
        self._t0 = 0.0
        self._t_window = 0.0
        self._window_activities = ["cpu"]
        self._probe_activities = ["cpu"]

    # ------------------------------------------------------------------ helpers
    @contextlib.contextmanager
    def _own(self) -> Iterator[None]:
        self._own_depth += 1
        try:
            yield
        finally:
            self._own_depth -= 1

    def _time(self, key: str, t0: float) -> None:
        t = self.cap.timings_s
        t[key] = round(t.get(key, 0.0) + time.perf_counter() - t0, 6)

    def _make(
        self, with_stack: bool, cuda: bool, schedule: Any = None, on_ready: Any = None
    ) -> Any:
        from torch.profiler import profile

        return profile(
            activities=[self._cpu, self._cuda] if cuda else [self._cpu],
            record_shapes=self.cfg.record_shapes,
            profile_memory=self.cfg.profile_memory,
            with_stack=with_stack,
            schedule=schedule,
            on_trace_ready=on_ready,
        )

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
        # CPU only: CUDA activities would initialize CUDA before the script's first line, and a
        # script that sets CUDA_VISIBLE_DEVICES itself would then run on the wrong devices
        cuda = facts.cuda_in_use()
        self._probe_activities = ["cpu", "cuda"] if cuda else ["cpu"]
        self._probe = self._make(with_stack=False, cuda=cuda)
        with self._own():
            self._probe.start()
        self.phase = "probe"
        self._time("profiler_start", t0)
        from torch.optim.optimizer import register_optimizer_step_post_hook

        hook = self._on_optimizer_step
        disable = getattr(self._torch.compiler, "disable", None)
        self._hook = register_optimizer_step_post_hook(disable(hook) if disable else hook)
        advisor._step_hook = self._on_explicit_step
        self._patch_foreign_profiler()
        self._arm_alarm()

    def _on_optimizer_step(self, opt: Any, args: Any, kwargs: Any) -> None:
        self._rec.on_optimizer(opt)
        if self._explicit:
            return
        if self._primary is None:
            self._primary = id(opt)
            self.cap.step_source = "optimizer"
        if id(opt) == self._primary:
            self._step()

    def _on_explicit_step(self) -> None:
        if not self._explicit:
            self._explicit = True
            self.cap.step_source = "advisor.step"
        self._step()

    def _step(self) -> None:
        if self._busy:
            return
        self._busy = True
        stop = False
        try:
            self.cap.steps_seen += 1
            g = self.cap.steps_seen
            if g <= _MAX_STEP_TIMES:
                self.cap.step_times_s.append(time.perf_counter() - self._t0)
            if self.phase == "probe":
                if g == 1:
                    self._disarm_alarm()
                if g > self.cfg.wait:
                    self._stop_probe()
                    self._rec.end_forward_capture()
                    self.phase = "gap"
                else:
                    self._probe_marker(g)
            elif self.phase == "gap":
                self._start_window(g)
            elif self.phase == "window":
                with self._own():
                    self._window.step()
                if g == self.cfg.active_first:
                    facts.reset_peak_memory()
                if self.cap.scope == "window":
                    stop = self._window_done()
        finally:
            self._busy = False
        if stop:
            raise WindowCaptured()

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
        with self._own():
            self._window.start()
        if g == self.cfg.active_first:
            facts.reset_peak_memory()
        self.phase = "window"
        self._t_window = time.perf_counter()
        self._time("window_start", t0)

    def _on_ready(self, prof: Any) -> None:
        """on_trace_ready of the window profiler: the active steps are complete (or cut short)."""
        self._time("window", self._t_window)
        g = self.cap.steps_seen
        complete = g > self.cfg.active_last
        last = self.cfg.active_last if complete else g
        self.cap.window_steps = [self.cfg.active_first, last]
        self.cap.memory = facts.peak_memory()
        self.cap.backends = facts.backend_facts()
        self._export(prof, "window" if complete else "partial-window")
        if self.cap.trace_written:
            self.cap.activities = self._window_activities

    def _window_done(self) -> bool:
        t0 = time.perf_counter()
        with self._own():
            self._window.stop()
        self._window = None
        self._probe = None  # the fallback is no longer needed
        self.phase = "done"
        self._time("window_stop", t0)
        self.cap.stopped_after_window = not self.cfg.run_to_end
        return not self.cfg.run_to_end

    def _export(self, prof: Any, scope: str) -> None:
        t0 = time.perf_counter()
        out = self._trace_path
        tmp_json = out.with_name(f".{out.name}.{os.getpid()}.json.tmp")
        tmp_gz = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        try:
            prof.export_chrome_trace(str(tmp_json))
            with open(tmp_json, "rb") as src, gzip.open(tmp_gz, "wb", compresslevel=6) as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            os.replace(tmp_gz, out)
            self.cap.trace_written = True
            self.cap.scope = scope
        except Exception as err:  # noqa: BLE001 (reported in run.json, never fails the run)
            self.cap.export_error = f"{type(err).__name__}: {err}"
        finally:
            for p in (tmp_json, tmp_gz):
                with contextlib.suppress(OSError):
                    p.unlink()
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
            with self._own():
                self._window.stop()  # exports a partial window through _on_ready
            self._time("window_stop", t0)
            self._window = None
            if not in_active or not self.cap.trace_written:
                self._export_probe()
        self._rec.end_forward_capture()

    def finish(self) -> Capture:
        """Stop profiling, remove every hook, and return what was captured."""
        self._disarm_alarm()
        self._busy = True  # late signals and hooks from other threads do nothing now
        try:
            self._stop_profiling()
        finally:
            self.phase = "finished"
            if self._hook is not None:
                self._hook.remove()
            if advisor._step_hook == self._on_explicit_step:
                advisor._step_hook = None
            self._unpatch_foreign_profiler()
        if self.cap.backends is None:
            self.cap.backends = facts.backend_facts()
        return self.cap

    # ------------------------------------------------------------------ --max-seconds
    def _arm_alarm(self) -> None:
        if self.cfg.max_seconds <= 0 or not hasattr(signal, "setitimer"):
            return
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGALRM) not in (signal.SIG_DFL, None):
            return  # the environment uses SIGALRM itself
        self._old_alarm = signal.signal(signal.SIGALRM, self._on_alarm)
        signal.setitimer(signal.ITIMER_REAL, self.cfg.max_seconds)

    def _disarm_alarm(self) -> None:
        if self._old_alarm is None:
            return
        signal.setitimer(signal.ITIMER_REAL, 0)
        if signal.getsignal(signal.SIGALRM) == self._on_alarm:
            signal.signal(signal.SIGALRM, self._old_alarm)
        self._old_alarm = None

    def _on_alarm(self, signum: int, frame: Any) -> None:
        if self._busy or self.phase != "probe" or self.cap.steps_seen:
            return
        self._busy = True
        try:
            self.cap.max_seconds_hit = True
            self._stop_profiling()
            self.phase = "done"
        finally:
            self._busy = False
        self._disarm_alarm()
        if not self.cfg.run_to_end:
            self.cap.stopped_after_window = True
            raise WindowCaptured()

    # ------------------------------------------------------------------ nested profilers
    def _patch_foreign_profiler(self) -> None:
        cls = self._torch.autograd.profiler.profile
        orig = cls.__dict__.get("_prepare_trace")
        if orig is None:
            return
        session = self

        def _prepare_trace(prof: Any, *args: Any, **kwargs: Any) -> Any:
            if not session._own_depth and session.phase in ("probe", "gap", "window"):
                session._yield_to_foreign()
            return orig(prof, *args, **kwargs)

        setattr(cls, "_prepare_trace", _prepare_trace)  # noqa: B010
        self._patched = (cls, orig)

    def _unpatch_foreign_profiler(self) -> None:
        if self._patched is not None:
            cls, orig = self._patched
            setattr(cls, "_prepare_trace", orig)  # noqa: B010
            self._patched = None

    def _yield_to_foreign(self) -> None:
        self._disarm_alarm()
        self._busy = True
        try:
            self._stop_profiling()
        finally:
            self._busy = False
            self.phase = "yielded"
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
            f"the script runs to its end. advisor's report covers {covered}. To profile with "
            "advisor, run without your profiler, or analyze your own trace with "
            "`advisor analyze TRACE_OR_DIR`.",
            file=sys.stderr,
            flush=True,
        )
