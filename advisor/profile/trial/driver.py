"""``advisor try``, start to end: run the script as is and with the fixes, in fresh processes,
each one an ordinary ``advisor profile`` run (same window, same steps), then compare.

Runs go into ``OUT/before/`` and ``OUT/after/`` (all fixes together); with several fixes each
one also runs alone in ``OUT/after-<fix>/``. With ``--repeat N`` the whole sequence (before,
then each configuration) is run N times, every second round in reverse order (A B, B A, ...),
so a drift over time weighs on every configuration alike; later rounds go into ``before.2/``,
``after.2/`` ... and their steps are pooled (the default is two rounds: a verdict needs them,
see :mod:`advisor.profile.trial.compare`). Every run's output (the script's and the advisor's)
is kept in ``try-profile.log``.

Each run is a child ``advisor profile`` in its own process group. SIGTERM or SIGINT (Ctrl-C) to
``advisor try`` is passed on to that group (the child writes its report and ends; after
:data:`GRACE_S` the group is killed), no further run starts, and try.json / try.html are written
with what finished, the rest marked interrupted; the command then exits 143 or 130.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from types import FrameType
from typing import Any

from advisor import __version__, runinfo, settings
from advisor.errors import AdvisorError
from advisor.lifeline import die_with
from advisor.output.outfiles import release
from advisor.output.outfolder import check_out_dir, default_out_dir
from advisor.profile.trial.base import RunFacts
from advisor.profile.trial.compare import RunData, compare, step_stats
from advisor.profile.trial.registry import FIXES, Selection, parse_fix_ids, select
from advisor.profile.trial.runtime import env_value
from advisor.runcapture import Try
from advisor.runfolder import FINDINGS_NAME, RUN_NAME, TRACE_NAME
from advisor.runinfo import RunInfo
from advisor.tryresult import TRY_SCHEMA_VERSION, Before, Estimate, Reason, Settings, TryResult

GRACE_S = 20.0  # after a signal, how long the running child may take to write its report
LOG_NAME = "try-profile.log"
JSON_NAME, HTML_NAME = "try.json", "try.html"
_LOG_HEADER = "# advisor try:"
_OK_ENDS = ("completed", "window-captured")


@dataclass(frozen=True)
class TryOptions:
    fix: str
    script: str
    args: tuple[str, ...] = ()
    module: bool = False
    out: Path | None = None
    force: bool = False
    wait: int = 2
    warmup: int = 2
    active: int = 5
    max_seconds: float = 60.0
    repeat: int = 2
    seed: int | None = 0
    loss_steps: int = 3
    loss_rtol: float = 1e-3

    def validate(self) -> None:
        for flag, v, low in (
            ("--wait", self.wait, 0),
            ("--warmup", self.warmup, 0),
            ("--active", self.active, 1),
            ("--repeat", self.repeat, 1),
            ("--loss-steps", self.loss_steps, 0),
        ):
            if v < low:
                raise AdvisorError(f"{flag} must be at least {low}, got {v}")
        if not self.loss_rtol >= 0:
            raise AdvisorError(f"--loss-rtol must be 0 or more, got {self.loss_rtol}")


@dataclass
class Plan:
    label: str  # before | after | after-<fix>
    fixes: tuple[str, ...]
    data: RunData = field(init=False)

    def __post_init__(self) -> None:
        self.data = RunData(self.label, self.fixes)


def _folder(out: Path, label: str, rnd: int) -> Path:
    return out / (label if rnd == 1 else f"{label}.{rnd}")


def check_try_out(out: Path, force: bool) -> None:
    """The no-overwrite rule of ``advisor profile``, for the try folder: a non-empty folder
    needs --force, and even then only try.json / try.html that advisor wrote are replaced."""
    if out.exists() and not out.is_dir():
        raise AdvisorError("exists and is not a directory", out)
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise AdvisorError(
                "output folder exists and is not empty (pick another --out, or "
                "--force to replace an earlier advisor try there)",
                out,
            )
        for name, mark in ((JSON_NAME, '"try_schema_version"'), (HTML_NAME, "torch-advisor")):
            p = out / name
            if p.exists() and mark not in p.read_text(encoding="utf-8", errors="replace")[:65536]:
                raise AdvisorError(
                    f"--force would overwrite {name}, which advisor did not "
                    "write; pick another --out",
                    out,
                )


def _prepare_run_dir(folder: Path, force: bool) -> None:
    log = folder / LOG_NAME
    if log.exists():
        head = log.read_text(encoding="utf-8", errors="replace")[: len(_LOG_HEADER)]
        if head != _LOG_HEADER:
            raise AdvisorError(
                f"--force would overwrite {LOG_NAME}, which advisor did not "
                "write; pick another --out",
                folder,
            )
    check_out_dir(folder, force)
    release(folder)  # the profile run started next claims the folder for itself


def _command(opts: TryOptions, folder: Path) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "advisor",
        "profile",
        "--out",
        str(folder),
        "--force",
        "--wait",
        str(opts.wait),
        "--warmup",
        str(opts.warmup),
        "--active",
        str(opts.active),
        "--max-seconds",
        str(opts.max_seconds),
        "--phases",
        "train",
    ]
    if opts.module:
        cmd.append("-m")
    return [*cmd, opts.script, *opts.args]


class Interrupt:
    """SIGTERM and SIGINT while ``advisor try`` runs: the first one is remembered (no further
    run starts) and each one is passed on to the running child's process group."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.at = 0.0
        self.proc: subprocess.Popen[bytes] | None = None
        self._saved: dict[int, Any] = {}

    def __enter__(self) -> Interrupt:
        import threading

        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._saved[sig] = signal.signal(sig, self._on)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)
        self._saved.clear()

    @property
    def name(self) -> str | None:
        return None if self.signum is None else signal.Signals(self.signum).name

    def _on(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum, self.at = signum, time.monotonic()
            name = signal.Signals(signum).name
            print(
                f"advisor try: {name}: ending the current run, then writing try.json",
                file=sys.stderr,
                flush=True,
            )
        self.kill(signum)

    def kill(self, sig: int) -> None:
        proc = self.proc
        if proc is not None:
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


def _launch(opts: TryOptions, folder: Path, fixes: tuple[str, ...], stop: Interrupt) -> int:
    env = settings.try_child_env(env_value(list(fixes), opts.seed, opts.loss_steps))
    cmd = _command(opts, folder)
    with open(folder / LOG_NAME, "w", encoding="utf-8") as log:
        log.write(f"{_LOG_HEADER} fixes={','.join(fixes) or '(none)'}\n# {' '.join(cmd)}\n")
        log.flush()
        # its own process group: a signal to the try reaches the run (and its DataLoader
        # workers) only through Interrupt, and all of it can be ended together; a try killed
        # outright (SIGKILL) still ends its run: the kernel sends the child SIGTERM (which ends
        # a profiled script as `kill` does, its workers with it)
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=partial(die_with, os.getpid(), signal.SIGTERM),
        )
        stop.proc = proc
        try:
            while True:
                try:
                    code = proc.wait(timeout=0.5)
                    break
                except subprocess.TimeoutExpired:
                    if stop.signum is not None and time.monotonic() - stop.at > GRACE_S:
                        stop.kill(signal.SIGKILL)
        finally:
            if stop.signum is not None:
                stop.kill(signal.SIGKILL)  # whatever of the group is left: no orphans
            stop.proc = None
    return code


