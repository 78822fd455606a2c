"""``advisor try``, start to end: run the script as is and with the fixes, in fresh processes,
each one an ordinary ``advisor profile`` run (same window, same steps), then compare.

Runs go into ``OUT/before/`` and ``OUT/after/`` (all fixes together); with several fixes each
one also runs alone in ``OUT/after-<fix>/``. With ``--repeat N`` the whole sequence (before,
then each configuration) is run N times, every second round in reverse order (A B, B A, ...),
so a drift over time weighs on every configuration alike; later rounds go into ``before.2/``,
``after.2/`` ... and their steps are pooled. Every run's output (the script's and the advisor's) is kept in ``try-profile.log``.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from advisor import __version__, settings
from advisor.errors import AdvisorError
from advisor.output.outfiles import default_out_dir, release
from advisor.profile.fixes.base import RunFacts
from advisor.profile.fixes.childrun import Interrupted, interruptible, run_child
from advisor.profile.fixes.compare import RunData, compare, step_stats
from advisor.profile.fixes.registry import FIXES, Selection, parse_fix_ids, select
from advisor.profile.fixes.runtime import env_value
from advisor.profile.outdir import check_out_dir, write_json
from advisor.runfolder import FINDINGS_NAME, RUN_NAME, TRACE_NAME

TRY_SCHEMA_VERSION = 1
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
    repeat: int = 1
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


def _launch(opts: TryOptions, folder: Path, fixes: tuple[str, ...]) -> int:
    env = settings.try_child_env(env_value(list(fixes), opts.seed, opts.loss_steps))
    cmd = _command(opts, folder)
    with open(folder / LOG_NAME, "w", encoding="utf-8") as log:
        log.write(f"{_LOG_HEADER} fixes={','.join(fixes) or '(none)'}\n# {' '.join(cmd)}\n")
        log.flush()
        return run_child(cmd, log, env)


def _collect(data: RunData, folder: Path, code: int, first: bool) -> None:
    """Read one finished run (run.json, findings.json, the trace's steady steps) into ``data``."""
    import json

    from advisor.derive.steps import steady_trace
    from advisor.report import Report
    from advisor.trace import load_trace

    data.folders.append(str(folder))
    try:
        run = json.loads((folder / RUN_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data.failed = (
            data.failed
            or f"advisor profile exited {code} without run.json "
            f"({_last_line(folder / LOG_NAME)}); see {folder / LOG_NAME}"
        )
        return
    trial = run.get("try") or {}
    data.losses.append(list(trial.get("losses") or []))
    data.outputs.append(list(trial.get("outputs") or []))
    if first:
        data.trial = trial
    end, scope = run.get("end_reason"), run.get("trace_scope")
    if end not in _OK_ENDS and not (end == "sys-exit" and run.get("exit_code") == 0):
        data.failed = (
            data.failed
            or f"the script ended with {end}: {run.get('error') or ''} "
            f"(exit {run.get('exit_code')}; see {folder / LOG_NAME})"
        )
        return
    if run.get("no_steps"):
        data.failed = data.failed or (
            "no step was seen: try compares steps, so the script needs a loop that calls "
            "optimizer.step() or advisor.step()"
        )
        return
    if scope not in ("window", "partial-window"):
        data.failed = (
            data.failed
            or f"the run ended before the profiled window (trace: {scope}, "
            f"{run.get('steps_seen')} steps seen): give the script more steps or lower --wait/--warmup"
        )
        return
    trace = steady_trace(load_trace(folder / TRACE_NAME))
    data.step_ms.extend(float(x) for x in trace.step_ms().to_numpy())
    if first:
        rep = Report.from_dict(json.loads((folder / FINDINGS_NAME).read_text(encoding="utf-8")))
        data.findings = list(rep.findings)
        data.step_ms_median_report = float(rep.run.get("step_ms_median") or 0.0)


def _last_line(log: Path) -> str:
    try:
        lines = [ln for ln in log.read_text(encoding="utf-8", errors="replace").splitlines() if ln]
    except OSError:
        return "no log"
    return lines[-1][:200] if lines else "no output"


def _say(opts: TryOptions, text: str) -> None:
    print(f"advisor try: {text}", file=sys.stderr, flush=True)


def _run(opts: TryOptions, plan: Plan, out: Path, rnd: int, n: int, total: int | None) -> None:
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
    try:
        code = _launch(opts, folder, plan.fixes)
    except Interrupted as intr:  # the run was ended: nothing of it is compared
        plan.data.folders.append(str(folder))
        plan.data.failed = plan.data.failed or (
            f"interrupted by {intr.name} while this run went on (see {folder / LOG_NAME})"
        )
        raise
    _collect(plan.data, folder, code, rnd == 1)
    _say(
        opts,
        f"  {time.perf_counter() - t0:.1f} s"
        + (f"; failed: {plan.data.failed}" if plan.data.failed else ""),
    )


def run_try(opts: TryOptions) -> tuple[dict[str, Any], Path]:
    """Run everything; returns (the try.json document, the output folder)."""
    from advisor.profile.execute import resolve_target

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
    plans: list[Plan] = []
    sel = Selection((), (), ())
    try:
        with interruptible():  # SIGTERM / Ctrl-C: try.json with what finished (see childrun)
            _run(opts, before, out, 1, 1, None)
            if before.data.failed:
                return _document(opts, target, started, before, [], sel), out
            sel = select(ids, RunFacts.from_run_dir(out / "before"))
            plans = [Plan(f"after-{f}", (f,)) for f in sel.run] if len(sel.run) > 1 else []
            if sel.run:
                plans.append(Plan("after", sel.run))
            total = 1 + len(plans) + (opts.repeat - 1) * (1 + len(plans))
            n = 1
            for rnd in range(1, opts.repeat + 1):
                order = plans if rnd == 1 else [before, *plans]
                if rnd % 2 == 0:  # A B B A: a drift in time weighs on both sides alike
                    order = order[::-1]
                for plan in order:
                    n += 1
                    _run(opts, plan, out, rnd, n, total)
    except Interrupted as intr:
        _say(opts, f"interrupted by {intr.name}: try.json keeps the runs that finished")
        for p in (before, *plans):
            if not p.data.folders:
                p.data.failed = f"not run: advisor try was interrupted by {intr.name}"
        doc = _document(opts, target, started, before, plans, sel)
        doc["interrupted"] = intr.name
        return doc, out
    return _document(opts, target, started, before, plans, sel), out


def _document(
    opts: TryOptions, target: Any, started: str, before: Plan, plans: list[Plan], sel: Selection
) -> dict[str, Any]:
    rows = []
    for p in plans:
        est_ids = {i for f in p.fixes for i in FIXES[f].finding_ids}
        row = compare(before.data, p.data, est_ids, opts.loss_rtol)
        row["numerics_changing"] = any(FIXES[f].numerics_changing for f in p.fixes)
        rows.append(row)
    return {
        "try_schema_version": TRY_SCHEMA_VERSION,
        "advisor_version": __version__,
        "script": target.display,
        "argv": list(opts.args),
        "fix": opts.fix,
        "started_at": started,
        "settings": {
            "wait": opts.wait,
            "warmup": opts.warmup,
            "active": opts.active,
            "repeat": opts.repeat,
            "seed": opts.seed,
            "loss_steps": opts.loss_steps,
            "loss_rtol": opts.loss_rtol,
            "max_seconds": opts.max_seconds,
        },
        "before": {
            "folders": before.data.folders,
            "failed": before.data.failed,
            "steps": step_stats(before.data.step_ms),
            "findings": [
                {"id": f.id, "est_savings_ms": f.est_savings_ms} for f in before.data.findings
            ],
        },
        "results": rows,
        "skipped": [{"id": i, "reason": r} for i, r in sel.skipped],
        "not_applicable": [{"id": i, "reason": r} for i, r in sel.not_applicable],
        "diff_command": "advisor diff before after" if plans else None,
        "interrupted": None,
    }


def write_outputs(doc: dict[str, Any], out: Path) -> dict[str, Path]:
    from advisor.output.outfiles import atomic_write
    from advisor.output.try_view import render_html

    files = {"json": out / JSON_NAME, "html": out / HTML_NAME}
    write_json(files["json"], doc)
    atomic_write(files["html"], render_html(doc).encode("utf-8"))
    return files
