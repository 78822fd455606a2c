"""The report's templates, kept compiled between runs.

jinja2 turns a template's source into Python code the first time a process uses it: about 0.15
s of CPU for ``report.html.j2`` on a 2-core machine, paid by every ``advisor analyze``,
``profile``, ``report``, ``diff`` and ``try`` while the trace decodes in a child (on its
critical path: the command's own imports take longer than the decode). jinja2's bytecode cache
keeps the compiled code in a file instead; loading it takes under a millisecond.

The files live in ``templates/`` under :func:`advisor.settings.cache_dir` (``~/.cache/torch-
advisor``; ``ADVISOR_NO_CACHE=1``: no cache). A file is used only when:

- its key matches: the template's name and path, jinja2's and torch-advisor's versions and the
  environment's options (``salt``), so another install or another jinja2 never reads it;
- the template's source is the one it was compiled from (jinja2 compares a SHA-1 of the source);
- the folder is this user's own, a real directory that nobody else may write to (the code in it
  runs), as jinja2 requires of its own default folder.

Any failure (a read-only or full disk, a folder owned by someone else, a damaged or truncated
file) leaves the template compiled from its source, as without a cache: the cache can only save
time, never change a report or fail a run. Files are written whole under a temporary name and
renamed, so two runs at once never read half a file.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from pathlib import Path

import jinja2
from jinja2.bccache import Bucket

from advisor import settings

SUBDIR = "templates"
PATTERN = "%s.jinja"  # the file of one compiled template, by its key


class TemplateCache(jinja2.FileSystemBytecodeCache):
    """jinja2's file cache, keyed by ``salt`` too, and silent about every failure."""

    def __init__(self, directory: Path, salt: str) -> None:
        super().__init__(str(directory), PATTERN)
        self.salt = salt

    def get_cache_key(self, name: str, filename: str | None = None) -> str:
        return hashlib.sha1(f"{self.salt}|{name}|{filename}".encode()).hexdigest()

    def load_bytecode(self, bucket: Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except Exception:  # noqa: BLE001 (unreadable or damaged: compiled from source)
            bucket.reset()

    def dump_bytecode(self, bucket: Bucket) -> None:
        with contextlib.suppress(OSError):  # read-only, full or gone: next run compiles again
            super().dump_bytecode(bucket)


def template_cache(salt: str) -> TemplateCache | None:
    """The cache for templates compiled with ``salt`` (what else shapes their code), or None
    when there is no folder this user alone can write to."""
    base = settings.cache_dir()
    if base is None or not hasattr(os, "getuid"):
        return None
    folder = base / SUBDIR
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(folder)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        return None  # a link, another user's folder or one others may write to: not trusted
    return TemplateCache(folder, salt)
