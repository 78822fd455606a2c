"""The output folder and atomic file writes: cheap to import (no pandas), so a command can check
its ``--out`` before it starts loading anything."""

from __future__ import annotations

import os
import re
import tempfile
import time
from pathlib import Path

from advisor.errors import AdvisorError


def default_out_dir(stem: str, base: Path | None = None, when: float | None = None,
                    tag: str | None = None) -> Path:  # fmt: skip
    """The default ``--out`` of every command: ``<base or cwd>/advisor-runs/<stem>-<time>``
    (``when``, default now, as YYYYmmdd-HHMMSS), then ``-<tag>`` when given. Without a tag,
    ``-2``, ``-3``... when the name is taken; with one (the ranks of one launch all name the
    same folder) the name is as is."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", stem).strip("._") or "run"
    name = f"{safe}-{time.strftime('%Y%m%d-%H%M%S', time.localtime(when))}"
    root = (base or Path.cwd()) / "advisor-runs"
    if tag is not None:
        return root / f"{name}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', tag)}"
    cand = root / name
    n = 2
    while cand.exists():
        cand = root / f"{name}-{n}"
        n += 1
    return cand


def trace_stem(path: Path) -> str:
    """A trace's file name without its trace suffixes (``.pt.trace.json.gz`` and the like)."""
    stem = path.name
    for suf in (".gz", ".json", ".trace", ".pt"):
        stem = stem.removesuffix(suf)
    return stem or "trace"


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and a rename: a
    reader (or a process killed mid-way) never sees a partial ``path``; on failure the
    temporary file is removed and an earlier ``path`` is left as it was."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; reports are meant to be shared
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(err, OSError) and err.errno is not None and err.filename != str(path):
            # name the file being written, not the temporary one (or none, for write())
            raise OSError(err.errno, err.strerror or str(err), str(path)) from err
        raise


def prepare_out_dir(
    out: Path, force: bool, allowed: set[str] | None = None, create: bool = True
) -> None:
    """Refuse an existing non-empty folder unless ``force`` (names in ``allowed`` are ours).

    ``create=False`` only checks (call it before loading, so a refusal comes first and a bad
    trace leaves no folder behind); then call again with ``create=True`` to write.
    """
    if out.exists() and not out.is_dir():
        raise AdvisorError("exists and is not a directory", out)
    if out.is_dir() and not force:
        try:
            extra = [p.name for p in out.iterdir() if not allowed or p.name not in allowed]
        except OSError as err:
            raise AdvisorError(f"cannot read output folder: {err.strerror or err}", out) from None
        if extra:
            raise AdvisorError("output folder exists and is not empty (use --force)", out)
    if not create:
        return
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise AdvisorError(f"cannot create output folder: {err.strerror or err}", out) from None
    if not os.access(out, os.W_OK):
        raise AdvisorError("output folder is not writable", out)
