"""Writing into the output folder: one run per folder, the folder checked is the folder
written, and atomic writes (a reader never sees a partial file). Cheap to import (no pandas).

- **One run per folder** (:func:`claim`): a run locks its ``--out`` (``flock`` on the folder,
  released by the kernel when the process ends, even on SIGKILL); a second run into the same
  folder is refused while the first one is alive.
- **The folder checked is the folder written** (:func:`local_path`): a claimed folder is kept
  open; every write goes through that handle, and a folder that was moved, removed or replaced
  (by a symlink, say) during the run is refused instead of being written through.
- **Atomic writes** (:func:`atomic_write`, :func:`write_json`): a temporary file beside the
  target, then a rename.

What may be written where (names, ownership, ``--force``): :mod:`advisor.output.outfolder`.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path
from typing import Any

from advisor import jsontext
from advisor.errors import AdvisorError


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


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


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as indented JSON with sorted keys (strict JSON: no NaN; ASCII:
    :func:`advisor.jsontext.ascii_document`), atomically."""
    atomic_write(path, jsontext.ascii_document(data))


def write_error(err: BaseException, out: Path, trace: Path) -> str:
    """One line for a failure to write the outputs after the script ran."""
    cur: BaseException | None = err
    for _ in range(4):  # write_outputs says "cannot write output": find the OSError behind it
        if cur is None or isinstance(cur, OSError):
            break
        cur = cur.__cause__ or cur.__context__
    if isinstance(cur, OSError):
        err = cur
    if isinstance(err, AdvisorError):
        text = err.problem
    elif isinstance(err, OSError):
        name = Path(err.filename).name if isinstance(err.filename, str) else None
        why = err.strerror or str(err)
        text = f"cannot write {name}: {why}" if name else f"cannot write the outputs: {why}"
    else:
        text = f"cannot write the outputs: {err}"
    hint = ""
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        hint = " (disk full: free some space"
        hint += f", then run `advisor analyze {trace}`)" if trace.is_file() else ")"
    elif trace.is_file():
        hint = f" (the trace was written: `advisor analyze {trace}` reports on it)"
    return f"{out}: {text}{hint}"
