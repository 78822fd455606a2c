"""The ``advisor`` command: one typer app, one module per sub-command in ``advisor.commands``.

Imports stay lazy so ``advisor --help`` and ``advisor analyze`` never import torch.
"""

from __future__ import annotations

import sys

import typer

from advisor import __version__
from advisor.guard import FAST_EXIT, fast_exit, guarded

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
    from advisor.commands import analyze_cmd, diff_cmd, inspect_cmd, profile_cmd, report_cmd

    profile_cmd.register(app)
    inspect_cmd.register(app)
    analyze_cmd.register(app)
    report_cmd.register(app)
    diff_cmd.register(app)


_register()


INTERRUPTED = 130


def main(argv: list[str] | None = None) -> None:
    """Entry point of the console script.

    Exit codes: 0 ok, 1 advisor error (one line on stderr naming the file and the problem, no
    traceback), 2 usage error, 3 ``--fail-on`` hit, 130 interrupted; ``advisor profile`` passes
    the user script's own code through. An unexpected internal error is also one line (exit 1);
    ``ADVISOR_DEBUG=1`` shows its traceback.
    """
    args = sys.argv[1:] if argv is None else argv
    fast = argv is None and bool(args) and args[0] in FAST_EXIT
    try:
        guarded(lambda: app(args=argv, prog_name="advisor", standalone_mode=True))
    except SystemExit as done:
        if done.code == INTERRUPTED and args and args[0] in FAST_EXIT:
            # typer turns Ctrl-C into a silent exit 130: say it, as every other failure does
            print("advisor: interrupted", file=sys.stderr)
        if fast:
            fast_exit(done.code)
        raise
