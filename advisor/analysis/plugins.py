"""Plugins (entry points of ``torch_advisor.detectors``, ``--detector`` files and modules),
each imported and run in a process of its own (:mod:`advisor.analysis.childrun`), so nothing a
plugin does at import or in its detector takes the analysis down or changes the analysing
process (its working directory, its stdout, its signals).

**Loading.** A plugin is imported in a child process, which reports what the import
registered (a manifest of builtins): its detectors (id, title, needs, GPU only, the module's
docstring), its checks across ranks, its thresholds and its communication kernels. The parent
records them without importing the plugin: a stand-in :class:`~advisor.detect.registry.Detector`
(and ``RankCheck``) per id, the thresholds in the one table (``--set``, ``--list-thresholds``),
the communication rules in the one table of communication kernels, so ``--only``, the ranking
and the report's explanation know them like a built-in detector's. An import that raises,
exits, is killed or runs past its limit, or an id another plugin registered first, is the
plugin's one-line error.

**Running.** Each plugin detector (and check across ranks) runs in a child forked from the
analysing process, which holds the trace, the context and the drafts already: the child imports
the plugin again, runs the detector, checks the result
(:func:`~advisor.analysis.isolation.check_drafts`) and sends the drafts back. Whatever ends it
(an exception, one whose message cannot be read, ``os._exit``, a signal, a time limit, a result
that is not advisor.detect's types) is one ``errored`` row.

Where the platform cannot fork (:func:`advisor.analysis.childrun.available`), a plugin is
imported and run in the analysing process, guarded by :func:`advisor.analysis.isolation.call`.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from advisor.analysis import childrun
from advisor.analysis.isolation import call, check_drafts, check_merged, describe
from advisor.detect import thresholds
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
from advisor.trace import commroles
from advisor.trace.model import Trace


@dataclass(frozen=True)
class Plugin:
    """A plugin as the user named it: ``name`` (an entry point's name, a ``--detector`` value:
    its errors are listed under it) and ``load`` (imports it; idempotent)."""

    name: str
    what: str  # "plugin my_pkg.checks" / "detector my_check.py": for messages
    load: Callable[[], object]


@dataclass(frozen=True)
class Loaded:
    detectors: tuple[Detector, ...]
    checks: tuple[RankCheck, ...]


class Refused(Exception):  # noqa: N818 (a result that fails the checks: its reason as is)
    pass


def entry_point_plugin(ep: Any) -> Plugin:
    return Plugin(ep.name, f"plugin {ep.value}", ep.load)


def spec_plugin(spec: str) -> Plugin:
    """A resolved ``--detector`` value: an absolute file path or a module name."""
    if Path(spec).is_absolute():
        return Plugin(spec, f"detector {spec}", lambda: import_file(Path(spec)))
    return Plugin(spec, f"detector {spec}", lambda: importlib.import_module(spec))


def import_file(path: Path) -> None:
    """Import a detector file under a module name of its own (its path decides the name), once
    per process."""
    stem = re.sub(r"\W", "_", path.stem)
    name = f"advisor_detector_{stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return
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


def describe_any(err: BaseException) -> str:
    """One line for what a plugin raised (a skip or a refused result: the reason alone)."""
    if isinstance(err, Refused):
        return str(err.args[0])
    return str(err) if isinstance(err, Skip) else describe(err)


def _manifest(plugin: Plugin) -> dict[str, Any]:
    """In the child: import the plugin and say, in builtins, what its import registered."""
    dets = {d.id for d in registered()}
    checks = {c.id for c in registered_rank_checks()}
    keys = set(thresholds.THRESHOLDS)
    rules = set(commroles.rules())
    plugin.load()
    th = thresholds.THRESHOLDS
    return {
        "detectors": [
            (str(d.id), str(d.title), [str(n) for n in d.needs], str(d.doc), bool(d.gpu_only))
            for d in registered()
            if d.id not in dets
        ],
        "checks": [
            (str(c.id), bool(c.only_across)) for c in registered_rank_checks() if c.id not in checks
        ],
        "thresholds": [
            (str(k), float(th[k].default), str(th[k].doc)) for k in sorted(th) if k not in keys
        ],
        "comm": [
            (str(r.family), str(r.pattern), bool(r.dedicated_stream))
            for r in commroles.rules()
            if r not in rules
        ],
    }


def _in_child(*args: Any) -> Any:
    raise RuntimeError("a plugin's detector runs in a process of its own")


def load(plugin: Plugin, known: set[str], limit_s: float) -> tuple[Loaded | None, str | None]:
    """What ``plugin`` registers, as stand-ins run in a child (``known``: the detector ids
    registered before it), or the one-line reason it cannot be used."""
    if not childrun.available():
        return _load_here(plugin, known, limit_s)
    found, failure = childrun.run(
        lambda: None, lambda: _manifest(plugin), describe, lambda e: False, limit_s, limit_s
    )
    if failure is not None:
        return None, f"cannot load {plugin.what}: {failure.error}"
    try:
        dets = tuple(
            Detector(i, title, _in_child, tuple(needs), doc, gpu, plugin=plugin.name)
            for i, title, needs, doc, gpu in found["detectors"]
        )
        checks = tuple(
            RankCheck(i, _in_child, bool(only), plugin=plugin.name) for i, only in found["checks"]
        )
        for d in dets:
            if d.id in known:
                raise ValueError(f"detector {d.id} registered twice")
        for key, default, doc in found["thresholds"]:
            thresholds.register(key, float(default), doc)
        commroles.add_rules([commroles.CommRule(f, p, bool(s)) for f, p, s in found["comm"]])
    except (ValueError, TypeError, KeyError, re.error) as err:
        return None, f"cannot load {plugin.what}: {describe(err)}"
    return Loaded(dets, checks), None


def _load_here(plugin: Plugin, known: set[str], limit_s: float) -> tuple[Loaded | None, str | None]:
    """No fork here: import the plugin in this process (guarded by a thread and a limit)."""
    before = {d.id for d in registered()}, {c.id for c in registered_rank_checks()}
    _, err = call(plugin.load, limit_s)
    if err is not None:
        return None, f"cannot load {plugin.what}: {describe(err)}"
    dets = tuple(d for d in registered() if d.id not in before[0] and d.id not in known)
    checks = tuple(c for c in registered_rank_checks() if c.id not in before[1])
    return Loaded(dets, checks), None


def run_detector(
    det: Detector, plugin: Plugin, trace: Trace, ctx: Context, limit_s: float | None
) -> tuple[list[Draft], str | None, str | None, str]:
    """A plugin's detector run in a child: (its drafts, the skip reason, the one-line error,
    the child's traceback)."""
    if det.plugin is None or not childrun.available():  # imported here (no fork)
        result, err = call(lambda: det.func(trace, ctx), limit_s)
        if isinstance(err, Skip):
            return [], str(err), None, ""
        if err is not None:
            return [], None, describe(err), ""
        found, problem = check_drafts(det.id, result)
        return found, None, problem, ""

    def work() -> list[Draft]:
        mine = {d.id: d for d in registered()}.get(det.id)
        if mine is None:
            raise Refused(f"importing {plugin.what} again no longer registers {det.id}")
        found, problem = check_drafts(det.id, mine.func(trace, ctx))
        if problem:
            raise Refused(problem)
        return found

    drafts, failure = childrun.run(
        plugin.load, work, describe_any, lambda e: isinstance(e, Skip), limit_s, limit_s
    )
    if failure is not None:
        if failure.skip:
            return [], failure.error, None, ""
        return [], None, failure.error, failure.trace
    found, problem = check_drafts(det.id, drafts)  # what came back, checked again here
    return found, None, problem, ""


