"""The console script ``advisor``: starts decoding the trace of ``analyze``/``inspect`` before
anything else, then runs the typer app (:mod:`advisor.cli.app`), the one definition of the command
line.

Importing typer and parsing the command line takes a tenth of a second or more; the trace does
not have to wait for it. The one existing file among the arguments of ``analyze``/``inspect``
starts decoding in a child process at once (:func:`early_prefetch`, the commands of
:data:`DECODE_FIRST`; :func:`advisor.trace.prefetch.start_early` knows no command), and
the command gets that :class:`~advisor.trace.prefetch.Prefetch` as its context object. It keeps
it only when typer's parse names the same file with the same settings
(:func:`advisor.trace.prefetch.take_over`); otherwise the child is stopped. So the guess can
only cost or save time, never change what a command does.

Ctrl-C while the command starts (the early decoder, typer and the command modules being
imported: a third of a second or more) is held until the imports are done
(:func:`advisor.lifeline.held_sigint`), then ends the command as a Ctrl-C later does: one line,
"advisor: interrupted", exit 130. Raised where it struck, inside the import machinery, it
printed Python's traceback, or was swallowed ("Exception ignored in ... _get_module_lock") and
the command ran on to exit 0.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from advisor.lifeline import held_sigint

if TYPE_CHECKING:
    from advisor.trace.prefetch import Prefetch

DECODE_FIRST = ("analyze", "inspect")  # the commands whose first work is decoding one trace


def early_prefetch(args: Sequence[str], max_bytes: int | None = None) -> Prefetch | None:
    """The decoding child for the command line ``args``, started before it is parsed (None:
    not a command of :data:`DECODE_FIRST`, or no single existing file among its arguments;
    ``max_bytes``: default :data:`advisor.trace.source.DEFAULT_MAX_TRACE_BYTES`)."""
    if len(args) < 2 or args[0] not in DECODE_FIRST:
        return None
    from advisor.trace import prefetch
    from advisor.trace.source import DEFAULT_MAX_TRACE_BYTES

    return prefetch.start_early(
        args[1:], DEFAULT_MAX_TRACE_BYTES if max_bytes is None else max_bytes
    )


def _interrupted() -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> None:
    """The ``advisor`` console script (``argv``: the arguments, default ``sys.argv[1:]``)."""
    args = sys.argv[1:] if argv is None else argv
    with held_sigint() as interrupts:
        early = early_prefetch(args)
        from advisor.cli.app import main as cli_main
        from advisor.cli.guard import guarded
    if interrupts:  # ends as a Ctrl-C during the command does (the early decoder is stopped)
        guarded(_interrupted)
    cli_main(argv, early)
