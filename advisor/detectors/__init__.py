"""Detectors: one module per finding id, each registered with
:func:`advisor.detect.registry.detector`.

The modules live in the repository's top-level ``heuristics/`` folder; the wheel installs them
here, as ``advisor.detectors``, so they never clash with another distribution's top-level
package. In a source checkout (or an editable install) this package's search path is extended
to that folder. Every module is imported by ``advisor.analysis.detection.all_detectors()``; a
module's docstring is the user-facing explanation shown in the report (what it detects, why it
costs time, how the saving is estimated, how to fix it, known false positives). Modules whose
name starts with ``_`` hold facts several detectors share. Private: a plugin never imports them
(they may change in any release); it imports :mod:`advisor.detect` only.
"""

from __future__ import annotations

from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parents[2]
if (_CHECKOUT / "pyproject.toml").is_file() and (_CHECKOUT / "heuristics").is_dir():
    __path__.append(str(_CHECKOUT / "heuristics"))
