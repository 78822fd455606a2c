"""``advisor profile``, start to end: check the inputs, run the script under the profiler, write
run.json, analyze, report. The exit code is the script's own.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from advisor import record, runinfo
from advisor.errors import EXIT_FAIL_ON, AdvisorError
from advisor.findings import check_fail_on, fails_at
from advisor.output.outfiles import release, write_error, write_json
from advisor.output.outfolder import check_out_dir, check_writable, default_out_dir
from advisor.profile.capture import SessionConfig
from advisor.profile.execute import (
    EXIT_SIGINT,
    Outcome,
    ScriptRun,
    Target,
    Terminated,
    resolve_target,
)
from advisor.profile.forks import ForkWatch
from advisor.profile.quiet import StdoutAside
from advisor.profile.signals import RunSignals
from advisor.profile.torchrun import RankEnv, default_rank_out_dir, rank_env
from advisor.runcapture import Distributed
from advisor.runfolder import RUN_NAME, TRACE_NAME

if TYPE_CHECKING:
    from advisor.profile.context import SetUp

MAX_SECONDS_LIMIT = 10_000_000.0  # about 4 months: beyond it the timer cannot be set


@dataclass(frozen=True)
class ProfileOptions:
    script: str
    args: tuple[str, ...] = ()
    module: bool = False
    out: Path | None = None
    force: bool = False
    session: SessionConfig = field(default_factory=SessionConfig)  # schedule and capture flags
    eval_wait: float | None = None  # --eval-wait as given (None: the default for the script)
    tensorboard: Path | None = None
    open_report: bool = False
    json_out: bool = False
    fail_on: str | None = None
    analysis: Any = None  # advisor.analysis.pipeline.Options
    debug: bool = False
    rank_timeout: float = 120.0  # torchrun: how long rank 0 waits for the other ranks

    def validate(self) -> None:
        cfg = self.session
        for flag, v, low in (
            ("--wait", cfg.wait, 0),
            ("--warmup", cfg.warmup, 0),
            ("--active", cfg.active, 1),
            ("--eval-steps", cfg.eval_steps, 1),
        ):
            if v < low:
                raise AdvisorError(f"{flag} must be at least {low}, got {v}")
        if not 0 <= cfg.max_seconds <= MAX_SECONDS_LIMIT:  # NaN fails too
            raise AdvisorError(
                f"--max-seconds must be 0 (no limit) up to {MAX_SECONDS_LIMIT:g} "
                f"seconds, got {cfg.max_seconds}"
            )
        if not 0 <= cfg.window_max_s <= MAX_SECONDS_LIMIT:
            raise AdvisorError(
                f"--max-window-seconds must be 0 (no limit) up to {MAX_SECONDS_LIMIT:g}, "
                f"got {cfg.window_max_s}"
            )
        if self.eval_wait is not None and not 0 <= self.eval_wait <= MAX_SECONDS_LIMIT:
            raise AdvisorError(
                f"--eval-wait must be 0 (do not wait) up to {MAX_SECONDS_LIMIT:g} seconds, "
                f"got {self.eval_wait}"
            )
        if self.eval_wait == 0 and "train" not in cfg.phases:
            raise AdvisorError(
                "--eval-wait 0 with --phases eval: there would be nothing to capture"
            )
        if self.rank_timeout < 0:
            raise AdvisorError(f"--rank-timeout must be 0 or more, got {self.rank_timeout}")
        check_fail_on(self.fail_on)
        if self.tensorboard is not None and not has_module("tensorboard"):
            raise AdvisorError(
                "--tensorboard needs TensorBoard, which is not installed: "
                "pip install 'torch-advisor[tensorboard]'"
            )
        if self.tensorboard is not None and self.tensorboard.exists():
            if not self.tensorboard.is_dir():
                raise AdvisorError("--tensorboard: exists and is not a directory", self.tensorboard)


def _shown(path: Path, cwd: str) -> str:
    try:
        return str(path.relative_to(cwd))
    except ValueError:
        return str(path)


TORCH_MISSING = (
    "advisor profile runs the script under torch.profiler, and torch is not installed here: "
    "pip install torch (on a GPU machine, the CUDA build of your choice); analyze, inspect, "
    "report and diff work without it"
)


def has_module(name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def require_torch() -> None:
    """One line, before anything runs, when torch is missing (``pip install torch-advisor``
    installs only what the analysis needs)."""
    if not has_module("torch"):
        raise AdvisorError(TORCH_MISSING)


def run_profile(opts: ProfileOptions) -> int:
    """Run ``opts.script`` under the profiler and write the four outputs; returns the exit code."""
    require_torch()
    opts.validate()
    target = resolve_target(opts.script, opts.args, opts.module)
    opts = replace(opts, session=_eval_wait(opts, target))
    cwd = os.getcwd()
    renv = rank_env()  # under torchrun: one trace per rank, rank 0 merges
    default = default_rank_out_dir(target.stem, renv) if renv else default_out_dir(target.stem)
    out_dir = Path(os.path.abspath(opts.out or default))
    try:
        check_out_dir(out_dir, opts.force, renv)  # and claims it: one run per folder
        return _profile(opts, target, cwd, renv, out_dir)
    finally:
        release(out_dir)


def _profile(
    opts: ProfileOptions, target: Any, cwd: str, renv: RankEnv | None, out_dir: Path
) -> int:
    tb_dir = Path(os.path.abspath(opts.tensorboard)) if opts.tensorboard else None
    if tb_dir is not None:
        check_writable(tb_dir, "--tensorboard folder")

    from advisor.profile.context import ContextRecorder
    from advisor.profile.session import ProfileSession

    cfg = opts.session
    trace_path = out_dir / (renv.trace_name if renv else TRACE_NAME)
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t_start = time.perf_counter()
    recorder = ContextRecorder()
    session = ProfileSession(cfg, trace_path, recorder)
    if renv is None:  # replaced at the end; what stays when the process dies without a word
        from advisor.profile.runinfo import unfinished_run_json

        try:  # best effort: a folder that cannot take it now fails later, with its message
            started = unfinished_run_json(target, cwd, started_at, TRACE_NAME)
            write_json(out_dir / RUN_NAME, record.dump(started))
        except (OSError, AdvisorError):
            pass

    aside = StdoutAside(opts.json_out)  # --json: stdout holds the JSON alone

    def conclude(outcome: Outcome, cap: Any, setup: SetUp) -> int:
        """Write and print the outputs once the script is over; returns the exit code."""
        aside.stop()
        t_run = time.perf_counter() - t_start
        try:
            report, files, t_an, notes = _write_outputs(
                opts,
                target,
                outcome,
                cap,
                cfg,
                setup,
                started_at,
                t_run,
                cwd,
                out_dir,
                tb_dir,
                renv,
            )
        except (OSError, AdvisorError) as err:
            # the script has run: its exit code stands; what could be written stays (but the
            # run.json written at the start, which would say that the process died)
            print(f"advisor: error: {write_error(err, out_dir, trace_path)}", file=sys.stderr)
            _drop_unfinished(out_dir / (renv.run_name if renv else RUN_NAME))
            return outcome.exit_code
        _print_result(notes, report, files, cwd, opts, renv)
        code = outcome.exit_code
        if code == 0 and report is not None and opts.fail_on:
            if fails_at(report.findings, opts.fail_on):
                code = EXIT_FAIL_ON
        return code

    try:
        with RunSignals() as sigs:
            session.hard_stop = sigs.hard_stop = lambda outcome: _hard_stop(
                outcome, session, recorder, sigs, conclude, out_dir
            )
            aside.start()
            try:
                outcome, cap, setup = _run_script(target, session, recorder, sigs)
            finally:
                aside.stop()
            return conclude(outcome, cap, setup)
    except KeyboardInterrupt:  # a second Ctrl-C while the outputs were written
        print(f"advisor: report abandoned; what was written is in {out_dir}", file=sys.stderr)
        return EXIT_SIGINT


def _eval_wait(opts: ProfileOptions, target: Any) -> SessionConfig:
    """The session with its --eval-wait: as given, else the default, or 0 for a script whose
    files never mention evaluation (it cannot reach an evaluation phase)."""
    from advisor.profile.evalwindow import eval_code_path

    cfg = opts.session
    if opts.eval_wait is not None:
        return replace(cfg, eval_wait=opts.eval_wait, eval_wait_why=None, eval_wait_given=True)
    if (
        "eval" in cfg.phases
        and "train" in cfg.phases
        and not eval_code_path(target.kind, target.name)
    ):
        why = "the script and the files beside it never mention evaluation"
        return replace(cfg, eval_wait=0.0, eval_wait_why=why)
    return cfg


def _drop_unfinished(run_json: Path) -> None:
    run = runinfo.read_file(run_json)
    if run is not None and run.end_reason == "process-died":
        with contextlib.suppress(OSError):
            run_json.unlink()


def _hard_stop(
    outcome: Outcome, session: Any, recorder: Any, sigs: RunSignals, conclude: Any, out_dir: Path
) -> None:
    """End the run from inside the script (a step hook or a signal handler, in the main
    thread) when it swallowed the advisor's stop or SIGTERM (``except BaseException``): write
    the outputs, then leave at once as plain Python's SIGTERM would (no cleanup of the
    script's, which plain Python would not have run either)."""
    sigs.script_over()  # first: torch's SIGCHLD handler would raise from the calls below
    if outcome.end_reason != "os-exit":
        what = outcome.error if outcome.error else "the advisor's stop after the window"
        print(
            f"advisor: the script caught {what} (except BaseException?); ending it now",
            file=sys.stderr,
            flush=True,
        )
    code = outcome.exit_code
    try:
        sigs.finalizing()
        recorder.loader_workers.close()
        cap = session.finish()
        setup = _setup(recorder)
        recorder.uninstall()
        code = conclude(outcome, cap, setup)
    except KeyboardInterrupt:
        print(f"advisor: report abandoned; what was written is in {out_dir}", file=sys.stderr)
        code = EXIT_SIGINT
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(code)


