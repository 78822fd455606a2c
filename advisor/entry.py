"""The console script: starts decoding the trace of ``analyze``/``inspect`` before anything else,
and runs a plain ``analyze FILE`` without typer.

Importing typer and building the command line takes about a tenth of a second; the trace does not
have to wait for it. This module peeks at the arguments with a small table of the options that
take a value, and when they name one trace file, forks the decoding child at once
(:func:`advisor.trace.prefetch.start_early`). The command, once typer has parsed the line for
real, takes the child over only if it decodes that same file with the same settings
(:func:`advisor.trace.prefetch.claim`); otherwise the child is killed and a new one started. So
this peek can only ever cost or save time, never change what a command does; anything unusual on
the command line (an unknown option, ``--help``, two paths) means no early start.

Typer (with the pydantic it builds its parameter checks on) costs about 0.16 s and 20 MB before a
command starts, a fifth of ``analyze`` on a 50 MB trace. So when the peek understands an
``analyze`` of one trace file completely (:func:`fast_analyze`: known options, each single-valued
one at most once, whole numbers where numbers go), the command runs straight from it; every other
command line, and ``ADVISOR_TYPER_ONLY=1``, goes through typer. A test checks that both parse
the same lines to the same arguments.
"""

from __future__ import annotations

import os
import sys

from advisor.trace.source import DEFAULT_MAX_TRACE_BYTES

# ``analyze`` options -> AnalyzeArgs fields: single values, repeatable values, flags
_SINGLE = {"--out": "out", "-o": "out", "--fail-on": "fail_on",
           "--max-trace-bytes": "max_trace_bytes", "--jobs": "jobs", "-j": "jobs"}  # fmt: skip
_MULTI = {"--only": "only", "--skip": "skip", "--set": "set_", "--source-root": "source_root"}
_FLAGS = {"--force": "force", "--json": "json_out", "--open": "open_",
          "--no-source": "no_source", "--debug": "debug"}  # fmt: skip
# per command: the options that take a value, and the flags that still load a trace
VALUE_OPTIONS: dict[str, frozenset[str]] = {
    "analyze": frozenset(_SINGLE) | frozenset(_MULTI),
    "inspect": frozenset({"--top", "--max-trace-bytes"}),
}
FLAG_OPTIONS: dict[str, frozenset[str]] = {
    "analyze": frozenset(_FLAGS),
    "inspect": frozenset({"--json"}),
}


def _scan(args: list[str]) -> tuple[str, list[tuple[str, str | None]], list[str]] | None:
    """(command, options in order as (name, value or None for a flag), positionals) when every
    token of ``args`` is plainly understood for analyze/inspect, else None."""
    if len(args) < 2 or args[0] not in VALUE_OPTIONS:
        return None
    cmd, values, flags = args[0], VALUE_OPTIONS[args[0]], FLAG_OPTIONS[args[0]]
    opts: list[tuple[str, str | None]] = []
    paths: list[str] = []
    i = 1
    while i < len(args):
        a = args[i]
        if a.startswith("-") and a != "-":
            name, eq, value = a.partition("=")
            if name in values:
                if eq and not name.startswith("--"):
                    return None  # "-o=x" means the value "=x" to click: leave it to typer
                if not eq:
                    if i + 1 >= len(args) or args[i + 1].startswith("-"):
                        return None
                    i += 1
                    value = args[i]
                opts.append((name, value))
            elif name in flags and not eq:
                opts.append((name, None))
            else:
                return None  # --help, --list-thresholds, "--", short clusters, anything new
        else:
            paths.append(a)
        i += 1
    return cmd, opts, paths


