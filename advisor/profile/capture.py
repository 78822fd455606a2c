"""What one profiling session is asked to do (:class:`SessionConfig`), what it captured
(:class:`Capture`), and the atomic, gzipped export of a profiler's trace."""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from advisor.profile.evalwait import DEFAULT_EVAL_WAIT_S
from advisor.runcapture import CaptureLimit, Eval
from advisor.runinfo import Backends, Memory


@dataclass(frozen=True)
class SessionConfig:
    wait: int = 2
    warmup: int = 2
    active: int = 5
    record_shapes: bool = True
    with_stack: bool = True
    profile_memory: bool = True
    max_seconds: float = 60.0  # a script that never steps: captured for at most this long
    run_to_end: bool = False
    phases: tuple[str, ...] = ("train", "eval")  # which phases to capture (--phases)
    eval_steps: int = 3  # active steps of the evaluation window (--eval-steps)
    eval_wait: float = DEFAULT_EVAL_WAIT_S  # seconds to wait for it after the training window
    eval_wait_why: str | None = None  # why eval_wait is 0 when the user did not set it
    eval_wait_given: bool = False  # --eval-wait given: seconds as given, not extended by steps
    window_max_s: float = 60.0  # the window ends at the first complete step past this recording

    @property
    def active_first(self) -> int:
        """The first step of the active window (steps are numbered from 0). At least one
        unrecorded step separates the probe from the window (see the module docstring)."""
        return self.wait + max(self.warmup, 1) + 1

    @property
    def active_last(self) -> int:
        return self.active_first + self.active - 1


PHASES = ("train", "eval")


def default_phases() -> str:
    """``train,eval``; ``train`` under torchrun: each rank would wait for its evaluation phase
    and stop on its own, leaving the others blocked in a collective."""
    from advisor.profile.torchrun import rank_env

    return "train" if rank_env() is not None else "train,eval"


def parse_phases(text: str) -> tuple[str, ...]:
    """``--phases``: ``train``, ``eval`` or both, comma-separated."""
    from advisor.errors import AdvisorError

    got = tuple(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))
    bad = [p for p in got if p not in PHASES]
    if bad or not got:
        raise AdvisorError(f"--phases takes train, eval or train,eval, got {text!r}")
    return got


@dataclass
class Capture:
    """What the session captured; the runner turns it into run.json."""

    scope: str = "none"  # window | partial-window | pre-window | whole-run | none
    trace_written: bool = False
    steps_seen: int = 0
    step_source: str | None = None  # "optimizer" | "advisor.step" | "forward"
    step_module: str | None = None  # step_source "forward": the class whose calls are steps
    phase: str = "train"  # what the first window holds: train | eval (forward steps in eval)
    eval: Eval | None = None  # the evaluation window (run.json), once there is one to tell
    window_steps: list[int] = field(default_factory=list)  # first, last step in the trace
    activities: list[str] = field(default_factory=lambda: ["cpu"])  # of the exported trace
    stopped_after_window: bool = False
    ran_on_in_thread: bool = False  # the window ended in a thread the advisor does not stop
    max_seconds_hit: bool = False
    window_end_s: float | None = None  # when the training window was exported (from start)
    window_cut: bool = False  # the window was ended early by its recording limits
    capture_limits: list[CaptureLimit] = field(default_factory=list)  # what they cut
    foreign_profiler_step: int | None = None
    export_error: str | None = None
    memory: Memory = field(default_factory=Memory)
    backends: Backends | None = None
    timings_s: dict[str, float] = field(default_factory=dict)
    step_times_s: list[float] = field(default_factory=list)  # each step() call, from start()
    call_sites: int | None = None  # python_function events given their caller's line
    call_sites_error: str | None = None

    def tell_eval(self, **facts: Any) -> None:
        """Add ``facts`` (fields of :class:`advisor.runcapture.Eval`) to the evaluation
        window's record."""
        self.eval = dataclasses.replace(self.eval or Eval(), **facts)


def export_trace(prof: Any, out: Path, amend: Callable[[Path], None] | None = None) -> str | None:
    """Write ``prof``'s trace to ``out`` (gzip) via temporary files and a rename; returns an
    error line, or None when the trace was written. ``amend`` may edit the exported JSON file
    before it is compressed (it must not raise). A failure (disk full, a kill) never leaves
    a partial file under the final name; the temporary files are removed (but a SIGKILL)."""
    from advisor.output.outfiles import local_path
    from advisor.profile.tracefix import needs_repair, repair_names

    tmp_json = out.with_name(f".{out.name}.{os.getpid()}.json.tmp")
    tmp_gz = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:  # through the claimed folder's handle: a folder swapped during the run is refused
        tmp_json, tmp_gz, final = local_path(tmp_json), local_path(tmp_gz), local_path(out)
        prof.export_chrome_trace(str(tmp_json))
        if needs_repair():  # a '"' in a source file's name: torch wrote it unescaped
            repair_names(tmp_json)
        if amend is not None:
            amend(tmp_json)
        with open(tmp_json, "rb") as src, open(tmp_gz, "wb") as raw:
            with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6) as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp_gz, final)  # only a complete trace ever has the final name
        return None
    except Exception as err:  # noqa: BLE001 (reported in run.json, never fails the run)
        return f"{type(err).__name__}: {err}"
    finally:  # kineto writes ``<name>.tmp`` and renames it: a full disk leaves that one too
        for p in (tmp_json, tmp_gz, tmp_json.with_name(tmp_json.name + ".tmp")):
            with contextlib.suppress(OSError):
                p.unlink()
