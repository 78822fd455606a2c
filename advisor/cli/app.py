"""The ``advisor`` command: one typer app, one module per sub-command in ``advisor.cli``.

Imports stay lazy so ``advisor --help`` and ``advisor analyze`` never import torch.
"""

from __future__ import annotations

import atexit
import os
import sys
from typing import Any

import typer

from advisor import __version__
from advisor.cli.guard import guarded

app = typer.Typer(
    name="advisor",
    help=(
        "Profiler-driven performance advisor for PyTorch. Runs your script under "
        "torch.profiler (or reads a trace you already have) and ranks the fixes by the time "
        "they would save per step."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"torch-advisor {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version."
    ),
) -> None:
    """Profiler-driven performance advisor for PyTorch."""


def _register() -> None:
    from advisor.cli import (
        analyze_cmd,
        diff_cmd,
        inspect_cmd,
        profile_cmd,
        report_cmd,
        try_cmd,
    )

    profile_cmd.register(app)
    inspect_cmd.register(app)
    analyze_cmd.register(app)
    report_cmd.register(app)
    diff_cmd.register(app)
    try_cmd.register(app)


_register()


def main(argv: list[str] | None = None, early: Any = None) -> None:
    """Entry point of the console script (``early``: the trace decoding started before the
    line was parsed, :mod:`advisor.cli.entry`; the command's context object).

    Exit codes: 0 ok, 1 advisor error (one line on stderr naming the file and the problem, no
    traceback), 2 usage error, 3 ``--fail-on`` hit, 130 interrupted; ``advisor profile`` passes
    the user script's own code through. An unexpected internal error is also one line (exit 1);
    ``ADVISOR_DEBUG=1`` shows its traceback.
    """
    try:
        guarded(lambda: _run(argv, early))
    except SystemExit as done:
        if argv is None and sys.argv[1:2] and sys.argv[1] in QUICK_EXIT:
            quick_exit(done.code)
        raise


# Commands that only read traces and write their own outputs: once those are written and
# flushed, the process ends without the interpreter's teardown (a full garbage collection and
# freeing every module and table): 0.17-0.26 s of CPU on df_index_resolver, 12-18% of a run
# (benchmarks/analyze_speed.py, ARCHITECTURE.md). Never ``profile``: the user's script may rely on
# the normal interpreter shutdown.
QUICK_EXIT = frozenset({"analyze", "inspect", "report", "diff"})


def quick_exit(code: object) -> None:
    """Flush, run the atexit handlers (the prefetch child's cleanup among them), and end the
    process with ``code`` as ``sys.exit`` would."""
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        print(code, file=sys.stderr)
        status = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # AttributeError: None (started closed)
            pass
    atexit._run_exitfuncs()
    os._exit(status)


def _run(argv: list[str] | None, early: Any) -> None:
    try:
        app(args=argv, prog_name="advisor", standalone_mode=True, obj=early)
    except SystemExit as done:
        # typer turns Ctrl-C into a silent exit 130: let guarded say "interrupted" as usual
        cause = getattr(done.__context__, "__cause__", None)
        if done.code == 130 and isinstance(cause, KeyboardInterrupt):
            raise KeyboardInterrupt from None
        raise
