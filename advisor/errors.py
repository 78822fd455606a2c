"""The one error type the advisor shows users: a single line, no traceback, exit code 1; and
the exit code of a run whose findings reach ``--fail-on``."""

from __future__ import annotations

from pathlib import Path

EXIT_FAIL_ON = 3  # --fail-on: a finding at or above the level exists


class AdvisorError(Exception):
    """A problem with the user's input or environment, reported as one line on stderr.

    ``path`` names the file the problem is about; ``str(err)`` is the full one-line message.
    """

    def __init__(self, message: str, path: str | Path | None = None) -> None:
        self.path = None if path is None else str(path)
        self.problem = message
        super().__init__(f"{self.path}: {message}" if self.path else message)


class TraceError(AdvisorError):
    """The trace file cannot be read as a PyTorch profiler trace."""
