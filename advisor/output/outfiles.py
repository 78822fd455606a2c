"""The output folder and atomic file writes: cheap to import (no pandas), so a command can check
its ``--out`` before it starts loading anything.

Three rules keep a user's files safe:

- **Ownership** (:func:`written_by_advisor`): ``--force`` replaces only files an earlier
  advisor run wrote, recognised by their content, never by their name alone.
- **One run per folder** (:func:`claim`): a run locks its ``--out`` (``flock`` on the folder,
  released by the kernel when the process ends, even on SIGKILL); a second run into the same
  folder is refused while the first one is alive.
- **The folder checked is the folder written** (:func:`local_path`): a claimed folder is kept
  open; every write goes through that handle, and a folder that was moved, removed or replaced
  (by a symlink, say) during the run is refused instead of being written through.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from advisor.errors import AdvisorError
from advisor.runfolder import (
    ANALYZE_NAMES,
    ANNOTATED_NAME,
    FINDINGS_NAME,
    REPORT_NAME,
    RUN_NAME,
    TRACE_NAME,
    rank_run_name,
)

REPORT_GENERATOR_RE = re.compile(rb'<meta name="generator" content="torch-advisor [^"<>]*">')
_RANK_NAME_RE = re.compile(r"^(trace|run)\.rank(\d+)\.json(?:\.gz)?$")


def default_out_dir(
    stem: str, base: Path | None = None, when: float | None = None, tag: str | None = None
) -> Path:
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


# ---------------------------------------------------------------- ownership


def _json(path: Path) -> dict[str, Any] | None:
    try:
        if not path.is_file() or path.is_symlink():
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def is_advisor_report(path: Path) -> bool:
    """Whether ``path`` is a report.html torch-advisor rendered: an HTML page starting with
    ``<!DOCTYPE html>`` whose ``<head>`` carries the advisor's generator tag (a page that
    only mentions torch-advisor is not one)."""
    try:
        if path.is_symlink() or not path.is_file():
            return False
        with open(path, "rb") as fh:
            head = fh.read(8192)
    except OSError:
        return False
    if not head.lstrip().startswith(b"<!DOCTYPE html>"):
        return False
    end = head.find(b"</head>")
    cut = head[: end if end >= 0 else 2048]
    m = REPORT_GENERATOR_RE.search(cut)
    return m is not None and b"<body" not in cut[: m.start()]


def written_by_advisor(folder: Path, name: str) -> bool:
    """Whether ``folder/name`` is output of an earlier advisor run (so --force may replace it).

    JSON files must carry the advisor's own keys (run files ``advisor_version`` and
    ``end_reason``, findings ``advisor_version`` and ``schema_version``); a trace is ours when
    the run file beside it names it; the annotated trace when findings.json is ours;
    report.html by :func:`is_advisor_report`. A symlink is never ours."""
    path = folder / name
    if path.is_symlink():
        return False
    m = _RANK_NAME_RE.match(name)
    if m and m.group(1) == "trace":  # a rank's trace: owned when its run file names it
        d = _json(folder / rank_run_name(int(m.group(2))))
        return d is not None and "advisor_version" in d and d.get("trace") == name
    if m or name == RUN_NAME:
        d = _json(path)
        return d is not None and "advisor_version" in d and "end_reason" in d
    if name == FINDINGS_NAME:
        d = _json(path)
        return d is not None and "advisor_version" in d and "schema_version" in d
    if name == REPORT_NAME:
        return is_advisor_report(path)
    if name == ANNOTATED_NAME:
        return written_by_advisor(folder, FINDINGS_NAME)
    if name == TRACE_NAME:  # only a profile run (its run.json names the trace) owns it
        d = _json(folder / RUN_NAME)
        return d is not None and "advisor_version" in d and d.get("trace") == name
    return False


def refuse_foreign(folder: Path, names: tuple[str, ...] | list[str]) -> None:
    """AdvisorError when one of ``names`` exists in ``folder`` and advisor did not write it."""
    for name in names:
        p = folder / name
        if (p.exists() or p.is_symlink()) and not written_by_advisor(folder, name):
            raise AdvisorError(
                f"--force would overwrite {name}, which advisor did not write; pick another --out",
                folder,
            )


# ---------------------------------------------------------------- one run per folder

_CLAIMS: dict[str, tuple[int, int, int]] = {}  # abspath -> (open fd, st_dev, st_ino)


def claim(out: Path, shared: bool = False) -> None:
    """Lock the existing folder ``out`` for this process's run and remember which folder it is.

    ``shared``: the ranks of one torchrun launch share their folder (but not with another run).
    AdvisorError when another advisor run holds it. A file system without locks is not refused.
    """
    import fcntl

    key = os.path.abspath(out)
    if key in _CLAIMS:
        return
    try:
        fd = os.open(key, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as err:
        raise AdvisorError(f"cannot open output folder: {err.strerror or err}", out) from None
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise AdvisorError(
            "another advisor run is writing into this folder; pick another --out", out
        ) from None
    except OSError:
        pass  # no locks on this file system (some network mounts): go on without
    st = os.fstat(fd)
    _CLAIMS[key] = (fd, st.st_dev, st.st_ino)


def release(out: Path) -> None:
    """Give up the claim on ``out`` (the kernel also drops it when the process ends)."""
    item = _CLAIMS.pop(os.path.abspath(out), None)
    if item is not None:
        os.close(item[0])


def local_path(path: Path) -> Path:
    """The path to open for ``path``: in a claimed folder, a path through the folder's open
    handle (``/proc/self/fd/N/name``), so a folder replaced during the run is never written
    through; AdvisorError when the folder at ``path.parent`` is no longer the one claimed."""
    parent = os.path.abspath(path.parent)
    item = _CLAIMS.get(parent)
    if item is None:
        return path
    fd, dev, ino = item
    try:
        st = os.stat(parent)
        same = (st.st_dev, st.st_ino) == (dev, ino) and not os.path.islink(parent)
    except OSError:
        same = False
    if not same:
        raise AdvisorError(
            "the output folder was moved, removed or replaced during the run; nothing more "
            "is written there",
            parent,
        )
    via = Path(f"/proc/self/fd/{fd}")
    return via / path.name if via.is_dir() else path


# ---------------------------------------------------------------- atomic writes


def temp_file(path: Path) -> tuple[int, str]:
    """An open temporary file (fd, its path) beside ``path``: ``.<name>.<random>.tmp``, with
    the permissions a plain ``open`` would give (mkstemp makes 0600; reports are shared)."""
    local = local_path(path)
    local.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=local.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
    except OSError:
        os.close(fd)
        os.unlink(tmp)
        raise
    return fd, tmp


def commit(tmp: str, path: Path) -> None:
    """Rename the finished temporary file ``tmp`` to ``path`` (same folder, same handle)."""
    os.replace(tmp, local_path(path))


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and a rename: a
    reader (or a process killed mid-way) never sees a partial ``path``; on failure the
    temporary file is removed and an earlier ``path`` is left as it was."""
    fd, tmp = temp_file(path)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        commit(tmp, path)
    except BaseException as err:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(err, OSError) and err.errno is not None and err.filename != str(path):
            # name the file being written, not the temporary one (or none, for write())
            raise OSError(err.errno, err.strerror or str(err), str(path)) from err
        raise


