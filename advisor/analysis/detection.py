"""Loading every detector (this repository's and the plugins') and running them on a trace.

The detector API itself (``detector``, ``Context``, ``Skip``, ``Draft``) is :mod:`advisor.detect`;
this module imports the modules of :mod:`advisor.detectors`, the entry points of the group
``torch_advisor.detectors`` (unless ``ADVISOR_NO_PLUGINS=1``) and the files or modules given
with ``--detector``, whose imports register them, and runs them, so a broken detector or plugin
never sinks the report.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import pkgutil
import re
import sys
import time
import traceback
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from advisor import settings
from advisor.analysis.isolation import (
    call,
    check_drafts,
    describe,
    import_limit_s,
    plugin_limit_s,
)
from advisor.detect.registry import (
    Context,
    Detector,
    RankCheck,
    Skip,
    registered,
    registered_rank_checks,
)
from advisor.errors import AdvisorError
from advisor.findings import Draft
from advisor.trace.model import Trace


def rank_checks() -> list[RankCheck]:
    """Every registered cross-rank check, sorted by id (after loading the detectors)."""
    all_detectors()
    return registered_rank_checks()


# Third-party detectors: a distribution declares an entry point in this group whose value is a
# module (``[project.entry-points."torch_advisor.detectors"] my_check = "my_pkg.my_check"``);
# importing it registers its detectors with :func:`detector` (docs/plugins.md).
ENTRY_POINT_GROUP = "torch_advisor.detectors"

_loaded = False
_PLUGIN_ERRORS: dict[str, str] = {}  # entry point name or --detector -> why it did not load
_EXTRA_LOADED: set[str] = set()  # the --detector files and modules imported so far


def all_detectors() -> list[Detector]:
    """Every registered detector (imports each module of ``advisor.detectors`` and each plugin's
    module once), sorted by id."""
    global _loaded
    if not _loaded:
        import advisor.detectors

        for info in pkgutil.iter_modules(advisor.detectors.__path__):
            if not info.name.startswith("_"):
                importlib.import_module(f"advisor.detectors.{info.name}")
        _load_plugins()
        _loaded = True
    return registered()


def _load_plugins() -> None:
    from importlib.metadata import entry_points

    if settings.no_plugins():
        return
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        # a broken plugin never sinks the report, whatever its import raises or however long
        _, err = call(ep.load, import_limit_s())
        if err is not None:
            _PLUGIN_ERRORS[ep.name] = f"cannot load plugin {ep.value}: {describe(err)}"


def resolve_detector_spec(spec: str) -> str:
    """A ``--detector`` value as it is loaded: a ``.py`` file (or any existing file) as its
    absolute path, else a module name that can be found; a one-line error for anything else."""
    p = Path(spec).expanduser()
    if spec.endswith(".py") or os.sep in spec or p.exists():
        if not p.is_file():
            raise AdvisorError("--detector: no such file", p)
        return str(p.resolve())
    try:
        found = importlib.util.find_spec(spec)
    except (ImportError, ValueError):
        found = None
    except Exception:  # noqa: BLE001 (its parent package failed to import: loading says why)
        return spec
    if found is None:
        raise AdvisorError(f"--detector {spec!r}: no such file or importable module")
    return spec


def load_detectors(specs: Iterable[str]) -> None:
    """Import the detectors named with ``--detector`` (see :func:`resolve_detector_spec`), each
    once per process; one that fails to import is reported under ``errored``, as a plugin."""
    all_detectors()  # the built-in ids first: a file reusing one is refused
    for spec in specs:
        if spec in _EXTRA_LOADED:
            continue
        _EXTRA_LOADED.add(spec)
        load = (
            partial(_import_file, Path(spec))
            if os.path.isabs(spec)
            else partial(importlib.import_module, spec)
        )
        _, err = call(load, import_limit_s())  # never sinks the report
        if err is not None:
            _PLUGIN_ERRORS[spec] = f"cannot load detector {spec}: {describe(err)}"


def _import_file(path: Path) -> None:
    """Import a detector file under a module name of its own (its path decides the name)."""
    stem = re.sub(r"\W", "_", path.stem)
    name = f"advisor_detector_{stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"not a Python module: {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # the registry reads the module's docstring from here
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise


def plugin_errors() -> list[tuple[str, str]]:
    """(entry point name, one-line error) of the plugins that could not be loaded."""
    all_detectors()
    return sorted(_PLUGIN_ERRORS.items())


def _traceback(err: BaseException) -> str:
    return "".join(traceback.format_exception(type(err), err, err.__traceback__))


@dataclass(frozen=True)
class Outcome:
    drafts: list[Draft]
    skipped: list[tuple[str, str]]  # (id, reason)
    errored: list[tuple[str, str, str]]  # (id, one-line error, traceback)


def run_detectors(
    trace: Trace,
    ctx: Context,
    only: set[str] | None = None,
    skip: set[str] | None = None,
) -> Outcome:
    drafts: list[Draft] = []
    skipped: list[tuple[str, str]] = []
    errored: list[tuple[str, str, str]] = [(n, e, "") for n, e in plugin_errors()]
    slowest_s = 0.0  # the slowest built-in detector on this trace: a plugin's limit grows with it
    for det in sorted(all_detectors(), key=lambda d: not d.builtin):  # built-ins first, by id
        if only and det.id not in only:
            continue
        if skip and det.id in skip:
            skipped.append((det.id, "skipped with --skip"))
            continue
        reason = det.missing(trace, ctx)
        if reason:
            skipped.append((det.id, reason))
            continue
        # whatever it raises or returns, however long it runs: never sinks the report
        t0 = time.perf_counter()
        result, err = call(partial(det.func, trace, ctx), plugin_limit_s(det.builtin, slowest_s))
        if det.builtin:
            slowest_s = max(slowest_s, time.perf_counter() - t0)
        if isinstance(err, Skip):
            skipped.append((det.id, str(err)))
            continue
        if err is not None:
            errored.append((det.id, describe(err), _traceback(err)))
            continue
        found, problem = check_drafts(det.id, result)
        if problem:
            errored.append((det.id, problem, ""))
            continue
        for d in found:
            if det.gpu_only and not trace.has_gpu and not d.latent:
                errored.append(
                    (det.id, "GPU-only detector claimed a saving on a CPU-only trace", "")
                )
                break
            drafts.append(d)
    return Outcome(drafts, skipped, errored)