def _collect(data: RunData, folder: Path, code: int, first: bool, rnd: int = 1) -> None:
    """Read one finished run (run.json, findings.json, the trace's steady steps) into ``data``."""

    from advisor.derive.steps import steady_trace
    from advisor.report import read
    from advisor.trace import load_trace

    data.folders.append(str(folder))
    run = runinfo.read_file(folder / RUN_NAME)
    if run is None:
        data.failed = (
            data.failed
            or f"advisor profile exited {code} without run.json "
            f"({_last_line(folder / LOG_NAME)}); see {folder / LOG_NAME}"
        )
        return
    trial = run.trial or Try()
    data.losses.append(list(trial.losses))
    data.outputs.append(list(trial.outputs))
    if first:
        data.trial = trial
    end, scope = run.end_reason, run.trace_scope
    if end not in _OK_ENDS and not (end == "sys-exit" and run.exit_code == 0):
        data.failed = (
            data.failed
            or f"the script ended with {end}: {run.error or ''} "
            f"(exit {run.exit_code}; see {folder / LOG_NAME})"
        )
        return
    if run.no_steps and run.max_seconds_hit:
        data.failed = data.failed or (
            f"no step within --max-seconds ({_seconds(run)}), the advisor's limit on the wait "
            "for a first step: raise --max-seconds when the script's first step takes longer"
        )
        return
    if run.no_steps:
        data.failed = data.failed or (
            "no step was seen: try compares steps, so the script needs a loop that calls "
            "optimizer.step() or advisor.step()"
        )
        return
    if scope not in ("window", "partial-window"):
        data.failed = (
            data.failed
            or f"the run ended before the profiled window (trace: {scope}, "
            f"{run.steps_seen} steps seen): give the script more steps or lower --wait/--warmup"
        )
        return
    trace = steady_trace(load_trace(folder / TRACE_NAME))
    data.add_steps(rnd, [float(x) for x in trace.step_ms().to_numpy()])
    if first:
        rep = read(folder / FINDINGS_NAME)
        data.findings = list(rep.findings)
        data.step_ms_median_report = float(rep.run.step_ms_median or 0.0)


def _seconds(run: RunInfo) -> str:
    v = run.profile.max_seconds if run.profile else None
    return f"{v:g} s" if isinstance(v, (int, float)) else "its limit"


def _last_line(log: Path) -> str:
    try:
        lines = [ln for ln in log.read_text(encoding="utf-8", errors="replace").splitlines() if ln]
    except OSError:
        return "no log"
    return lines[-1][:200] if lines else "no output"


def _say(opts: TryOptions, text: str) -> None:
    print(f"advisor try: {text}", file=sys.stderr, flush=True)


