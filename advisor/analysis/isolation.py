"""Running one detector so that nothing it does sinks the report.

- **A plugin runs in a process of its own** (:mod:`advisor.analysis.plugins`,
  :mod:`advisor.analysis.childrun`): whatever it does to that process (exits, is killed, changes
  the working directory, closes stdout, holds the GIL in a call into C) is one ``errored`` row.
  Where the platform cannot fork, it runs here under :func:`call` (a thread and a time limit).
- **Whatever a detector raises** is caught: ``Exception``, ``SystemExit`` and any other
  ``BaseException`` subclass becomes a one-line error (:func:`describe`; a message whose
  ``str()`` raises is said so); only ``KeyboardInterrupt`` (the user's Ctrl-C) goes on up.
- **A time limit** for plugins (``ADVISOR_PLUGIN_TIMEOUT``, seconds, default
  :data:`~advisor.settings.PLUGIN_TIMEOUT_S`; 0: none; or three times the slowest built-in
  detector on the same trace when that is longer, :func:`plugin_limit_s`): past it the plugin's
  process is killed and the detector reported as still running. The built-in detectors run in
  the caller's thread without a limit: their cost grows with the trace, and they are tested.
  Importing a plugin (an entry point, a ``--detector``) gets the same guard, with at least
  :data:`IMPORT_LIMIT_MIN_S` (a plugin may import big libraries).
- **What it returns is checked** (:func:`check_drafts`): a list of
  :class:`~advisor.detect.Draft` of its own id, with text where text belongs, a valid
  confidence, finite savings, evidence and locations of the right types, a ``saving`` from
  ``ctx.whatif`` (with a replay fix) or none, ``claims``, ``steps_seen`` and ``related`` of their
  types. A draft that hands its fix over the deprecated way, ``extra={"fix": fix}``
  (docs/plugins.md), gets it as its ``saving`` here, and one that gives ``extra["steps_seen"]``,
  ``extra["claims"]`` or ``extra["related"]`` (read from ``extra`` before they were fields of
  ``Draft``) gets them as those fields: the one place those keys are read
  (:func:`_from_extra`).
  A result that fails is refused as a whole (one line naming the field), since findings.json
  and the report must never carry what cannot be rendered. A plugin's result crosses back from
  its process only as advisor.detect's own types (a class of its own is refused).
"""

from __future__ import annotations

import ctypes
import math
import numbers
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from advisor import settings
from advisor.detect.draft import Draft
from advisor.findings import SEVERITIES, Evidence, Location, Related
from advisor.replay.claims import Claims
from advisor.replay.fixes import Fix
from advisor.replay.whatif import Saving

CONFIDENCES = ("high", "medium", "low")


IMPORT_LIMIT_MIN_S = 30.0  # a plugin's import may pull in big libraries
PLUGIN_LIMIT_PER_BUILTIN = 3.0  # a plugin may take this many times the slowest built-in


def plugin_limit_s(builtin: bool, slowest_builtin_s: float) -> float | None:
    """A detector's time limit: none for a built-in one; for a plugin's ``ADVISOR_PLUGIN_TIMEOUT``
    (0: none), or PLUGIN_LIMIT_PER_BUILTIN times the slowest built-in detector on this trace
    when that is longer (a big trace takes every detector longer)."""
    if builtin:
        return None
    limit = settings.plugin_timeout_s()
    return max(limit, PLUGIN_LIMIT_PER_BUILTIN * slowest_builtin_s) if limit > 0 else None


def import_limit_s() -> float:
    """How long importing a plugin may take: the plugin limit, at least IMPORT_LIMIT_MIN_S
    (0: none)."""
    limit = settings.plugin_timeout_s()
    return max(limit, IMPORT_LIMIT_MIN_S) if limit > 0 else 0.0


class DetectorTimeout(BaseException):  # noqa: N818 (raised into a detector's thread to stop it)
    """Raised into a plugin detector's thread when it runs past its time limit."""


