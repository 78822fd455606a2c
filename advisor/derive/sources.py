"""The user's source code shown beside findings: which files may be read, and the snippets.

A trace names the files of its stack frames, and a trace can come from anywhere: a shared or
downloaded one could name ``/home/you/.ssh/id_rsa.py``, ``../../secret.py``, or a ``.py``
symlink shipped beside it that points at a secret. So code is read only:

- from ``.py``/``.pyw`` **regular files** (not a FIFO, a device or a folder), at most
  ``MAX_SOURCE_BYTES``;
- **under a source root the user chose**: each ``--source-root``; the folder a live
  ``advisor profile`` ran the script from and the script's folder (given by that run, never read
  from a run.json: a run folder someone sent names any folder it likes); and the current
  folder, unless it is ``/`` or the home folder itself (from there every file of the machine,
  or of the user, would be readable by a trace). A file is checked where it really is
  (symlinks resolved), so a symlink leaving the roots is refused like a path that does.

A file refused this way is *withheld*: the report says so and names it (findings.json:
``views.sources_withheld``, every one); ``--source-root`` adds a folder. ``--no-source`` reads
no code at all.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from advisor import settings
from advisor.findings import Finding
from advisor.runinfo import RunInfo
from advisor.viewdata import Snippet

SOURCE_CONTEXT = 3  # lines either side of the hot line
MAX_SOURCE_LOCATIONS = 3  # per finding
MAX_SOURCE_BYTES = 2 * 1024 * 1024
MAX_LINE_CHARS = 240
MAX_WITHHELD_SHOWN = 10


def source_roots(extra: Iterable[Path | str] = ()) -> list[Path]:
    """The folders code may be read from: the current one (unless it is ``/`` or the home
    folder itself), then ``extra`` (``--source-root``, a live run's folders); each as its real
    path, existing folders only. A run.json never adds one."""
    cands: list[Path] = [] if _too_wide(Path.cwd()) else [Path.cwd()]
    cands += [Path(p) for p in extra]
    roots: list[Path] = []
    for c in cands:
        try:
            real = Path(os.path.realpath(c))
        except (OSError, ValueError):
            continue
        if real.is_dir() and real not in roots:
            roots.append(real)
    return roots


def _too_wide(folder: Path) -> bool:
    """``/`` or a home folder itself: no default root (a trace could name any file under it)."""
    try:
        real = Path(os.path.realpath(folder))
    except (OSError, ValueError):
        return True
    return real == Path(real.anchor) or real in settings.home_folders()


def live_roots(script: str | None, cwd: str) -> tuple[str, ...]:
    """The roots a live ``advisor profile`` adds: the folder it ran the script from and the
    script's own folder (``script``: as the user typed it, None for ``-m module``)."""
    roots = [cwd]
    if script:
        path = Path(os.path.join(cwd, script))
        roots.append(str(path if path.is_dir() else path.parent))  # a folder with __main__.py
    return tuple(dict.fromkeys(roots))


def source_bases(trace_path: Path | str | None, run: RunInfo | None) -> list[Path]:
    """Folders a relative frame path is tried in (the file must still lie under a root)."""
    bases = []
    if run is not None and run.cwd:
        bases.append(Path(run.cwd))
    if run is not None and run.script:
        bases.append(Path(run.script).parent)
    if trace_path:
        bases.append(Path(trace_path).parent)
    return bases


def within(path: Path, roots: Iterable[Path]) -> Path | None:
    """``path``'s real location (every symlink resolved) when it lies under one of ``roots``."""
    try:
        real = Path(os.path.realpath(path))
    except (OSError, ValueError):
        return None
    return real if any(real == r or real.is_relative_to(r) for r in roots) else None


def read_snippet(path: Path, line: int, context: int = SOURCE_CONTEXT) -> Snippet | None:
    """Lines ``line-context .. line+context`` of the regular ``.py`` file ``path``, or None."""
    if path.suffix not in (".py", ".pyw") or line < 1:
        return None
    try:  # never blocks on a FIFO, never follows a final symlink
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except (OSError, ValueError):
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SOURCE_BYTES:
            return None
        with os.fdopen(fd, "rb", closefd=False) as fh:
            text = fh.read(MAX_SOURCE_BYTES + 1).decode("utf-8", errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)
    lines = text.splitlines()
    if line > len(lines):
        return None
    start = max(1, line - context)
    end = min(len(lines), line + context)
    body = [ln.rstrip()[:MAX_LINE_CHARS] for ln in lines[start - 1 : end]]
    return Snippet(start=start, line=line, lines=tuple(body))


def read_sources(
    findings: Iterable[Finding],
    bases: Iterable[Path],
    roots: Iterable[Path] | None = None,
    withheld: list[str] | None = None,
) -> dict[str, Snippet]:
    """Source snippets for the top locations of each finding; relative files tried in ``bases``.

    Only files under ``roots`` (default: the current folder) are read; the names of existing
    ``.py`` files that were refused for lying outside them are added to ``withheld``."""
    out: dict[str, Snippet] = {}
    base_list = [Path(b) for b in bases]
    root_list = [Path(os.path.realpath(r)) for r in (roots if roots is not None else [Path.cwd()])]
    refused: list[str] = []
    for f in findings:
        for loc in f.locations[:MAX_SOURCE_LOCATIONS]:
            key = f"{loc.file}:{loc.line}"
            if key in out:
                continue
            p = Path(loc.file)
            if p.suffix not in (".py", ".pyw"):
                continue
            cands = [p] if p.is_absolute() else [b / p for b in base_list] + [p]
            for c in cands:
                real = within(c, root_list)
                if real is None:
                    if os.path.lexists(c) and loc.file not in refused:
                        refused.append(loc.file)
                    continue
                snip = read_snippet(real, loc.line)
                if snip is not None:
                    out[key] = snip
                    if loc.file in refused:
                        refused.remove(loc.file)
                    break
    if withheld is not None:
        withheld += [f for f in refused if not any(k.rsplit(":", 1)[0] == f for k in out)]
    return out


def withheld_note(files: list[str]) -> str:
    """The report's line about code it did not show."""
    shown = ", ".join(files[:MAX_WITHHELD_SHOWN])
    more = f" and {len(files) - MAX_WITHHELD_SHOWN} more" if len(files) > MAX_WITHHELD_SHOWN else ""
    return (
        f"Source code withheld from {len(files)} file(s) outside the folders advisor reads "
        f"code from (the current folder unless it is / or your home folder, the folder a live "
        f"advisor profile ran from, --source-root): "
        f"{shown}{more}."
    )