def _setup(recorder: Any) -> SetUp:
    """What the recorder saw of the script's set-up; empty when it cannot be read."""
    from advisor.profile.context import SetUp

    try:
        setup: SetUp = recorder.setup()
        return setup
    except Exception:  # noqa: BLE001 (facts are best effort)
        return SetUp()


def _run_script(
    target: Any, session: Any, recorder: Any, sigs: RunSignals
) -> tuple[Outcome, Any, SetUp]:
    """Run the script under the session; returns (how it ended, the capture, the set-up)."""
    from advisor.profile.trial.runtime import install_from_env

    outcome = Outcome("keyboard-interrupt", EXIT_SIGINT, "KeyboardInterrupt")
    trial = None
    forks = ForkWatch(lambda: session.phase in ("probe", "window", "eval-window"))
    session.stop_requested = lambda: sigs.terminated
    session.terminated_outcome = sigs.outcome
    with ScriptRun(target) as script_run:  # restores argv, sys.path, __main__ on exit
        try:
            recorder.install()
            trial = install_from_env()  # advisor try: fixes patched in after the observers
            forks.start()
            session.start()
            outcome = script_run.run(sigs.script_over)
        except KeyboardInterrupt:
            pass
        except Terminated:
            outcome = sigs.outcome()
        finally:
            forks.stop()
            sigs.finalizing()
            recorder.loader_workers.close()  # before finish()'s garbage collection
            cap = session.finish()
            setup = _setup(recorder)  # while the script's objects are still alive
            if trial is not None:  # undone first: its patches wrap the recorder's
                setup = replace(setup, trial=trial.finish())
            setup = replace(setup, forks=forks.summary())
            recorder.uninstall()
    if sigs.terminated:
        # SIGTERM ended the run, even when its exception was lost: raised where Python ignores
        # exceptions (a __del__, an at-fork hook) or caught by the script, which then failed
        # (its DataLoader workers got SIGTERM too) or reached its next step
        outcome = sigs.outcome()
    elif sigs.sigterm_handled_by_script and outcome.end_reason in ("completed", "sys-exit"):
        # the script's own SIGTERM handler ended the run (its exit code stands)
        outcome = replace(outcome, end_reason="sigterm", error="SIGTERM (handled by the script)")
    return outcome, cap, setup


