"""Loading every detector (this repository's and the plugins') and running them on a trace.

The detector API itself (``detector``, ``Context``, ``Skip``, ``Draft``) is :mod:`advisor.detect`;
this module imports the modules of :mod:`advisor.detectors`, whose imports register them, learns
the detectors of the entry points of the group ``torch_advisor.detectors`` (unless
``ADVISOR_NO_PLUGINS=1``) and of the files or modules given with ``--detector`` (each imported
and run in a process of its own: :mod:`advisor.analysis.plugins`), and runs them all, so a
broken detector or plugin never sinks the report.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
import time
import traceback
from collections.abc import Iterable, Sequence
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
from advisor.analysis.plugins import (
    Loaded,
    Plugin,
    entry_point_plugin,
    load,
    run_detector,
    run_rank_check,
    spec_plugin,
)
from advisor.detect.draft import Draft
from advisor.detect.registry import (
    Context,
    Detector,
    RankCheck,
    RanksContext,
    Skip,
    registered,
    registered_rank_checks,
)
from advisor.digest import Digest
from advisor.errors import AdvisorError
from advisor.trace.model import Trace

_HERE = Plugin("", "plugin", lambda: None)  # a plugin imported in this process (no fork)


def rank_checks() -> list[RankCheck]:
    """Every cross-rank check (the built-in ones and the plugins'), sorted by id (after loading
    the detectors)."""
    all_detectors()
    found = {c.id: c for c in registered_rank_checks()}  # imported here (a plugin without fork)
    for p in _PLUGINS.values():
        for c in p.checks:
            found.setdefault(c.id, c)
    return [found[k] for k in sorted(found)]


# Third-party detectors: a distribution declares an entry point in this group whose value is a
# module (``[project.entry-points."torch_advisor.detectors"] my_check = "my_pkg.my_check"``);
# importing it registers its detectors with :func:`detector` (docs/plugins.md).
ENTRY_POINT_GROUP = "torch_advisor.detectors"

_loaded = False
_PLUGIN_ERRORS: dict[str, str] = {}  # entry point name or --detector -> why it did not load
_PLUGINS: dict[str, Loaded] = {}  # entry point name or --detector -> what it registered
_SOURCES: dict[str, Plugin] = {}  # the same -> how to import it (in a child)


def all_detectors() -> list[Detector]:
    """Every registered detector (imports each module of ``advisor.detectors`` once, and learns
    each plugin's from a child that imports it: :mod:`advisor.analysis.plugins`), sorted by id."""
    global _loaded
    if not _loaded:
        import advisor.detectors

        for info in pkgutil.iter_modules(advisor.detectors.__path__):
            if not info.name.startswith("_"):
                importlib.import_module(f"advisor.detectors.{info.name}")
        _loaded = True
        _load_plugins()
    found = {d.id: d for d in registered()}  # imported here (a plugin without fork too)
    for p in _PLUGINS.values():
        for d in p.detectors:
            found.setdefault(d.id, d)
    return [found[k] for k in sorted(found)]


def _load_plugins() -> None:
    from importlib.metadata import entry_points

    if settings.no_plugins():
        return
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        _add(entry_point_plugin(ep))  # a broken plugin never sinks the report


def _add(plugin: Plugin) -> None:
    known = {d.id for d in all_detectors()}
    loaded, error = load(plugin, known, import_limit_s())
    if error is not None:
        _PLUGIN_ERRORS[plugin.name] = error
    elif loaded is not None:
        _PLUGINS[plugin.name], _SOURCES[plugin.name] = loaded, plugin


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
    """Load the detectors named with ``--detector`` (see :func:`resolve_detector_spec`), each
    once per process; one that fails to import is reported under ``errored``, as a plugin."""
    all_detectors()  # the built-in ids first: a file reusing one is refused
    for spec in specs:
        if spec in _EXTRA_LOADED:
            continue
        _EXTRA_LOADED.add(spec)
        _add(spec_plugin(spec))


_EXTRA_LOADED: set[str] = set()  # the --detector files and modules loaded so far


def plugin_errors() -> list[tuple[str, str]]:
    """(entry point name, one-line error) of the plugins that could not be loaded."""
    all_detectors()
    return sorted(_PLUGIN_ERRORS.items())


def run_check(
    check: RankCheck, drafts: list[Draft], digests: Sequence[Digest], rctx: RanksContext
) -> tuple[list[Draft], str | None, str | None]:
    """One check across ranks, a plugin's in a process of its own: (the drafts after it, the
    skip reason, the one-line error)."""
    plugin = _SOURCES.get(check.plugin) if check.plugin else None
    limit = plugin_limit_s(check.builtin, 0.0)
    return run_rank_check(check, plugin, drafts, digests, rctx, limit)


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
        if det.builtin:
            t0 = time.perf_counter()
            result, err = call(partial(det.func, trace, ctx), None)
            slowest_s = max(slowest_s, time.perf_counter() - t0)
            if isinstance(err, Skip):
                skipped.append((det.id, str(err)))
                continue
            if err is not None:
                errored.append((det.id, describe(err), _traceback(err)))
                continue
            found, problem = check_drafts(det.id, result)
            tb = ""
        else:  # a plugin's: in a process of its own
            plugin = _SOURCES.get(det.plugin or "", _HERE)
            limit = plugin_limit_s(False, slowest_s)
            found, reason, problem, tb = run_detector(det, plugin, trace, ctx, limit)
            if reason is not None:
                skipped.append((det.id, reason))
                continue
        if problem:
            errored.append((det.id, problem, tb))
            continue
        for d in found:
            if det.gpu_only and not trace.has_gpu and not d.latent:
                errored.append(
                    (det.id, "GPU-only detector claimed a saving on a CPU-only trace", "")
                )
                break
            drafts.append(d)
    return Outcome(drafts, skipped, errored)
