"""``advisor try [OPTIONS] --fix ID[,ID...] SCRIPT [ARGS]``: measure fixes against estimates.

Options before SCRIPT belong to the advisor; everything from SCRIPT on belongs to the script.
Torch is imported only in the profiled child processes.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import typer

from advisor.cli.run_options import Module, Script, ScriptArgs, Wait, Warmup

_HELP = """Run SCRIPT as is and with fixes applied at run time (documented, reversible patches;
see docs/try.md), each run a fresh `advisor profile` process with the same window, and compare:
per fix the median step before and after, the measured saving next to the advisor's estimate,
and a warning when the first losses differ. --fix takes fix ids separated by commas, or
all-safe (every fix that keeps numerics and whose finding fired). Writes try.json, try.html and
the run folders before/ and after/ (which `advisor diff` compares) into --out.
"""


def register(app: typer.Typer) -> None:
    from advisor.profile.trial.registry import (
        FIXES,  # no torch: the fixes import it when they apply
    )

    fix_help = f"Fix ids (comma-separated): {', '.join(FIXES)}; or all-safe."

    @app.command("try", help=_HELP, context_settings={"allow_interspersed_args": False})
    def try_command(
        script: Script,
        fix: str = typer.Option(..., "--fix", help=fix_help),
        script_args: ScriptArgs = None,
        module: Module = False,
        out: Path | None = typer.Option(
            None, "--out", "-o", help="Output folder (default ./advisor-runs/try-<script>-<time>/)."
        ),
        force: bool = typer.Option(
            False, "--force", help="Write into a non-empty --out, replacing an earlier try there."
        ),
        wait: Wait = 2,
        warmup: Warmup = 2,
        active: int = typer.Option(5, "--active", help="Steps to record and compare."),
        repeat: int = typer.Option(
            2,
            "--repeat",
            help="Rounds of runs (before, then each fix; every second round in reverse "
            "order), pooled; a faster/slower verdict needs 2 or more.",
        ),
        max_seconds: float = typer.Option(
            60.0, "--max-seconds", help="As for advisor profile: a script that never steps."
        ),
        seed: int = typer.Option(0, "--seed", help="Seed set in every run before the script."),
        no_seed: bool = typer.Option(False, "--no-seed", help="Do not seed the runs."),
        loss_steps: int = typer.Option(3, "--loss-steps", help="Losses compared per run."),
        loss_rtol: float = typer.Option(
            1e-3, "--loss-rtol", help="Relative loss difference above which numerics changed."
        ),
        json_out: bool = typer.Option(False, "--json", help="Print try.json to stdout."),
    ) -> None:
        from advisor.output.try_view import print_try
        from advisor.profile.trial.driver import TryOptions, run_try, write_outputs

        opts = TryOptions(
            fix=fix,
            script=script,
            args=tuple(script_args or ()),
            module=module,
            out=out,
            force=force,
            wait=wait,
            warmup=warmup,
            active=active,
            max_seconds=max_seconds,
            repeat=repeat,
            seed=None if no_seed else seed,
            loss_steps=loss_steps,
            loss_rtol=loss_rtol,
        )
        result, out_dir = run_try(opts)
        files = write_outputs(result, out_dir)
        if json_out:
            sys.stdout.buffer.write(result.dump())
        else:
            print_try(result, files)
        sys.stdout.flush()
        if result.interrupted:  # 143 after SIGTERM, 130 after Ctrl-C
            raise typer.Exit(128 + int(signal.Signals[result.interrupted]))
        raise typer.Exit(1 if result.failed else 0)