def early_target(args: list[str]) -> tuple[str, str, int] | None:
    """(command, trace file, --max-trace-bytes) when ``args`` plainly analyze/inspect one file."""
    scan = _scan(args)
    if scan is None:
        return None
    cmd, opts, paths = scan
    max_bytes = DEFAULT_MAX_TRACE_BYTES
    for name, value in opts:
        if name == "--max-trace-bytes":
            try:
                max_bytes = int(value or "")
            except ValueError:
                return None
    if len(paths) != 1 or max_bytes < 1 or not os.path.isfile(paths[0]):
        return None
    return cmd, paths[0], max_bytes


def fast_analyze(args: list[str]) -> dict[str, object] | None:
    """The fields of :class:`~advisor.commands.analyze_run.AnalyzeArgs` for a plain ``analyze``
    of one trace file, parsed here without typer (0.16 s and 20 MB of typer and pydantic
    saved); None for anything else (typer then parses it, with its own messages)."""
    scan = _scan(args)
    if scan is None or scan[0] != "analyze" or len(scan[2]) != 1:
        return None
    _, opts, paths = scan
    if not os.path.isfile(paths[0]):
        return None
    fields: dict[str, object] = {"path": paths[0]}
    for name, value in opts:
        if name in _FLAGS:
            fields[_FLAGS[name]] = True
        elif name in _MULTI:
            fields.setdefault(_MULTI[name], [])
            fields[_MULTI[name]].append(value)  # type: ignore[attr-defined]
        else:  # _scan let through only the options of these three tables
            key = _SINGLE[name]
            if key in fields:
                return None  # given twice: typer decides
            fields[key] = value
    for key in ("max_trace_bytes", "jobs"):
        if key in fields:
            try:
                fields[key] = int(str(fields[key]))
            except ValueError:
                return None
    if int(fields.get("max_trace_bytes", 1)) < 1:  # type: ignore[call-overload]
        return None
    return fields


# Commands that only read traces and write reports build millions of objects (imports, tables)
# and almost no reference cycles: the cyclic collector would only rescan them, about 0.05-0.08 s
# on a 50 MB trace, and frees next to nothing (about a thousand objects over a 1 GB trace, same
# peak memory). It stays off there. Not for ``profile``: the user's script runs in this process
# and keeps Python's defaults.
READ_ONLY_COMMANDS = frozenset({"analyze", "inspect", "report", "diff"})


def _return_freed_memory() -> None:
    """glibc: large blocks (the tables' arrays and their temporaries) always get their own
    mapping, returned to the system when freed, instead of glibc's default of raising that
    threshold after the first such free and keeping later ones in its heap. About 2 MB less
    peak memory on a 50 MB trace, no measurable time."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.mallopt(-3, 128 * 1024)  # M_MMAP_THRESHOLD (fixed: no dynamic raising)
        libc.mallopt(-1, 128 * 1024)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        pass


def main(argv: list[str] | None = None) -> None:
    """The ``advisor`` console script (``argv``: the arguments, default ``sys.argv[1:]``)."""
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in READ_ONLY_COMMANDS:
        import gc

        gc.disable()
        _return_freed_memory()
    target = early_target(args)
    if target is not None:
        from pathlib import Path

        from advisor.trace import prefetch

        cmd, path, max_bytes = target
        prefetch.start_early(Path(path), max_bytes, annotate=cmd == "analyze")
    fields = fast_analyze(args) if os.environ.get("ADVISOR_TYPER_ONLY", "") in ("", "0") else None
    if fields is not None:
        _run_fast(fields, exit_fast=argv is None)
        return
    from advisor.cli import main as cli_main

    cli_main(argv)


def _run_fast(fields: dict[str, object], exit_fast: bool) -> None:
    from pathlib import Path

    from advisor.commands.analyze_run import AnalyzeArgs, run_analyze
    from advisor.guard import fast_exit, guarded

    for key in ("path", "out"):
        if key in fields:
            fields[key] = Path(str(fields[key]))
    try:
        guarded(lambda: run_analyze(AnalyzeArgs(**fields)))  # type: ignore[arg-type]
    except SystemExit as done:
        if exit_fast:
            fast_exit(done.code)
        raise