def call(func: Callable[[], Any], limit_s: float | None) -> tuple[Any, BaseException | None]:
    """``func()`` and what it raised (None when it returned); ``limit_s``: run it in a thread and
    stop waiting after that many seconds (a :class:`TimeoutError` saying so is returned)."""
    if not limit_s or limit_s <= 0:
        try:
            return func(), None
        except KeyboardInterrupt:
            raise
        except BaseException as err:  # noqa: BLE001 (SystemExit and the like too)
            return None, err
    box: list[Any] = [None, None]

    def run() -> None:
        try:
            box[0] = func()
        except BaseException as err:  # noqa: BLE001 (handed to the caller)
            box[1] = err

    worker = threading.Thread(target=run, name="advisor-plugin-detector", daemon=True)
    worker.start()
    worker.join(limit_s)
    if worker.is_alive():
        _raise_in(worker)
        worker.join(0.5)
        return None, TimeoutError(
            f"still running after {limit_s:g} s: stopped (ADVISOR_PLUGIN_TIMEOUT sets the limit)"
        )
    if isinstance(box[1], KeyboardInterrupt):
        raise box[1]
    return box[0], box[1]


def _raise_in(thread: threading.Thread) -> None:
    """Ask ``thread`` to stop: :class:`DetectorTimeout` is raised in it at its next bytecode."""
    if thread.ident is None:
        return
    set_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
    set_exc(ctypes.c_ulong(thread.ident), ctypes.py_object(DetectorTimeout))


def describe(err: BaseException) -> str:
    """One line: the exception's type and message (a message that cannot be read is said so;
    one whose ``str()`` never returns is stopped with the plugin's process)."""
    name = type(err).__name__
    try:
        raw = str(err)
        text = " ".join(raw.split()) if isinstance(raw, str) else ""
    except Exception as inner:  # noqa: BLE001 (a plugin's exception whose __str__ raises)
        return f"{name} (its message could not be read: str() raised {type(inner).__name__})"
    if len(text) > 300:
        text = text[:297] + "..."
    return f"{name}: {text}" if text else name


def check_drafts(det_id: str, result: Any) -> tuple[list[Draft], str | None]:
    """``result`` as a list of drafts, or the one-line reason it is refused."""
    if not isinstance(result, list | tuple):
        return [], f"returned {type(result).__name__}, expected a list of Draft"
    for i, d in enumerate(result):
        problem = _draft_problem(det_id, d)
        if problem:
            return [], f"item {i} {problem}"
    return [_from_extra(d) for d in result], None


def check_merged(
    check_id: str, before: list[Draft], result: Any, builtin: bool
) -> tuple[list[Draft], str | None]:
    """What a check across ranks returned (every draft, its own refined): a list of valid
    drafts; a plugin's check returns the other detectors' drafts untouched."""
    if not isinstance(result, list | tuple):
        return before, f"returned {type(result).__name__}, expected a list of Draft"
    for i, d in enumerate(result):
        problem = _draft_problem(d.id if isinstance(d, Draft) else check_id, d)
        if problem:
            return before, f"item {i} {problem}"
    others = [d for d in result if d.id != check_id]
    if not builtin and [id(d) for d in others] != [id(d) for d in before if d.id != check_id]:
        return before, "changed the drafts of other detectors"
    return [_from_extra(d) for d in result], None


_FROM_EXTRA = ("fix", "claims", "steps_seen", "related")  # read from extra, deprecated


def _from_extra(d: Draft) -> Draft:
    """``d`` with what it handed over the deprecated way, in ``extra``, as the fields of
    ``Draft`` that hold it now (a field the draft sets itself wins; a value of another type is
    ignored, as it was when these were read from ``extra``):

    - ``extra={"fix": fix}`` (before ``Draft.saving``): its ``saving``, the figures its
      detector stated, with that fix;
    - ``extra["steps_seen"]`` (an int), ``extra["claims"]`` (a ``Claims``),
      ``extra["related"]`` (its ``Related`` rows): ``steps_seen``, ``claims``, ``related``."""
    if not any(k in d.extra for k in _FROM_EXTRA):
        return d
    old = d.extra
    fields: dict[str, Any] = {}
    fix = old.get("fix")
    if d.saving is None and fix is not None:
        fields["saving"] = Saving.stated(fix, d.est_savings_ms, d.est_savings_range_ms)
    seen = old.get("steps_seen")
    if d.steps_seen is None and isinstance(seen, int):
        fields["steps_seen"] = seen
    claims = old.get("claims")
    if d.claims is None and isinstance(claims, Claims):
        fields["claims"] = claims
    related = old.get("related")
    if not d.related and isinstance(related, tuple | list):
        fields["related"] = tuple(r for r in related if isinstance(r, Related))
    extra = {k: v for k, v in old.items() if k not in _FROM_EXTRA}
    return replace(d, extra=extra, **fields)


