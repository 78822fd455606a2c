"""Every environment variable torch-advisor reads, in one place (documented in
docs/settings.md). Each is read when asked, so a test or a parent process may set it at any time.

- ``ADVISOR_DEBUG=1``: an internal error prints its traceback (not only its one line); a
  failing decoding child says so before the trace is decoded in-process.
- ``ADVISOR_NO_FORK=1``: never fork the decoding child (:mod:`advisor.trace.prefetch`); the
  trace is decoded in the command's own process.
- ``NO_COLOR`` (any value, https://no-color.org): no colors in the terminal summary.
- ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``TORCHELASTIC_RUN_ID``: set by torchrun, read by
  ``advisor profile`` (:func:`advisor.profile.torchrun.rank_env`) to write one trace per rank and merge them on rank 0.

Test-only switches (read by the test suite, never by the product): ``UPDATE_GOLDEN=1`` and
``ADVISOR_UPDATE_GOLDEN=1`` rewrite the findings and view-model goldens,
``ADVISOR_SCREENSHOTS=DIR`` keeps the report browser test's screenshots.
"""

from __future__ import annotations

import os
from collections.abc import Mapping


def _on(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


def debug() -> bool:
    """``ADVISOR_DEBUG``: tracebacks for internal errors."""
    return _on("ADVISOR_DEBUG")


def no_fork() -> bool:
    """``ADVISOR_NO_FORK``: decode in-process, no child."""
    return _on("ADVISOR_NO_FORK")


def no_color() -> bool:
    """``NO_COLOR``: plain terminal output (set to any non-empty value)."""
    return bool(os.environ.get("NO_COLOR"))


def torchrun_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables torchrun sets that ``advisor profile`` reads (absent ones left out)."""
    e = os.environ if env is None else env
    keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID")
    return {k: e[k] for k in keys if k in e}
