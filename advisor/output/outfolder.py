"""The output folder: its default name, whose files advisor may replace, and the checks made
before anything is written into it. Cheap to import (no pandas), so a command checks its
``--out`` before it starts loading anything.

- **Default name** (:func:`default_out_dir`): ``<cwd>/advisor-runs/<stem>-<YYYYmmdd-HHMMSS>``.
- **Ownership** (:func:`written_by_advisor`): ``--force`` replaces only files an earlier
  advisor run wrote, recognised by their content, never by their name alone
  (:func:`refuse_foreign`).
- **Before the work**: ``analyze`` checks with :func:`prepare_out_dir` (before loading, then
  again creating and claiming the folder); ``profile`` and ``try`` with :func:`check_out_dir`
  before the script runs: the folder is created, claimed, probed for writing, and with
  ``--force`` the earlier run's outputs (and temporary files a killed run left) are removed, so
  a run that ends before writing everything never leaves the earlier run's report beside its
  own trace. Under torchrun every rank applies the rule to the same folder and ignores the
  per-rank files the other ranks of its launch write there (:func:`foreign_entries`).

Claims (one run per folder) and the atomic writes themselves: :mod:`advisor.output.outfiles`.
The files' names: :mod:`advisor.runfolder`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Protocol

from advisor import runinfo
from advisor.errors import AdvisorError
from advisor.output.outfiles import claim
from advisor.runfolder import (
    ANALYZE_NAMES,
    ANNOTATED_NAME,
    FINDINGS_NAME,
    PROFILE_NAMES,
    RANK_FILE_RE,
    RANK_NAME_RE,
    REPORT_NAME,
    RUN_NAME,
    TRACE_NAME,
    rank_run_name,
)
from advisor.runinfo import RunInfo

REPORT_GENERATOR_RE = re.compile(rb'<meta name="generator" content="torch-advisor [^"<>]*">')
_PROBE = ".advisor-write-test-"  # check_writable's probe (a rank's own file, see foreign_entries)
_PROBE_RE = re.compile(rf"^{re.escape(_PROBE)}\d+$")
LOW_SPACE_BYTES = 256 * 1024**2  # warn below this: a trace with stacks takes tens of MB or more
START_SLACK_S = 10.0  # ranks of one launch start within this of each other


class RankFiles(Protocol):
    """The files one rank of a torchrun launch writes (:class:`advisor.profile.torchrun.RankEnv`)."""

    @property
    def trace_name(self) -> str: ...
    @property
    def run_name(self) -> str: ...


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


# ---------------------------------------------------------------- ownership


def _json(path: Path) -> dict[str, Any] | None:
    try:
        if not path.is_file() or path.is_symlink():
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _run(path: Path) -> RunInfo | None:
    """The run file at ``path`` as its record (not through a symlink), or None."""
    return runinfo.read(_json(path))


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
    m = RANK_NAME_RE.match(name)
    if m and m.group(1) == "trace":  # a rank's trace: owned when its run file names it
        run = _run(folder / rank_run_name(int(m.group(2))))
        return run is not None and run.advisor_version is not None and run.trace == name
    if m or name == RUN_NAME:
        run = _run(path)
        return run is not None and run.advisor_version is not None and run.end_reason is not None
    if name == FINDINGS_NAME:
        d = _json(path)
        return d is not None and "advisor_version" in d and "schema_version" in d
    if name == REPORT_NAME:
        return is_advisor_report(path)
    if name == ANNOTATED_NAME:
        return written_by_advisor(folder, FINDINGS_NAME)
    if name == TRACE_NAME:  # only a profile run (its run.json names the trace) owns it
        run = _run(folder / RUN_NAME)
        return run is not None and run.advisor_version is not None and run.trace == name
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


# ---------------------------------------------------------------- before the work


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


def check_out_dir(out: Path, force: bool, renv: RankFiles | None = None) -> None:
    """Refuse an unusable ``out`` (one line, exit 1) before the script runs; create it.

    Under torchrun (``renv``) every rank applies the rule to the same folder and ignores the
    per-rank files other ranks of this launch may already have written there."""
    if out.exists() and not out.is_dir():
        raise AdvisorError("exists and is not a directory", out)
    names = PROFILE_NAMES if renv is None else (renv.trace_name, renv.run_name, *ANALYZE_NAMES)
    if out.is_dir():
        claim(out, shared=renv is not None)  # one run per folder (torchrun's ranks share it)
        try:
            entries = sorted(p.name for p in out.iterdir() if not p.name.startswith(_PROBE))
        except OSError as err:
            raise AdvisorError(f"cannot read output folder: {err.strerror or err}", out) from None
        if renv is not None:
            entries = foreign_entries(out, process_start_time())
        if entries and not force:
            raise AdvisorError(
                "output folder exists and is not empty (pick another --out, or --force to "
                "replace an earlier advisor run there)",
                out,
            )
        refuse_foreign(out, names)
    check_writable(out, "output folder")  # creates it
    claim(out, shared=renv is not None)
    if force:  # under torchrun each rank clears only its own files (the others run alongside)
        _remove_earlier_run(out, PROFILE_NAMES if renv is None else names[:2])
    _warn_low_space(out)


def check_writable(folder: Path, what: str) -> None:
    """Create ``folder`` and write (then remove) an empty file in it; AdvisorError otherwise."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise AdvisorError(f"cannot create {what}: {err.strerror or err}", folder) from None
    probe = folder / f"{_PROBE}{time.time_ns()}"  # a name profile.torchrun knows
    try:
        with open(probe, "xb") as fh:
            fh.write(b"advisor")
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as err:
        raise AdvisorError(f"{what} is not writable: {err.strerror or err}", folder) from None
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()