def run_rank_check(
    check: RankCheck,
    plugin: Plugin | None,
    drafts: list[Draft],
    digests: Sequence[Digest],
    rctx: RanksContext,
    limit_s: float | None,
) -> tuple[list[Draft], str | None, str | None]:
    """A check across ranks: (the drafts after it, the skip reason, the one-line error); a
    plugin's runs in a child, which sends back its own drafts and where they stand."""
    if plugin is None or check.plugin is None or not childrun.available():
        result, err = call(lambda: check.func(drafts, digests, rctx), limit_s)
        if isinstance(err, Skip):
            return drafts, str(err), None
        if err is not None:
            return drafts, None, describe(err)
        after, problem = check_merged(check.id, drafts, result, check.builtin)
        return after, None, problem

    def work() -> list[Draft | None]:
        mine = {c.id: c for c in registered_rank_checks()}.get(check.id)
        if mine is None:
            raise Refused(f"importing {plugin.what} again no longer registers {check.id}")
        after, problem = check_merged(check.id, drafts, mine.func(drafts, digests, rctx), False)
        if problem:
            raise Refused(problem)
        return [d if d.id == check.id else None for d in after]  # the others: unchanged

    layout, failure = childrun.run(
        plugin.load, work, describe_any, lambda e: isinstance(e, Skip), limit_s, limit_s
    )
    if failure is not None:
        if failure.skip:
            return drafts, failure.error, None
        return drafts, None, failure.error
    others = iter([d for d in drafts if d.id != check.id])
    try:
        after = [d if d is not None else next(others) for d in layout]
    except (StopIteration, TypeError):
        return drafts, None, "changed the drafts of other detectors"
    after, problem = check_merged(check.id, drafts, after, False)
    return after, None, problem
