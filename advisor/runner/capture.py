"""What one profiling session is asked to do (:class:`SessionConfig`), what it captured
(:class:`Capture`), and the atomic, gzipped export of a profiler's trace."""

from __future__ import annotations

import contextlib
import gzip
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


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
    ran_on_in_thread: bool = False  # the window ended in a thread the advisor does not stop
    max_seconds_hit: bool = False
    foreign_profiler_step: int | None = None
    export_error: str | None = None
    memory: dict[str, Any] = field(default_factory=dict)
    backends: dict[str, Any] | None = None
    timings_s: dict[str, float] = field(default_factory=dict)
    step_times_s: list[float] = field(default_factory=list)  # each step() call, from start()


def export_trace(prof: Any, out: Path) -> str | None:
    """Write ``prof``'s trace to ``out`` (gzip) via temporary files and a rename; returns an
    error line, or None when the trace was written. A failure (disk full, a kill) never leaves
    a partial file under the final name; the temporary files are removed (but a SIGKILL)."""
    from advisor.outfiles import local_path

    tmp_json = out.with_name(f".{out.name}.{os.getpid()}.json.tmp")
    tmp_gz = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:  # through the claimed folder's handle: a folder swapped during the run is refused
        tmp_json, tmp_gz, final = local_path(tmp_json), local_path(tmp_gz), local_path(out)
        prof.export_chrome_trace(str(tmp_json))
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
