"""The analysis options, declared once: every command that analyzes a trace (``analyze``,
``profile``) takes them with the same names, help and defaults, and turns them into one
:class:`advisor.analysis.options.Options` (:func:`analysis_options`). A command adds only what
is its own (``analyze --source-root``); ``--max-trace-bytes`` and ``--device`` are declared here
once for every command that reads traces."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from advisor.analysis.options import Options

Only = Annotated[
    list[str] | None,
    typer.Option("--only", help="Run only these finding ids (repeat or comma-separate)."),
]
Skip = Annotated[
    list[str] | None,
    typer.Option("--skip", help="Skip these finding ids (repeat or comma-separate)."),
]
SetThreshold = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        help="Override a threshold: key=value (advisor analyze --list-thresholds lists them).",
    ),
]
NoSource = Annotated[bool, typer.Option("--no-source", help="Keep source code out of the report.")]
Debug = Annotated[
    bool, typer.Option("--debug", help="Include detector tracebacks in findings.json.")
]
FailOn = Annotated[
    str | None,
    typer.Option(
        "--fail-on",
        help="Exit 3 when a finding at or above this severity exists: high, medium or low "
        "(advisor profile: when the script succeeded).",
    ),
]
MaxTraceBytes = Annotated[
    int,
    typer.Option(
        "--max-trace-bytes",
        min=1,
        help="Refuse traces larger than this decompressed (guards against gzip bombs; "
        "default: what the available memory can analyze).",
    ),
]
Device = Annotated[
    str | None,
    typer.Option(
        "--device",
        metavar="GPU",
        help="The GPU the trace ran on (H100, A100-80GB, MI300X...), over what the trace "
        "says or what its kernel names suggest.",
    ),
]
JsonOut = Annotated[bool, typer.Option("--json", help="Print findings.json to stdout.")]
OpenReport = Annotated[bool, typer.Option("--open", help="Open report.html in a browser.")]


def analysis_options(
    only: Iterable[str] | None,
    skip: Iterable[str] | None,
    set_: Iterable[str] | None,
    debug: bool,
    no_source: bool,
    max_trace_bytes: int,
    source_roots: Iterable[Path | str] = (),
    device: str | None = None,
    detectors: Iterable[Path | str] = (),
) -> Options:
    """The validated :class:`~advisor.analysis.options.Options` of the options above (imported
    when a command runs: pandas and the detectors come with it)."""
    from advisor.analysis.options import options_from_cli

    return options_from_cli(
        only or (),
        skip or (),
        set_ or (),
        debug,
        no_source,
        max_trace_bytes,
        source_roots,
        device,
        detectors,
    )
