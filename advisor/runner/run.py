"""``advisor profile``, start to end: check the inputs, run the script under the profiler, write
run.json, analyze, report. The exit code is the script's own.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType
from typing import Any

from advisor.errors import AdvisorError
from advisor.rankrun import RankEnv, default_rank_out_dir, rank_env
from advisor.runner.execute import (
    EXIT_SIGINT,
    EXIT_SIGTERM,
    Outcome,
    ScriptRun,
    Terminated,
    resolve_target,
)
from advisor.runner.outdir import RUN_NAME, TRACE_NAME, check_out_dir, default_out_dir, write_json

EXIT_FAIL_ON = 3


@dataclass(frozen=True)
class ProfileOptions:
    script: str
    args: tuple[str, ...] = ()
    module: bool = False
    out: Path | None = None
    force: bool = False
    wait: int = 2
    warmup: int = 2
    active: int = 5
    record_shapes: bool = True
    with_stack: bool = True
    profile_memory: bool = True
    max_seconds: float = 60.0
    run_to_end: bool = False
    tensorboard: Path | None = None
    open_report: bool = False
    json_out: bool = False
    fail_on: str | None = None
    analysis: Any = None  # advisor.pipeline.Options
    debug: bool = False
    rank_timeout: float = 120.0  # torchrun: how long rank 0 waits for the other ranks

    def validate(self) -> None:
        for flag, v, low in (("--wait", self.wait, 0), ("--warmup", self.warmup, 0),
                             ("--active", self.active, 1)):  # fmt: skip
            if v < low:
                raise AdvisorError(f"{flag} must be at least {low}, got {v}")
        if self.max_seconds < 0:
            raise AdvisorError(
                f"--max-seconds must be 0 (no limit) or more, got {self.max_seconds}"
            )
        if self.rank_timeout < 0:
            raise AdvisorError(f"--rank-timeout must be 0 or more, got {self.rank_timeout}")
        if self.fail_on is not None and self.fail_on not in ("high", "medium", "low"):
            raise AdvisorError(f"--fail-on expects high, medium or low, got {self.fail_on!r}")
        if self.tensorboard is not None and self.tensorboard.exists():
            if not self.tensorboard.is_dir():
                raise AdvisorError("--tensorboard: exists and is not a directory", self.tensorboard)


class _Signals:
    """SIGTERM raises Terminated into the script; while the outputs are written, Ctrl-C and
    SIGTERM are held off (a second Ctrl-C abandons the report)."""

    def __init__(self) -> None:
        self._main = threading.current_thread() is threading.main_thread()
        self._saved: dict[int, Any] = {}
        self._ctrl_c = 0

    def __enter__(self) -> _Signals:
        if self._main:
            self._saved[signal.SIGTERM] = signal.signal(signal.SIGTERM, self._term_run)
        return self

    @staticmethod
    def _term_run(signum: int, frame: FrameType | None) -> None:
        raise Terminated()

    def _late(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT:
            self._ctrl_c += 1
            if self._ctrl_c > 1:
                raise KeyboardInterrupt
            print("advisor: writing the report; press Ctrl-C again to abandon it", file=sys.stderr)

    def finalizing(self) -> None:
        if not self._main:
            return
        signal.signal(signal.SIGTERM, self._late)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self._saved[signal.SIGINT] = signal.signal(signal.SIGINT, self._late)

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._saved.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def _shown(path: Path, cwd: str) -> str:
    try:
        return str(path.relative_to(cwd))
    except ValueError:
        return str(path)


def run_profile(opts: ProfileOptions) -> int:
    """Run ``opts.script`` under the profiler and write the four outputs; returns the exit code."""
    opts.validate()
    target = resolve_target(opts.script, opts.args, opts.module)
    cwd = os.getcwd()
    renv = rank_env()  # under torchrun: one trace per rank, rank 0 merges
    default = default_rank_out_dir(target.stem, renv) if renv else default_out_dir(target.stem)
    out_dir = Path(os.path.abspath(opts.out or default))
    check_out_dir(out_dir, opts.force, renv)
    tb_dir = Path(os.path.abspath(opts.tensorboard)) if opts.tensorboard else None

    from advisor.runner import facts
    from advisor.runner.analysis import _analyze_and_write
    from advisor.runner.context import ContextRecorder
    from advisor.runner.runinfo import build_run_json
    from advisor.runner.session import ProfileSession, SessionConfig

    cfg = SessionConfig(
        wait=opts.wait, warmup=opts.warmup, active=opts.active,
        record_shapes=opts.record_shapes, with_stack=opts.with_stack,
        profile_memory=opts.profile_memory, max_seconds=opts.max_seconds,
        run_to_end=opts.run_to_end,
    )  # fmt: skip
    trace_name = renv.trace_name if renv else TRACE_NAME
    trace_path = out_dir / trace_name
    run_json = out_dir / (renv.run_name if renv else RUN_NAME)
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t_start = time.perf_counter()
    recorder = ContextRecorder()
    session = ProfileSession(cfg, trace_path, recorder)
    outcome = Outcome("keyboard-interrupt", EXIT_SIGINT, "KeyboardInterrupt")
    with _Signals() as sigs:
        with ScriptRun(target) as script_run:  # restores argv, sys.path, __main__ on exit
            try:
                recorder.install()
                session.start()
                outcome = script_run.run()
            except KeyboardInterrupt:
                pass
            except Terminated:
                outcome = Outcome("sigterm", EXIT_SIGTERM, "SIGTERM")
            finally:
                sigs.finalizing()
                cap = session.finish()
                try:  # while the script's objects are still alive
                    context = recorder.to_dict()
                except Exception as err:  # noqa: BLE001 (facts are best effort)
                    context = {"error": f"{type(err).__name__}: {err}"}
                recorder.uninstall()
        t_run = time.perf_counter() - t_start
        env = {"versions": facts.versions(), "device": facts.device_facts(),
               "host": facts.host_facts()}  # fmt: skip
        run = build_run_json(
            target=target, outcome=outcome, cap=cap, cfg=cfg, context=context, env=env,
            started_at=started_at,
            ended_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            duration_s=t_run, cwd=cwd, trace_name=trace_name,
        )  # fmt: skip
        if renv is not None:
            run["distributed"] = {"rank": renv.rank, "world_size": renv.world_size,
                                  "local_rank": renv.local_rank, "run_id": renv.run_id}  # fmt: skip
        write_json(run_json, run)
        if renv is None:
            report, written, t_an = _analyze_and_write(
                out_dir, trace_path, run_json, opts.analysis, opts.debug
            )
        elif renv.is_leader:
            from advisor.runner.ranks import merge_ranks_and_write

            report, written, t_an = merge_ranks_and_write(
                out_dir, renv, opts.analysis, opts.debug, opts.rank_timeout
            )
        else:  # rank 0 writes the merged report
            report, written, t_an = None, {}, {}
        files = {"trace": trace_path} if trace_path.is_file() else {}
        files.update({"run": run_json, **written})
        if tb_dir is not None:
            try:
                from advisor.runner.tensorboard import write_tensorboard

                files["tensorboard"] = write_tensorboard(
                    tb_dir, files.get("trace"), written.get("findings")
                )
            except Exception as err:  # noqa: BLE001 (an optional extra never fails the run)
                print(f"advisor: --tensorboard: {type(err).__name__}: {err}", file=sys.stderr)
        _print_result(run["notes"], report, files, cwd, opts, renv)
    _write_timings(cap.timings_s, t_an, t_run, time.perf_counter() - t_start, cap)
    code = outcome.exit_code
    if code == 0 and report is not None and opts.fail_on:
        from advisor.commands.common import fail_on_hit

        if fail_on_hit(report, opts.fail_on):
            code = EXIT_FAIL_ON
    return code


def _print_result(
    notes: list[str],
    report: Any,
    files: dict[str, Path],
    cwd: str,
    opts: ProfileOptions,
    renv: RankEnv | None = None,
) -> None:
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # noqa: BLE001
        pass
    if renv is not None and not renv.is_leader:
        names = " and ".join(p.name for p in files.values())
        print(f"advisor: rank {renv.rank} wrote {names} into {_shown(files['run'].parent, cwd)}; "
              "rank 0 writes findings.json and report.html", file=sys.stderr, flush=True)  # fmt: skip
        return
    out = sys.stderr if opts.json_out else sys.stdout
    if opts.json_out and report is not None:
        sys.stdout.buffer.write(report.to_json())
        sys.stdout.flush()
    for n in notes:
        print(f"advisor: {n}", file=out)
    shown = {k: Path(_shown(v, cwd)) for k, v in files.items()}
    if report is not None and not opts.json_out:
        from advisor.render.terminal import print_summary

        print_summary(report, shown)
    else:
        for name, path in shown.items():
            print(f"{name:>11}: {path}", file=out)
    if renv is not None and "run" in shown:  # every rank's trace: analyze the folder
        cmd = f"advisor analyze {shlex.quote(str(shown['run'].parent))}"
        print(f"re-render with: {cmd}", file=out)
    elif "trace" in shown:
        cmd = f"advisor analyze {shlex.quote(str(shown['trace']))}"
        print(f"re-render with: {cmd}", file=out)
    if opts.open_report and "report" in files:
        import webbrowser

        try:
            webbrowser.open(files["report"].as_uri())
        except Exception:  # noqa: BLE001 (a missing browser never fails the run)
            pass
    out.flush()


def _write_timings(session_s: dict[str, float], analysis_s: dict[str, float], run_s: float,
                   total_s: float, cap: Any) -> None:  # fmt: skip
    """For benchmarks/profile_overhead.py: phase timings when ADVISOR_TIMINGS_FILE is set."""
    path = os.environ.get("ADVISOR_TIMINGS_FILE")
    if not path:
        return
    doc = {"session": session_s, "analysis": analysis_s, "run_s": run_s, "total_s": total_s,
           "steps_seen": cap.steps_seen, "step_times_s": cap.step_times_s,
           "window_steps": cap.window_steps}  # fmt: skip
    try:
        Path(path).write_text(json.dumps(doc, indent=1), encoding="utf-8")
    except OSError:
        pass
