"""The detector API, the one public module of torch-advisor for code outside it.

A detector (built in, or a plugin: docs/plugins.md) imports what it needs from here::

    from advisor.detect import Context, Draft, Evidence, ScaleGpu, detector, register_threshold

- registering: :func:`detector`, :func:`across_ranks`, :func:`register_threshold`,
  :func:`comm_kernels` (kernels that are communication);
- what a detector is given: the :class:`Trace` (its tables, documented in
  :mod:`advisor.trace.model`, are read-only) and a :class:`Context` (``ctx.t(key)``
  thresholds, ``ctx.live`` run.json facts (:mod:`advisor.runinfo`), ``ctx.whatif(fix)`` the replayed saving);
  :class:`Skip` says the trace lacks what it needs;
- what it returns: :class:`Draft` (with :class:`Evidence`, :class:`Location`, the
  :data:`Confidence` levels) and its fix: :class:`ScaleGpu`, :class:`ShrinkHost`,
  :class:`DropSyncs`, :class:`AsyncCopies`, :class:`GraphLaunch`, :class:`HideComm`,
  :class:`Combined` (what each changes in the step: :mod:`advisor.replay.fixes`), valued as a
  :class:`Saving` carried in ``Draft.saving`` (``Draft(**saving.draft_fields(), ...)`` sets the
  saving, its range and ``saving``; ``est_savings_ms=...`` when the detector states its own
  figure). ``extra={"fix": fix}``, the earlier hand-off, is still read (deprecated:
  docs/plugins.md).

Everything else under ``advisor`` is private: module paths, helpers and the facts the
built-in detectors share may change in any release. The names in ``__all__`` change only
additively.
"""

from __future__ import annotations

from advisor.detect.draft import Draft
from advisor.detect.registry import (
    Context,
    RanksContext,
    Skip,
    across_ranks,
    comm_kernels,
    detector,
)
from advisor.detect.thresholds import register as register_threshold
from advisor.findings import Confidence, Evidence, Location
from advisor.replay.fixes import (
    AsyncCopies,
    Combined,
    DropSyncs,
    Fix,
    GraphLaunch,
    HideComm,
    ScaleGpu,
    ShrinkHost,
)
from advisor.replay.whatif import Saving
from advisor.trace.model import Trace

__all__ = [
    "AsyncCopies",
    "Combined",
    "Confidence",
    "Context",
    "Draft",
    "DropSyncs",
    "Evidence",
    "Fix",
    "GraphLaunch",
    "HideComm",
    "Location",
    "RanksContext",
    "Saving",
    "ScaleGpu",
    "ShrinkHost",
    "Skip",
    "Trace",
    "across_ranks",
    "comm_kernels",
    "detector",
    "register_threshold",
]
