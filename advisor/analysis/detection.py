"""Loading every detector (this repository's and the plugins') and running them on a trace.

The detector API itself (``detector``, ``Context``, ``Skip``) is :mod:`advisor.detect.registry`;
this module imports the modules of :mod:`advisor.detectors` and the entry points of the group
``torch_advisor.detectors``, whose imports register them, and runs them, so a broken detector or
plugin never sinks the report.
"""

from __future__ import annotations

import importlib
import pkgutil
import traceback
from dataclasses import dataclass

from advisor.detect.registry import (
    Context,
    Detector,
    RankCheck,
    Skip,
    registered,
    registered_rank_checks,
)
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
_PLUGIN_ERRORS: dict[str, str] = {}  # entry point name -> why it could not be loaded


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

    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        try:
            ep.load()
        except Exception as err:  # noqa: BLE001 (a broken plugin never sinks the report)
            _PLUGIN_ERRORS[ep.name] = f"cannot load plugin {ep.value}: {type(err).__name__}: {err}"


def plugin_errors() -> list[tuple[str, str]]:
    """(entry point name, one-line error) of the plugins that could not be loaded."""
    all_detectors()
    return sorted(_PLUGIN_ERRORS.items())


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
    for det in all_detectors():
        if only and det.id not in only:
            continue
        if skip and det.id in skip:
            skipped.append((det.id, "skipped with --skip"))
            continue
        reason = det.missing(trace, ctx)
        if reason:
            skipped.append((det.id, reason))
            continue
        try:
            found = det.func(trace, ctx)
        except Skip as s:
            skipped.append((det.id, str(s)))
            continue
        except Exception as err:  # a broken detector never sinks the report
            errored.append((det.id, f"{type(err).__name__}: {err}", traceback.format_exc()))
            continue
        for d in found:
            if det.gpu_only and not trace.has_gpu and not d.latent:
                errored.append(
                    (det.id, "GPU-only detector claimed a saving on a CPU-only trace", "")
                )
                break
            drafts.append(d)
    return Outcome(drafts, skipped, errored)
