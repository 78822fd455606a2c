"""``advisor profile``: run a script under torch.profiler, capture the run context, report.

Importing this package never imports torch; :func:`run_profile` does, when it runs.
Private: not an API (the command line and :mod:`advisor` are).
"""

from __future__ import annotations

from advisor.profile.run import ProfileOptions, run_profile

__all__ = ["ProfileOptions", "run_profile"]
