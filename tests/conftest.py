from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "traces"
SAMPLES = REPO / "sample_traces"


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
