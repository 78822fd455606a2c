"""The console script ``advisor``: starts decoding the trace of ``analyze``/``inspect`` before
anything else, then runs the typer app (:mod:`advisor.cli.app`), the one definition of the command
line.

Importing typer and parsing the command line takes a tenth of a second or more; the trace does
not have to wait for it. The one existing file among the arguments of ``analyze``/``inspect``
starts decoding in a child process at once (:func:`advisor.trace.prefetch.start_early`), and
the command gets that :class:`~advisor.trace.prefetch.Prefetch` as its context object. It keeps
it only when typer's parse names the same file with the same settings
(:func:`advisor.trace.prefetch.take_over`); otherwise the child is stopped. So the guess can
only cost or save time, never change what a command does.
"""

from __future__ import annotations

import sys

from advisor.trace.source import DEFAULT_MAX_TRACE_BYTES


def main(argv: list[str] | None = None) -> None:
    """The ``advisor`` console script (``argv``: the arguments, default ``sys.argv[1:]``)."""
    from advisor.trace import prefetch

    args = sys.argv[1:] if argv is None else argv
    early = prefetch.start_early(args, DEFAULT_MAX_TRACE_BYTES)
    from advisor.cli.app import main as cli_main

    cli_main(argv, early)
