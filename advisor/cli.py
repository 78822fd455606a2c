"""The ``advisor`` command: one typer app, one module per sub-command in ``advisor.commands``.

Imports stay lazy so ``advisor --help`` and ``advisor analyze`` never import torch.
"""

from __future__ import annotations

import atexit
import os
import sys
import traceback

import typer

from advisor import __version__
from advisor.errors import AdvisorError

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


def main(argv: list[str] | None = None) -> None:
    """Entry point of the console script.

    Exit codes: 0 ok, 1 advisor error (one line on stderr naming the file and the problem, no
    traceback), 2 usage error, 3 ``--fail-on`` hit, 130 interrupted; ``advisor profile`` passes
    the user script's own code through. An unexpected internal error is also one line (exit 1);
    ``ADVISOR_DEBUG=1`` shows its traceback.
    """
    args = sys.argv[1:] if argv is None else argv
    fast = argv is None and bool(args) and args[0] in _FAST_EXIT
    try:
        _main(argv)
    except SystemExit as done:
        if fast:
            _fast_exit(done.code)
        raise


# Commands that only read traces and write their own outputs: once those are written and
# flushed, the process ends without tearing down every module and table (~0.1 s per run).
# Never ``profile``: the user's script may rely on the normal interpreter shutdown.
_FAST_EXIT = frozenset({"analyze", "inspect", "report", "diff"})


def _fast_exit(code: object) -> None:
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
        except (OSError, ValueError):
            pass
    atexit._run_exitfuncs()
    os._exit(status)


def _main(argv: list[str] | None) -> None:
    try:
        app(args=argv, prog_name="advisor", standalone_mode=True)
    except AdvisorError as err:
        _fail(f"error: {err}")
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except MemoryError:
        _fail("error: out of memory (try a smaller trace or a machine with more memory)")
    except RecursionError:
        _fail("error: input nested too deeply")
    except OSError as err:
        where = f"{err.filename}: " if getattr(err, "filename", None) else ""
        _fail(f"error: {where}{err.strerror or err}")
    except Exception as err:  # noqa: BLE001 (a bug: still one line, traceback on request)
        if os.environ.get("ADVISOR_DEBUG"):
            traceback.print_exc()
        _fail(
            f"internal error: {type(err).__name__}: {_one_line(str(err))} "
            "(a bug in torch-advisor; rerun with ADVISOR_DEBUG=1 for the traceback)"
        )


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _fail(message: str, code: int = 1) -> None:
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
    print(f"advisor: {_one_line(message, 2000)}", file=sys.stderr)
    sys.exit(code)