# ---------------------------------------------------------------- analyze's output folder


def prepare_out_dir(
    out: Path, force: bool, allowed: set[str] | None = None, create: bool = True
) -> None:
    """Refuse an existing non-empty folder unless ``force`` (names in ``allowed`` are ours);
    even with ``force`` never a file advisor did not write (:func:`refuse_foreign`).

    ``create=False`` only checks (call it before loading, so a refusal comes first and a bad
    trace leaves no folder behind); then call again with ``create=True``, which creates and
    claims the folder (:func:`claim`) and checks again under the claim.
    """
    if out.exists() and not out.is_dir():
        raise AdvisorError("exists and is not a directory", out)
    if create:
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise AdvisorError(f"cannot create output folder: {err.strerror or err}", out) from None
        claim(out)
    if out.is_dir() and not force:
        try:
            extra = [p.name for p in out.iterdir() if not allowed or p.name not in allowed]
        except OSError as err:
            raise AdvisorError(f"cannot read output folder: {err.strerror or err}", out) from None
        if extra:
            raise AdvisorError("output folder exists and is not empty (use --force)", out)
    if out.is_dir():
        refuse_foreign(out, ANALYZE_NAMES)
    if create and not os.access(out, os.W_OK):
        raise AdvisorError("output folder is not writable", out)
