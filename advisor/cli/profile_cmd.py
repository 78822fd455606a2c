"""``advisor profile [OPTIONS] SCRIPT [ARGS]...`` and ``advisor profile [OPTIONS] -m MODULE [ARGS]``.

Options before SCRIPT belong to the advisor; everything from SCRIPT on belongs to the script
(option parsing stops at the first positional argument, as ``python`` does it). ``-m`` is a
flag that makes SCRIPT a module name, so ``advisor profile -m pkg.train --out x`` passes
``--out x`` to the module. Torch is imported only when the command runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from advisor.cli.analysis_options import (
    Debug,
    FailOn,
    JsonOut,
    NoSource,
    Only,
    OpenReport,
    SetThreshold,
    Skip,
    analysis_options,
)
from advisor.cli.run_options import Module, Script, ScriptArgs, Wait, Warmup
from advisor.profile.evalwait import DEFAULT_EVAL_WAIT_S, EVAL_WAIT_STEPS
from advisor.trace.source import DEFAULT_MAX_TRACE_BYTES

_HELP = """Run SCRIPT (or -m MODULE) under torch.profiler and rank the fixes by time saved per step.

Steps are found without code changes through a global optimizer.step() hook; loops without an
optimizer call advisor.step() once per iteration. After --wait steps (step 0, everything before
the first step, is always skipped) and --warmup steps, --active steps are recorded; then the
script is stopped (--run-to-end lets it finish). Writes trace.json.gz, run.json, findings.json
and report.html into --out. With --json, findings.json goes to stdout and the script's own
output to stderr.

Exit code: the script's own when it ends by itself (it finished, failed, called sys.exit, or
ran to its end with --run-to-end); 0 when the advisor stopped it after its windows; 3 instead of
0 when --fail-on finds a finding at that level; 1 when the advisor itself cannot run (a bad
option, a missing script), named in one line.
"""


def register(app: typer.Typer) -> None:
    @app.command(
        "profile",
        help=_HELP,
        context_settings={"allow_interspersed_args": False},
    )
    def profile_command(
        script: Script,
        script_args: ScriptArgs = None,
        module: Module = False,
        out: Path | None = typer.Option(
            None,
            "--out",
            "-o",
            help="Output folder (default ./advisor-runs/<script>-<YYYYmmdd-HHMMSS>/).",
        ),
        force: bool = typer.Option(
            False, "--force", help="Write into a non-empty --out, replacing an earlier advisor run."
        ),
        wait: Wait = 2,
        warmup: Warmup = 2,
        active: int = typer.Option(5, "--active", help="Steps to record."),
        run_to_end: bool = typer.Option(
            False, "--run-to-end", help="Let the script finish after the window is captured."
        ),
        max_seconds: float = typer.Option(
            60.0,
            "--max-seconds",
            help="A script that never steps is captured as one step for at most this long "
            "(0: no limit).",
        ),
        max_window_seconds: float = typer.Option(
            60.0,
            "--max-window-seconds",
            help="End the profiled window at its first complete step after this many seconds "
            "of recording (or 2 GiB of profiler memory): steps that run the model many times "
            "(an LBFGS step(closure)) stay affordable (0: no time limit).",
        ),
        eval_wait: float | None = typer.Option(
            None,
            "--eval-wait",
            help="Seconds to wait for an evaluation phase after the training window. By "
            f"default the wait is counted in the script's own steps: {EVAL_WAIT_STEPS} training "
            f"steps at its pace, at least {DEFAULT_EVAL_WAIT_S:g} s, ended early by an epoch that "
            "cannot end in time or a next epoch begun without evaluating (0 when the script's "
            "files never mention evaluation). Given: exactly that many seconds; 0: do not wait.",
        ),
        phases: str | None = typer.Option(
            None,
            "--phases",
            help="Phases to capture: train, eval or train,eval (the default; train only under "
            "torchrun, where ranks must stop together). After the training window the script "
            "runs on unprofiled until its evaluation phase (a model called in eval() mode or "
            "under no_grad/inference_mode), which gets a second short window.",
        ),
        eval_steps: int = typer.Option(
            3, "--eval-steps", help="Evaluation steps (model calls) to record."
        ),
        record_shapes: bool = typer.Option(
            True, "--record-shapes/--no-record-shapes", help="Record operator input shapes."
        ),
        with_stack: bool = typer.Option(
            True, "--stack/--no-stack", help="Record Python stacks (source lines) in the window."
        ),
        profile_memory: bool = typer.Option(
            True, "--memory/--no-memory", help="Record memory allocations."
        ),
        tensorboard: Path | None = typer.Option(
            None, "--tensorboard", help="Also write the trace and headline scalars for TensorBoard."
        ),
        open_: OpenReport = False,
        json_out: JsonOut = False,
        fail_on: FailOn = None,
        only: Only = None,
        skip: Skip = None,
        set_: SetThreshold = None,
        no_source: NoSource = False,
        debug: Debug = False,
        rank_timeout: float = typer.Option(
            120.0,
            "--rank-timeout",
            help="Under torchrun: how long rank 0 waits for the other ranks' traces (seconds).",
        ),
    ) -> None:
        from advisor.profile.capture import SessionConfig, default_phases, parse_phases
        from advisor.profile.run import ProfileOptions, run_profile

        analysis = analysis_options(only, skip, set_, debug, no_source, DEFAULT_MAX_TRACE_BYTES)
        opts = ProfileOptions(
            script=script,
            args=tuple(script_args or ()),
            module=module,
            out=out,
            force=force,
            session=SessionConfig(
                wait=wait,
                warmup=warmup,
                active=active,
                record_shapes=record_shapes,
                with_stack=with_stack,
                profile_memory=profile_memory,
                max_seconds=max_seconds,
                run_to_end=run_to_end,
                phases=parse_phases(phases or default_phases()),
                eval_steps=eval_steps,
                window_max_s=max_window_seconds,
            ),
            eval_wait=eval_wait,
            tensorboard=tensorboard,
            open_report=open_,
            json_out=json_out,
            fail_on=fail_on,
            analysis=analysis,
            debug=debug,
            rank_timeout=rank_timeout,
        )
        code = run_profile(opts)
        sys.stdout.flush()
        raise typer.Exit(code)
