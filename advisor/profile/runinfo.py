"""Assemble run.json (the run context, the record :class:`advisor.runinfo.RunInfo`) and the
notes the report shows about how the run went.

The keys are described in ``docs/run-json.md``; the file is ``record.dump`` of the record,
written with sorted keys.
"""

from __future__ import annotations

import os

from advisor import __version__
from advisor.profile.capture import Capture, SessionConfig
from advisor.profile.context import SetUp
from advisor.profile.evalwait import EVAL_WAIT_STEPS
from advisor.profile.execute import EXIT_SIGTERM, Outcome, Target
from advisor.profile.faults import remedy
from advisor.profile.forks import fork_note
from advisor.runcapture import Distributed, Eval, MissingPhase, Profile, RunStarted, Versions
from advisor.runinfo import Backends, Device, Host, RunInfo

RUN_SCHEMA_VERSION = 1


def _steps(a: int, b: int) -> str:
    return f"step {a}" if a == b else f"steps {a}-{b}"


# endings that are the script's own failure (not a signal or Ctrl-C from outside)
_ERRORS = ("exception", "out-of-memory", "dataloader-worker-died", "sys-exit", "os-exit")


def ended_early(outcome: Outcome, cap: Capture) -> bool:
    """Whether the run ended before its profiling window was complete: a script that fails or
    exits non-zero after a complete window (``--run-to-end``) did not end early for the
    report, whose figures cover the whole window (its exit code is passed on all the same)."""
    return outcome.ended_early and cap.scope != "window"