def _remove_earlier_run(out: Path, names: tuple[str, ...]) -> None:
    """--force: remove an earlier advisor run's ``names`` (checked to be ours) and the
    temporary files of a run that was killed while writing them (``.<name>.*.tmp``)."""
    owned = [n for n in names if (out / n).exists() and written_by_advisor(out, n)]
    owned.sort(key=lambda n: n.startswith("run."))  # run files last: they mark traces as ours
    for name in owned:
        try:
            (out / name).unlink(missing_ok=True)
        except OSError as err:
            raise AdvisorError(
                f"--force: cannot remove {name}: {err.strerror or err}", out
            ) from None
    for p in out.iterdir():
        if p.name.endswith(".tmp") and any(p.name.startswith(f".{n}.") for n in names):
            with contextlib.suppress(OSError):
                p.unlink()


def _warn_low_space(out: Path) -> None:
    try:
        free = shutil.disk_usage(out).free
    except OSError:
        return
    if free < LOW_SPACE_BYTES:
        print(
            f"advisor: warning: {out}: only {free / 1024**2:.0f} MB free; the trace and report "
            "may not fit",
            file=sys.stderr,
        )


def process_start_time(pid: int | str = "self") -> float:
    """Wall-clock start of a process (Linux /proc), else now."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        ticks = int(fields[19])  # field 22 overall: starttime in clock ticks after boot
        with open("/proc/stat", encoding="ascii") as fh:
            btime = next(int(ln.split()[1]) for ln in fh if ln.startswith("btime "))
        return btime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()


def this_runs_rank_file(path: Path, since: float) -> bool:
    """A per-rank file (or its temporary, or a rank's write probe) of this launch."""
    if not (RANK_FILE_RE.match(path.name) or _PROBE_RE.match(path.name)):
        return False
    try:
        return path.stat().st_mtime >= since - START_SLACK_S
    except OSError:
        return False


def foreign_entries(out: Path, since: float) -> list[str]:
    """Entries of ``out`` that are not this launch's per-rank files (for the no-overwrite rule)."""
    try:
        names = sorted(p.name for p in out.iterdir())
    except OSError:
        return []
    return [n for n in names if not this_runs_rank_file(out / n, since)]