def _write_outputs(
    opts: ProfileOptions,
    target: Any,
    outcome: Outcome,
    cap: Any,
    cfg: Any,
    setup: SetUp,
    started_at: str,
    t_run: float,
    cwd: str,
    out_dir: Path,
    tb_dir: Path | None,
    renv: RankEnv | None,
) -> tuple[Any, dict[str, Path], dict[str, float], list[str]]:
    """run.json, then the analysis (findings.json, report.html; under torchrun rank 0 merges
    the ranks) and TensorBoard; returns the report, the files written, the analysis timings
    and the run's notes. Raises OSError / AdvisorError when the folder cannot take them."""
    from advisor.profile import facts
    from advisor.profile.analysis import _analyze_and_write
    from advisor.profile.runinfo import build_run_json

    trace_name = renv.trace_name if renv else TRACE_NAME
    trace_path, run_json = out_dir / trace_name, out_dir / (renv.run_name if renv else RUN_NAME)
    run = build_run_json(
        target=target,
        outcome=outcome,
        cap=cap,
        cfg=cfg,
        setup=setup,  # with advisor try's block and the script's forks, where there are any
        versions=facts.versions(),
        device=facts.device_facts(),
        host=facts.host_facts(),
        started_at=started_at,
        ended_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        duration_s=t_run,
        cwd=cwd,
        trace_name=trace_name,
        distributed=None
        if renv is None
        else Distributed(
            rank=renv.rank,
            world_size=renv.world_size,
            local_rank=renv.local_rank,
            run_id=renv.run_id,
        ),
    )
    write_json(run_json, runinfo.dump(run))
    analysis = _with_live_roots(opts.analysis, target, cwd)
    if renv is None:
        report, written, t_an = _analyze_and_write(
            out_dir, trace_path, run_json, analysis, opts.debug
        )
    elif renv.is_leader:
        from advisor.profile.ranks import merge_ranks_and_write

        report, written, t_an = merge_ranks_and_write(
            out_dir, renv, analysis, opts.debug, opts.rank_timeout
        )
    else:  # rank 0 writes the merged report
        report, written, t_an = None, {}, {}
    files = {"trace": trace_path} if cap.trace_written and trace_path.is_file() else {}
    files.update({"run": run_json, **written})
    if tb_dir is not None:
        try:
            from advisor.profile.tensorboard import write_tensorboard

            files["tensorboard"] = write_tensorboard(
                tb_dir, files.get("trace"), written.get("findings")
            )
        except Exception as err:  # noqa: BLE001 (an optional extra never fails the run)
            print(f"advisor: --tensorboard: {type(err).__name__}: {err}", file=sys.stderr)
    return report, files, t_an, list(run.notes)