def notes(outcome: Outcome, cap: Capture, cfg: SessionConfig) -> list[str]:
    """Plain sentences for the report and the terminal about how the run ended and what the
    trace holds."""
    out: list[str] = []
    g = cap.steps_seen
    win = _steps(cfg.active_first, cfg.active_last)
    by_script = (
        f"; the script's own handler ended it with exit code {outcome.exit_code}"
        if outcome.end_reason == "sigterm" and outcome.exit_code != EXIT_SIGTERM
        else ""
    )
    after = f"after {g} step(s)" if g else "before its first step"
    reason = {
        "exception": f"The script raised {outcome.error} {after}",
        "out-of-memory": f"The script ran out of memory ({outcome.error}) {after}",
        "dataloader-worker-died": f"A DataLoader worker process died ({outcome.error}) {after}",
        "keyboard-interrupt": f"The run was interrupted (Ctrl-C) {after}",
        "sigterm": f"The run was terminated (SIGTERM) {after}{by_script}",
        "sys-exit": f"The script exited with code {outcome.exit_code} {after}",
        "sighup": f"The run was ended by SIGHUP (its terminal closed) {after}",
        "sigquit": f"The run was ended by SIGQUIT {after}",
        "os-exit": f"The script called {outcome.error} {after}",
    }.get(outcome.end_reason)
    before_any = outcome.ended_early and g == 0 and cap.scope == "whole-run"
    if reason and before_any:  # an import error, a bad argument: nothing ran to profile
        fix = " Fix that, then run again." if outcome.end_reason in _ERRORS else ""
        out.append(f"{reason}: nothing was profiled.{fix}")
    elif reason and ended_early(outcome, cap):
        out.append(f"{reason}; the report covers what was captured until then.")
        advice = remedy(outcome.end_reason, outcome.error)
        if advice:
            out.append(advice)
    elif reason and outcome.ended_early:  # after a complete window (--run-to-end)
        out.append(
            f"{reason.split(' after ')[0]} after the profiling window was captured "
            f"(exit code {outcome.exit_code}, passed on); the report covers the whole window."
        )
    if cap.step_source == "forward":
        out.append(
            f"Steps are the top-level calls of {cap.step_module} (the script never created an "
            "optimizer); "
            + (
                "they ran in evaluation (eval() mode or autograd off)."
                if cap.phase == "eval"
                else "they ran in training mode."
            )
        )
    ev = cap.eval or Eval()
    if cap.scope == "window" and cap.stopped_after_window and not ev.trace_written:
        out.append(
            f"Stopped the script after capturing the profiling window ({win}); "
            "--run-to-end lets it finish."
        )
    elif cap.scope == "window" and cap.ran_on_in_thread:
        out.append(
            f"Captured the profiling window ({win}) in a thread other than the main one; "
            "the advisor stops only the main thread, so the script ran on to its end."
        )
    elif cap.scope == "partial-window":
        a, b = cap.window_steps
        out.append(
            f"The run ended inside the profiling window: {_steps(a, b)} of {win} were captured."
        )
    elif cap.scope == "pre-window" and cap.foreign_profiler_step is not None:
        a, b = cap.window_steps
        out.append(
            f"The trace holds {_steps(a, b)}, recorded without Python stacks or GPU activity."
        )
    elif cap.scope == "pre-window":
        a, b = cap.window_steps
        out.append(
            f"The run ended after {g} step(s), before the profiling window ({win}) began. The "
            f"trace holds {_steps(a, b)}, recorded without Python stacks or GPU activity; early "
            "steps include warm-up. For short runs lower --wait/--warmup/--active."
        )
    elif cap.scope == "whole-run" and cap.max_seconds_hit:
        out.append(
            f"No step came within --max-seconds ({cfg.max_seconds:g} s), the advisor's limit "
            "on the wait for a first step, so that time was captured as one step, without Python "
            "stacks or GPU activity. A first step that takes longer (an LBFGS step(closure), a "
            "long set-up) needs a larger --max-seconds; a loop without optimizer.step() calls "
            "advisor.step() once per iteration."
        )
        out.append(
            "Stopped the script when --max-seconds ran out; --run-to-end lets it continue."
            if cap.stopped_after_window
            else "The script ran on to its end without profiling after --max-seconds."
        )
    elif cap.scope == "whole-run" and before_any:
        pass  # said above: no advice on steps for a script that never reached one
    elif cap.scope == "whole-run":
        out.append(
            "No steps were seen (no optimizer.step() and no advisor.step() call), so the whole "
            "run was captured as one step, without Python stacks or GPU activity. Call "
            "advisor.step() once per iteration to profile steps."
        )
    elif cap.scope == "none":
        why = f": {cap.export_error}" if cap.export_error else ""
        out.append(f"No trace could be written{why}.")
    if cap.foreign_profiler_step is not None:
        out.append(
            f"The script started torch.profiler itself at step {cap.foreign_profiler_step}; "
            "advisor's own profiling stopped there so the script's profiler could run."
        )
    out += _eval_notes(cap, cfg)
    return out


_EVAL_WHAT = (
    "a module with parameters called in eval() mode or under torch.no_grad() / "
    "torch.inference_mode()"
)


_LONGER = "Pass --eval-wait SECONDS to wait that long"


def _waited_for(ev: Eval, cfg: SessionConfig) -> str:
    """What the wait allowed: ``200 training steps (about 12.3 s at the script's pace)``."""
    budget = ev.wait.budget_s if ev.wait else None
    if not cfg.eval_wait_given and isinstance(budget, int | float):
        return f"{EVAL_WAIT_STEPS} training steps or {cfg.eval_wait:g} s: {budget:,.1f} s here"
    return f"--eval-wait {cfg.eval_wait:g} s"


def _waited(ev: Eval, cfg: SessionConfig) -> str:
    steps = ev.wait.steps if ev.wait else None
    did = f" ({steps:,} training steps went by)" if isinstance(steps, int) else ""
    return (
        f"no evaluation phase ({_EVAL_WHAT}) came within the wait after the training window "
        f"({_waited_for(ev, cfg)}){did}"
    )


