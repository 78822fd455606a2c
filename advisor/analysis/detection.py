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
from dataclasses import dataclass, field
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
from advisor.analysis.sharing import run_shared
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


# A bigger trace's detectors run on one core. The helper keeps its own copies of the tables the
# detectors derive (about 200 bytes an event: 46 MB on a 54 MB trace, 570 MB on a 556 MB one),
# and for a big trace memory, not time, is what runs short: sharing took its analysis from 14 to
# 11.5 s but its peak from 1.7 to 2.1 times its JSON.
SHARE_MAX_RAW_BYTES = 256 << 20


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
    share: bool = False,
) -> Outcome:
    """Every detector that ``only``/``skip`` leave, built-in ones first, each by id; ``share``:
    the built-in ones shared with a forked helper on a second core
    (:mod:`advisor.analysis.sharing`), with the same outcome, for a trace of up to
    :data:`SHARE_MAX_RAW_BYTES` of JSON."""
    share = share and trace.meta.raw_bytes <= SHARE_MAX_RAW_BYTES
    dets = [
        d
        for d in sorted(all_detectors(), key=lambda d: not d.builtin)  # built-ins first, by id
        if not only or d.id in only
    ]
    builtins = [d for d in dets if d.builtin and not (skip and d.id in skip)]
    jobs = [partial(_run_builtin, d, trace, ctx) for d in builtins]
    results = run_shared(jobs, share, before_fork=partial(_before_sharing, trace))
    ran = dict(zip([d.id for d in builtins], results, strict=True))
    drafts: list[Draft] = []
    skipped: list[tuple[str, str]] = []
    errored: list[tuple[str, str, str]] = [(n, e, "") for n, e in plugin_errors()]
    # the slowest built-in detector on this trace: a plugin's limit grows with it
    slowest_s = max((r.seconds for r in ran.values()), default=0.0)
    for det in dets:
        if skip and det.id in skip:
            skipped.append((det.id, "skipped with --skip"))
            continue
        if det.builtin:
            r = ran[det.id]
            if r.skip is not None:
                skipped.append((det.id, r.skip))
                continue
            if r.error is not None:
                errored.append((det.id, *r.error))
                continue
            found, problem, tb = r.found, r.problem, ""
        else:  # a plugin's: in a process of its own
            reason = det.missing(trace, ctx)
            if reason:
                skipped.append((det.id, reason))
                continue
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


def _before_sharing(trace: Trace) -> None:
    """Before the helper is forked: the step graph and its unchanged replay, which every fix's
    saving is replayed against, so that both processes read one copy instead of building two."""
    from advisor.replay.whatif import base, replayable

    if replayable(trace):
        base(trace)


@dataclass(frozen=True)
class _Ran:
    """What one built-in detector came to (picklable: it may come back from the helper)."""

    seconds: float = 0.0
    skip: str | None = None  # why it did not run, or the Skip it raised
    error: tuple[str, str] | None = None  # (one-line error, traceback)
    found: list[Draft] = field(default_factory=list)
    problem: str | None = None  # what check_drafts refused


def _run_builtin(det: Detector, trace: Trace, ctx: Context) -> _Ran:
    """One built-in detector, whatever it raises or returns, however long it runs."""
    reason = det.missing(trace, ctx)
    if reason:
        return _Ran(skip=reason)
    t0 = time.perf_counter()
    result, err = call(partial(det.func, trace, ctx), None)
    secs = time.perf_counter() - t0
    if isinstance(err, Skip):
        return _Ran(secs, skip=str(err))
    if err is not None:
        return _Ran(secs, error=(describe(err), _traceback(err)))
    found, problem = check_drafts(det.id, result)
    return _Ran(secs, found=found, problem=problem)