def _with_live_roots(analysis: Any, target: Target, cwd: str) -> Any:
    """The analysis options with this live run's folders as source roots (the folder it ran
    the script from, the script's folder): the one place they come from, never run.json."""
    from advisor.analysis.pipeline import Options
    from advisor.derive.sources import live_roots

    opts = analysis if analysis is not None else Options()
    script = target.name if target.kind == "script" else None
    return replace(opts, source_roots=(*opts.source_roots, *live_roots(script, cwd)))


def _print_result(
    notes: list[str],
    report: Any,
    files: dict[str, Path],
    cwd: str,
    opts: ProfileOptions,
    renv: RankEnv | None = None,
) -> None:
    """Print the summary; a closed stdout or a reader that went away (``| head``) never
    changes the exit code: the outputs are written, the summary is only a courtesy."""
    try:
        _print_summary(notes, report, files, cwd, opts, renv)
    except (BrokenPipeError, ValueError, AttributeError, OSError):  # closed / gone stdout
        _silence_stdout()


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the flush at exit cannot fail (Python would exit 120)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    except OSError:
        pass
    if sys.stdout is None or sys.stdout.closed:
        sys.stdout = open(os.devnull, "w")  # kept until the process ends


def _print_summary(
    notes: list[str],
    report: Any,
    files: dict[str, Path],
    cwd: str,
    opts: ProfileOptions,
    renv: RankEnv | None = None,
) -> None:
    if sys.stdout is None:  # started with stdout closed (>&-)
        raise ValueError("no stdout")
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # noqa: BLE001
        pass
    if renv is not None and not renv.is_leader:
        names = " and ".join(p.name for p in files.values())
        print(
            f"advisor: rank {renv.rank} wrote {names} into {_shown(files['run'].parent, cwd)}; "
            "rank 0 writes findings.json and report.html",
            file=sys.stderr,
            flush=True,
        )
        return
    out = sys.stderr if opts.json_out else sys.stdout
    if opts.json_out and report is not None:
        sys.stdout.buffer.write(report.to_json())
        sys.stdout.flush()
    for n in notes:
        print(f"advisor: {n}", file=out)
    shown = {k: Path(_shown(v, cwd)) for k, v in files.items()}
    if report is not None and not opts.json_out:
        from advisor.output.terminal import print_summary

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
