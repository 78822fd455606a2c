"""The arguments and options ``advisor profile`` and ``advisor try`` share, declared once: how
the script is named and the steps the capture window skips. Each command adds its own."""

from __future__ import annotations

from typing import Annotated

import typer

Script = Annotated[str, typer.Argument(help="The script to run (a module name with -m).")]
ScriptArgs = Annotated[
    list[str] | None,
    typer.Argument(metavar="SCRIPT_ARGS", help="Arguments for the script, passed untouched."),
]
Module = Annotated[
    bool, typer.Option("-m", help="Run library module MODULE as a script, like python -m.")
]
Wait = Annotated[int, typer.Option("--wait", help="Steps to skip after step 0.")]
Warmup = Annotated[int, typer.Option("--warmup", help="Profiler warm-up steps (not recorded).")]