def missing_phases(cap: Capture, cfg: SessionConfig) -> list[MissingPhase]:
    """Every phase the run did not capture, with why: ``phase``, ``missing`` (a code) and
    ``why`` (a sentence for the terminal and the report); findings.json ``run.phases`` lists
    them after the captured ones."""
    out: list[MissingPhase] = []

    def add(phase: str, code: str, why: str) -> None:
        out.append(MissingPhase(phase=phase, missing=code, why=why))

    ev = cap.eval or Eval()
    stopped = (
        "the script was stopped there (--run-to-end lets it finish)"
        if cap.stopped_after_window
        else "the script ran on unprofiled"
    )
    if cap.phase == "eval" or "train" not in cfg.phases:
        if "train" not in cfg.phases:
            add("train", "not-requested", "not requested (--phases eval)")
        elif cap.step_source == "forward":
            add(
                "train",
                "no-training",
                f"the script trained nothing: no optimizer stepped and {cap.step_module} "
                "ran in evaluation",
            )
        return out
    if "eval" not in cfg.phases:
        add("eval", "not-requested", "not requested (--phases train; the default under torchrun)")
    elif ev.trace_written:
        pass
    elif ev.missing == "eval-wait":
        add("eval", "eval-wait", f"{_waited(ev, cfg)}; {stopped}. {_LONGER}")
    elif ev.missing == "epoch-left":
        left = ev.epoch_left
        add(
            "eval",
            "epoch-left",
            f"the training epoch had {left:,} more steps than the wait for an evaluation "
            f"phase allows ({_waited_for(ev, cfg)}), so no evaluation after it could be "
            f"captured; {stopped}. {_LONGER}"
            if isinstance(left, int)
            else f"the rest of the training epoch is longer than the wait; {stopped}. {_LONGER}",
        )
    elif ev.missing == "next-epoch":
        add(
            "eval",
            "next-epoch",
            "the script began its next training epoch without an evaluation phase "
            f"({_EVAL_WHAT}) after the training window; {stopped}. A script that evaluates "
            "every few epochs: pass --eval-wait SECONDS (waits that long, epochs or not)",
        )
    elif ev.missing == "no-eval-code":
        add(
            "eval",
            "no-eval-code",
            f"not waited for: {cfg.eval_wait_why or 'the script shows no evaluation code'} "
            "(pass --eval-wait SECONDS to wait anyway)",
        )
    elif ev.missing == "max-seconds":
        add(
            "eval",
            "max-seconds",
            f"no evaluation phase ({_EVAL_WHAT}) came within --max-seconds after the "
            f"training window; {stopped}",
        )
    elif ev.missing == "ended":
        add(
            "eval",
            "ended",
            f"the script ended after the training window without an evaluation phase "
            f"({_EVAL_WHAT})",
        )
    elif ev.export_error:
        add("eval", "export-error", f"its trace could not be written: {ev.export_error}")
    elif cap.scope != "window":
        add(
            "eval",
            "no-training-window",
            "the run ended before the training window was complete, so no evaluation phase "
            "was waited for",
        )
    return out


def _eval_notes(cap: Capture, cfg: SessionConfig) -> list[str]:
    ev = cap.eval or Eval()
    out: list[str] = []
    if ev.trace_written:
        a, b = ev.steps or (0, 0)
        stop = (
            " Stopped the script after it; --run-to-end lets it finish."
            if cap.stopped_after_window
            else ""
        )
        n = int(ev.steps_seen or 0)
        if ev.ended_by and ev.scope == "window" and n < cfg.eval_steps:
            part = (
                f" (the whole phase: {n} call(s), fewer than --eval-steps {cfg.eval_steps}; "
                f"it ended at {ev.ended_by})"
            )
        elif ev.scope == "window":
            part = ""
        else:
            part = " (the phase ended early)"
        out.append(
            f"Evaluation phase: {_steps(a, b)} of the calls of {ev.module} in "
            f"evaluation were captured{part}, in {ev.trace}.{stop}"
        )
    for m in missing_phases(cap, cfg):
        if m.missing == "not-requested":
            continue  # the user asked for it: no note
        out.append(f"{(m.phase or '').capitalize()} phase not captured: {m.why}.")
    return out