def _run(
    opts: TryOptions,
    plan: Plan,
    out: Path,
    rnd: int,
    n: int,
    total: int | None,
    stop: Interrupt | None = None,
) -> None:
    stop = stop or Interrupt()
    if stop.signum is not None:
        plan.data.interrupted = True
        return
    folder = _folder(out, plan.label, rnd)
    _prepare_run_dir(folder, True)
    of = "" if total is None else f"/{total}"
    _say(
        opts,
        f"run {n}{of}: {plan.label}"
        + (f" (round {rnd})" if rnd > 1 else "")
        + (f" with {', '.join(plan.fixes)}" if plan.fixes else " (unchanged)"),
    )
    t0 = time.perf_counter()
    code = _launch(opts, folder, plan.fixes, stop)
    if stop.signum is not None:  # ended by the signal: not a finished run
        plan.data.interrupted = True
        plan.data.folders.append(str(folder))
        _say(opts, f"  {time.perf_counter() - t0:.1f} s; interrupted")
        return
    _collect(plan.data, folder, code, rnd == 1, rnd)
    _say(
        opts,
        f"  {time.perf_counter() - t0:.1f} s"
        + (f"; failed: {plan.data.failed}" if plan.data.failed else ""),
    )


def run_try(opts: TryOptions) -> tuple[TryResult, Path]:
    """Run everything; returns (the try result, the output folder). A SIGTERM or SIGINT ends
    it early: the result then holds what finished (``interrupted`` names the signal)."""
    from advisor.profile.execute import resolve_target
    from advisor.profile.run import require_torch

    require_torch()
    opts.validate()
    ids = parse_fix_ids(opts.fix)
    target = resolve_target(opts.script, opts.args, opts.module)
    out = Path(os.path.abspath(opts.out or default_out_dir(f"try-{target.stem}")))
    check_try_out(out, opts.force)
    for label in ("before", "after"):  # refuse before the first run, not after it
        if (out / label).exists():
            _prepare_run_dir(out / label, opts.force)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    before = Plan("before", ())
    with Interrupt() as stop:
        _run(opts, before, out, 1, 1, None, stop)
        if before.data.failed or stop.signum is not None:
            sel = Selection((), (), ())
            return _document(opts, target, started, before, [], sel, stop.name), out
        sel = select(ids, RunFacts.from_run_dir(out / "before"))
        plans = [Plan(f"after-{f}", (f,)) for f in sel.run] if len(sel.run) > 1 else []
        if sel.run:
            plans.append(Plan("after", sel.run))
        total = 1 + len(plans) + (opts.repeat - 1) * (1 + len(plans))
        n = 1
        for rnd in range(1, opts.repeat + 1 if plans else 1):  # nothing to compare: one run
            order = plans if rnd == 1 else [before, *plans]
            if rnd % 2 == 0:  # A B B A: a drift in time weighs on both sides alike
                order = order[::-1]
            for plan in order:
                n += 1
                _run(opts, plan, out, rnd, n, total, stop)
        return _document(opts, target, started, before, plans, sel, stop.name), out


def _document(
    opts: TryOptions,
    target: Any,
    started: str,
    before: Plan,
    plans: list[Plan],
    sel: Selection,
    interrupted: str | None = None,
) -> TryResult:
    rows = []
    for p in plans:
        est_ids = {i for f in p.fixes for i in FIXES[f].finding_ids}
        row = compare(before.data, p.data, est_ids, opts.loss_rtol)
        rows.append(
            replace(row, numerics_changing=any(FIXES[f].numerics_changing for f in p.fixes))
        )
    return TryResult(
        try_schema_version=TRY_SCHEMA_VERSION,
        advisor_version=__version__,
        script=target.display,
        argv=tuple(opts.args),
        fix=opts.fix,
        started_at=started,
        settings=Settings(
            wait=opts.wait,
            warmup=opts.warmup,
            active=opts.active,
            repeat=opts.repeat,
            seed=opts.seed,
            loss_steps=opts.loss_steps,
            loss_rtol=opts.loss_rtol,
            max_seconds=opts.max_seconds,
        ),
        before=Before(
            folders=tuple(before.data.folders),
            failed=before.data.failed,
            steps=step_stats(before.data.step_ms),
            findings=tuple(Estimate(f.id, f.est_savings_ms) for f in before.data.findings),
        ),
        results=tuple(rows),
        skipped=tuple(Reason(i, r) for i, r in sel.skipped),
        not_applicable=tuple(Reason(i, r) for i, r in sel.not_applicable),
        diff_command="advisor diff before after" if plans else None,
        interrupted=interrupted,
    )


def write_outputs(result: TryResult, out: Path) -> dict[str, Path]:
    from advisor.output.outfiles import atomic_write
    from advisor.output.try_view import render_html

    files = {"json": out / JSON_NAME, "html": out / HTML_NAME}
    atomic_write(files["json"], result.dump())
    atomic_write(files["html"], render_html(result).encode("utf-8"))
    return files
