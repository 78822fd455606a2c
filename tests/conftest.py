from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "traces"
SAMPLES = REPO / "sample_traces"

# a plugin installed beside the suite never changes its results (the advisor processes the
# tests start inherit it); tests/test_plugins.py turns it off where it installs its own
os.environ["ADVISOR_NO_PLUGINS"] = "1"


def shared_trace(rel: str) -> Path:
    """A real trace under ../shared/traces; the test is skipped when ../shared is absent."""
    p = SHARED / rel
    if not p.exists():
        pytest.skip(f"../shared/traces/{rel} not available")
    return p


@pytest.fixture
def builder():
    from tests.tracebuilder import TraceBuilder

    return TraceBuilder
