"""The output folder of ``advisor profile``: default name, the no-overwrite rule, atomic writes.

An existing non-empty ``--out`` is refused unless ``--force``; even then only files an earlier
advisor run wrote there are replaced, never the user's own. With ``--force`` the earlier run's
outputs (and temporary files a killed run left) are removed before the script starts, so a run
that ends before writing everything never leaves the earlier run's report beside its own
trace. Whether the folder can be written is checked before the script runs.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from advisor.errors import AdvisorError
from advisor.output.outfiles import claim, refuse_foreign, written_by_advisor
from advisor.profile.torchrun import RankEnv, foreign_entries, process_start_time
from advisor.runfolder import ANALYZE_NAMES, PROFILE_NAMES

_PROBE = ".advisor-write-test-"  # check_writable's probe (a name profile.torchrun knows)
LOW_SPACE_BYTES = 256 * 1024**2  # warn below this: a trace with stacks takes tens of MB or more


def check_out_dir(out: Path, force: bool, renv: RankEnv | None = None) -> None:
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


def _finite(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {str(k): _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as indented JSON with sorted keys (strict JSON: no NaN), atomically."""
    from advisor.output.outfiles import atomic_write

    text = json.dumps(_finite(data), indent=2, sort_keys=True, default=str, allow_nan=False)
    atomic_write(path, (text + "\n").encode("utf-8"))
