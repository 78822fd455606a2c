"""Find trace files (a file, or a directory of per-rank traces) and load them."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from advisor.errors import TraceError
from advisor.runfolder import (
    ANNOTATED_NAME,
    FINDINGS_NAME,
    RANK_TRACE_PREFIX,
    RUN_NAME,
    is_eval_trace,
)
from advisor.trace.decode import DEFAULT_MAX_TRACE_BYTES, decode_columns, loading, pieces
from advisor.trace.source import Meter

if TYPE_CHECKING:  # pandas is imported by the table builder only, when a trace is loaded
    from advisor.trace.build import Decoded
    from advisor.trace.model import Trace
    from advisor.trace.prefetch import Prefetch

_TRACE_SUFFIXES = (".json", ".json.gz")
_SKIP_NAMES = (RUN_NAME, FINDINGS_NAME, ANNOTATED_NAME)
_RANK_RE = re.compile(r"rank[-_.]?(\d+)", re.IGNORECASE)


def _is_trace_name(name: str) -> bool:
    # an advisor profile run's evaluation window (trace.eval.json.gz) is read with its main
    # trace (advisor.analysis.phases), never as a trace of its own rank
    return name.endswith(_TRACE_SUFFIXES) and name not in _SKIP_NAMES and not is_eval_trace(name)


def find_traces(path: str | os.PathLike[str]) -> list[Path]:
    """The trace files at ``path``: the file itself, or the traces in a directory, sorted.

    A directory may be ``tensorboard_trace_handler`` output (``*.pt.trace.json[.gz]``), an
    ``advisor profile`` run folder (``trace.json.gz`` or ``trace.rank<R>.json.gz``), or any folder
    of ``*.json[.gz]`` traces (one per rank). Raises TraceError when there is nothing to read.
    """
    p = Path(path)
    if not p.exists():
        raise TraceError("no such file or directory", p)
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise TraceError("not a regular file or directory", p)
    try:
        names = sorted(os.listdir(p))
    except PermissionError:
        raise TraceError("permission denied", p) from None
    files = [p / n for n in names if _is_trace_name(n) and (p / n).is_file()]
    pt = [f for f in files if f.name.endswith((".pt.trace.json", ".pt.trace.json.gz"))]
    ranked = [f for f in files if f.name.startswith(RANK_TRACE_PREFIX)]
    if ranked:
        files = ranked
    elif pt:
        files = pt
    if not files:
        raise TraceError("directory holds no trace files (*.json, *.json.gz)", p)
    return sorted(files, key=_rank_sort_key)


def traces_at(path: str | os.PathLike[str]) -> list[Path]:
    """The traces to read for ``path`` (``advisor analyze``, ``advisor diff``):
    :func:`find_traces`, or for the output folder of an earlier analysis (its findings.json, no
    trace of its own) the trace that analysis read: its annotated copy in the folder (the same
    tables), else the trace or folder its findings.json names (``run.trace``, as written or
    relative to the folder)."""
    p = Path(path)
    try:
        return find_traces(p)
    except TraceError:
        findings = p / FINDINGS_NAME
        if not (p.is_dir() and findings.is_file()):
            raise
    annotated = p / ANNOTATED_NAME
    if annotated.is_file():
        return [annotated]
    from advisor.errors import AdvisorError
    from advisor.report import read

    try:
        named = read(findings).run.trace
    except AdvisorError:
        named = None
    if not isinstance(named, str) or not named:
        raise TraceError(
            f"holds no trace files, and its {FINDINGS_NAME} names no trace to read", p
        ) from None
    for cand in (Path(named), p / named):
        if cand.exists() and cand.resolve() != p.resolve():
            return find_traces(cand)
    raise TraceError(
        f"an analysis output without its trace: {ANNOTATED_NAME} is missing and the trace its "
        f"{FINDINGS_NAME} names ({named}) is not found",
        p,
    ) from None


def _rank_sort_key(f: Path) -> tuple[int, str]:
    m = _RANK_RE.search(f.name)
    return (int(m.group(1)) if m else 1 << 30, f.name)


def rank_from_name(f: Path) -> int | None:
    m = _RANK_RE.search(f.name)
    return int(m.group(1)) if m else None


def load_trace(
    path: str | os.PathLike[str],
    max_bytes: int = DEFAULT_MAX_TRACE_BYTES,
    prefetch: Prefetch | None = None,
) -> Trace:
    """Load one trace file into a :class:`~advisor.trace.model.Trace`.

    ``prefetch``: the same file already decoding in a child process
    (:func:`advisor.trace.prefetch.start`); its columns are used when it delivers them.
    Raises :class:`~advisor.errors.TraceError` (one line naming the file) for unreadable input.
    """
    p = Path(path)
    if p.is_dir():
        files = find_traces(p)
        if len(files) > 1:
            raise TraceError(
                f"holds {len(files)} traces; load them one by one (find_traces) or use analyze",
                p,
            )
        p = files[0]
    if prefetch is not None:
        got = prefetch.result()
        if got is not None:
            from advisor.trace.build import Decoded, build_trace

            cols, header, size = got
            with loading(p):
                return build_trace(Decoded(cols, header, size), str(p))
    return _load(p, None, True, max_bytes)


def load_ranks(
    path: str | os.PathLike[str],
    max_bytes: int = DEFAULT_MAX_TRACE_BYTES,
    prefetch: Prefetch | None = None,
) -> list[Trace]:
    """Load one trace file as :func:`load_trace` does, split into its ranks when it holds
    several (:mod:`advisor.trace.ranksplit`: a merged job's file): one trace per rank, in rank
    order; else the one trace."""
    p = Path(path)
    if prefetch is not None:
        got = prefetch.result()
        if got is not None:
            from advisor.trace.build import Decoded, build_traces

            cols, header, size = got
            with loading(p):
                return build_traces(Decoded(cols, header, size), str(p))
    return _load_ranks(p, max_bytes)


def load_bytes(data: bytes, name: str = "<memory>", require_events: bool = False) -> Trace:
    """Load a trace held in memory (plain JSON text): what tests and tools build on the fly."""
    return _load(Path(name), iter([data]), require_events)


def _load(
    p: Path,
    src: Iterator[bytes] | None,
    require_events: bool,
    max_bytes: int = DEFAULT_MAX_TRACE_BYTES,
) -> Trace:
    from advisor.trace.build import build_trace

    dec = _decode(p, src, require_events, max_bytes)
    with loading(p):
        return build_trace(dec, str(p))


def _load_ranks(p: Path, max_bytes: int) -> list[Trace]:
    from advisor.trace.build import build_traces

    dec = _decode(p, None, True, max_bytes)
    with loading(p):
        return build_traces(dec, str(p))


def _decode(p: Path, src: Iterator[bytes] | None, require_events: bool, max_bytes: int) -> Decoded:
    from advisor.trace.build import Decoded

    meter = Meter() if src is None else None  # the events of a file are bounded by its size
    if src is None:
        src = pieces(p, max_bytes, meter)
    cols, header, size = decode_columns(p, src, require_events, meter=meter)
    return Decoded(cols, header, size)
