"""The console script: starts decoding the trace of ``analyze``/``inspect`` before anything else.

Importing typer and building the command line takes about a tenth of a second; the trace does not
have to wait for it. This module peeks at the arguments with a small table of the options that
take a value, and when they name one trace file, forks the decoding child at once
(:func:`advisor.trace.prefetch.start_early`). The command, once typer has parsed the line for
real, takes the child over only if it decodes that same file with the same settings
(:func:`advisor.trace.prefetch.claim`); otherwise the child is killed and a new one started. So
this peek can only ever cost or save time, never change what a command does; anything unusual on
the command line (an unknown option, ``--help``, two paths) means no early start.
"""

from __future__ import annotations

import os
import sys

DEFAULT_MAX_TRACE_BYTES = 8 * 1024**3
# per command: the options that take a value, and the options that mean "do not load a trace"
VALUE_OPTIONS: dict[str, frozenset[str]] = {
    "analyze": frozenset(
        {
            "--out",
            "-o",
            "--fail-on",
            "--only",
            "--skip",
            "--set",
            "--max-trace-bytes",
            "--jobs",
            "-j",
        }  # fmt: skip
    ),
    "inspect": frozenset({"--top", "--max-trace-bytes"}),
}
FLAG_OPTIONS: dict[str, frozenset[str]] = {
    "analyze": frozenset({"--force", "--json", "--open", "--no-source", "--debug"}),
    "inspect": frozenset({"--json"}),
}


def early_target(args: list[str]) -> tuple[str, str, int] | None:
    """(command, trace file, --max-trace-bytes) when ``args`` plainly analyze/inspect one file."""
    if len(args) < 2 or args[0] not in VALUE_OPTIONS:
        return None
    cmd, values, flags = args[0], VALUE_OPTIONS[args[0]], FLAG_OPTIONS[args[0]]
    paths: list[str] = []
    max_bytes = DEFAULT_MAX_TRACE_BYTES
    i = 1
    while i < len(args):
        a = args[i]
        if a.startswith("-") and a != "-":
            name, eq, value = a.partition("=")
            if name in values:
                if not eq:
                    if i + 1 >= len(args):
                        return None
                    i += 1
                    value = args[i]
                if name == "--max-trace-bytes":
                    try:
                        max_bytes = int(value)
                    except ValueError:
                        return None
            elif name not in flags or eq:
                return None  # --help, --list-thresholds, "--", short clusters, anything new
        else:
            paths.append(a)
        i += 1
    if len(paths) != 1 or max_bytes < 1 or not os.path.isfile(paths[0]):
        return None
    return cmd, paths[0], max_bytes


# Commands that only read traces and write reports build millions of objects (imports, tables)
# and almost no reference cycles: the cyclic collector would only rescan them, about 0.05-0.08 s
# on a 50 MB trace, and frees next to nothing (about a thousand objects over a 1 GB trace, same
# peak memory). It stays off there. Not for ``profile``: the user's script runs in this process
# and keeps Python's defaults.
READ_ONLY_COMMANDS = frozenset({"analyze", "inspect", "report", "diff"})


def main(argv: list[str] | None = None) -> None:
    """The ``advisor`` console script (``argv``: the arguments, default ``sys.argv[1:]``)."""
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in READ_ONLY_COMMANDS:
        import gc

        gc.disable()
    target = early_target(args)
    if target is not None:
        from pathlib import Path

        from advisor.trace import prefetch

        cmd, path, max_bytes = target
        prefetch.start_early(Path(path), max_bytes, annotate=cmd == "analyze")
    from advisor.cli import main as cli_main

    cli_main(argv)