def _draft_problem(det_id: str, d: Any) -> str | None:
    if not isinstance(d, Draft):
        return f"is {type(d).__name__}, expected a Draft"
    if d.id != det_id:
        return f"has id {d.id!r}: a detector returns drafts of its own id ({det_id!r})"
    for name in ("title", "summary", "recommendation", "snippet"):
        if not isinstance(getattr(d, name), str):
            return f"{name} is {type(getattr(d, name)).__name__}, expected text"
    if d.confidence not in CONFIDENCES:
        return f"confidence {_short(d.confidence)} is not high, medium or low"
    if d.severity is not None and d.severity not in SEVERITIES:
        return f"severity {_short(d.severity)} is not one of {', '.join(SEVERITIES)}"
    if not _finite(d.est_savings_ms):
        return f"est_savings_ms {_short(d.est_savings_ms)} is not a finite number"
    rng = d.est_savings_range_ms
    if rng is not None and not (
        isinstance(rng, tuple | list) and len(rng) == 2 and all(_finite(v) for v in rng)
    ):
        return f"est_savings_range_ms {_short(rng)} is not two finite numbers"
    if not isinstance(d.latent, bool):
        return "latent is not True or False"
    if not isinstance(d.extra, dict):
        return f"extra is {type(d.extra).__name__}, expected a dict"
    if d.saving is not None and not isinstance(d.saving, Saving):
        return f"saving is {type(d.saving).__name__}, expected what ctx.whatif returns (or None)"
    if d.claims is not None and not isinstance(d.claims, Claims):
        return f"claims is {type(d.claims).__name__}, expected Claims (or None)"
    if d.steps_seen is not None and not _integer(d.steps_seen):
        return f"steps_seen {_short(d.steps_seen)} is not a whole number (or None)"
    if not isinstance(d.related, tuple | list) or not all(
        isinstance(r, Related) for r in d.related
    ):
        return "related is not a tuple of Related"
    fix = d.extra.get("fix") if d.saving is None else d.saving.fix
    if fix is not None and not isinstance(fix, Fix):
        where = 'extra["fix"]' if d.saving is None else "saving.fix"
        return f"{where} is {type(fix).__name__}, expected a fix of advisor.detect (or None)"
    for name, kind in (("evidence", Evidence), ("locations", Location)):
        rows = getattr(d, name)
        if not isinstance(rows, tuple | list):
            return f"{name} is {type(rows).__name__}, expected a tuple"
        for row in rows:
            bad = _row_problem(row, kind)
            if bad:
                return f"{name}: {bad}"
    if not isinstance(d.assumptions, tuple | list) or not all(
        isinstance(a, str) for a in d.assumptions
    ):
        return "assumptions is not a tuple of text"
    return None


def _row_problem(row: Any, kind: type) -> str | None:
    if not isinstance(row, kind):
        return f"{type(row).__name__}, expected {kind.__name__}"
    if isinstance(row, Evidence):
        ok = (
            isinstance(row.what, str)
            and _integer(row.count)
            and _finite(row.total_ms)
            and (row.example_ts_us is None or _finite(row.example_ts_us))
        )
    elif isinstance(row, Location):
        ok = (
            isinstance(row.file, str)
            and _integer(row.line)
            and isinstance(row.function, str)
            and _integer(row.count)
            and isinstance(row.line_is, str)
        )
    else:
        ok = False
    return None if ok else f"a field of {_short(row)} has the wrong type"


def _finite(v: Any) -> bool:
    if not isinstance(v, numbers.Real) or isinstance(v, bool):
        return False
    try:
        return math.isfinite(float(v))
    except (OverflowError, ValueError, TypeError):
        return False


def _integer(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool) and abs(int(v)) < 2**63


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 80 else text[:77] + "..."