def build_run_json(
    *,
    target: Target,
    outcome: Outcome,
    cap: Capture,
    cfg: SessionConfig,
    setup: SetUp,
    versions: Versions,
    device: Device,
    host: Host,
    started_at: str,
    ended_at: str,
    duration_s: float,
    cwd: str,
    trace_name: str,
    distributed: Distributed | None = None,
) -> RunInfo:
    """The run.json record (see docs/run-json.md)."""
    script = target.name if target.kind == "script" else None
    return RunInfo(
        schema_version=RUN_SCHEMA_VERSION,
        advisor_version=__version__,
        script=target.display,
        script_path=os.path.abspath(script) if script else None,
        module=target.name if target.kind == "module" else None,
        argv=tuple(target.args),  # the script's arguments (the script itself is "script")
        cwd=cwd,
        pid=os.getpid(),
        started_at=started_at,
        ended_at=ended_at,
        duration_s=round(duration_s, 3),
        exit_code=outcome.exit_code,
        ended_early=ended_early(outcome, cap),
        end_reason=outcome.end_reason,
        error=outcome.error,
        no_steps=cap.steps_seen == 0,
        steps_seen=cap.steps_seen,
        step_source=cap.step_source,
        trace=trace_name if cap.trace_written else None,
        trace_scope=cap.scope,
        window_steps=tuple(cap.window_steps) or None,
        stopped_after_window=cap.stopped_after_window,
        max_seconds_hit=cap.max_seconds_hit,
        foreign_profiler=cap.foreign_profiler_step is not None,
        foreign_profiler_step=cap.foreign_profiler_step,
        export_error=cap.export_error,
        call_sites=cap.call_sites,
        call_sites_error=cap.call_sites_error,
        step_module=cap.step_module,
        phase=cap.phase,
        eval=cap.eval,
        missing_phases=tuple(missing_phases(cap, cfg)),
        capture_limits=tuple(cap.capture_limits),
        profile=Profile(
            wait=cfg.wait,
            warmup=cfg.warmup,
            active=cfg.active,
            record_shapes=cfg.record_shapes,
            with_stack=cfg.with_stack,
            profile_memory=cfg.profile_memory,
            max_seconds=cfg.max_seconds,
            run_to_end=cfg.run_to_end,
            phases=tuple(cfg.phases),
            eval_steps=cfg.eval_steps,
            eval_wait=cfg.eval_wait,
            max_window_seconds=cfg.window_max_s,
            activities=tuple(cap.activities),
        ),
        torch=versions.torch,
        cuda=versions.cuda,
        versions=versions,
        device=device,
        host=host,
        memory=cap.memory,
        backends=cap.backends or Backends(),
        dataloaders=setup.dataloaders,
        optimizers=setup.optimizers,
        zero_grad=setup.zero_grad,
        allocator=setup.allocator,
        forward=setup.forward,
        modules=setup.modules,
        compile=setup.compile,
        notes=tuple(notes(outcome, cap, cfg)) + tuple(n for n in (fork_note(setup.forks),) if n),
        timings_s=dict(sorted(cap.timings_s.items())),
        distributed=distributed,
        trial=setup.trial,
        forks=setup.forks,
    )


def unfinished_run_json(target: Target, cwd: str, started_at: str, trace_name: str) -> RunStarted:
    """The run.json written before the script starts, replaced when the run ends. It stays only
    when the advisor's process ended with no chance to write (SIGKILL, the OOM killer, a crash
    such as SIGSEGV), and then says so."""
    return RunStarted(
        schema_version=RUN_SCHEMA_VERSION,
        advisor_version=__version__,
        script=target.display,
        module=target.name if target.kind == "module" else None,
        argv=tuple(target.args),
        cwd=cwd,
        pid=os.getpid(),
        started_at=started_at,
        trace=trace_name,
        notes=(
            "The run did not end normally: the process was killed (SIGKILL, the OOM killer) "
            "or crashed (SIGSEGV, an abort) before the advisor could write its report, so "
            f"nothing of it could be analyzed here. If {trace_name} is in this folder, it holds "
            f"the steps captured before that: run `advisor analyze {trace_name}`.",
        ),
    )
