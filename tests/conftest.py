from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "traces"
SAMPLES = REPO / "sample_traces"

# A test's limit on a process it starts, or on a wait for a condition: a guard against a
# hang, never a measure. On a CI machine loaded to many times its cores an end-to-end run that
# takes 15 s quiet takes minutes of wall time; every such limit in the suite is this one, so no
# outcome depends on how busy the machine is. What a test checks it reads from evidence.
HANG_S = 900

# a plugin installed beside the suite never changes its results (the advisor processes the
# tests start inherit it); tests/test_plugins.py turns it off where it installs its own
os.environ["ADVISOR_NO_PLUGINS"] = "1"

# the signal tests send SIGINT, SIGQUIT and SIGHUP to the processes they start, which inherit
# an ignored signal from the suite: a suite started in the background or under nohup ignores
# these, and its children would never see them. They get what a terminal gives.
for _sig, _handler in (
    (signal.SIGINT, signal.default_int_handler),
    (signal.SIGQUIT, signal.SIG_DFL),
    (signal.SIGHUP, signal.SIG_DFL),
):
    if signal.getsignal(_sig) == signal.SIG_IGN:
        signal.signal(_sig, _handler)


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


def steps_marked(run: dict) -> int:
    """A findings.json run's steps found, plus the leading ones left out as cold (twice as slow
    as the rest or more, which the machine's load decides; at most half): the steps the script
    marked."""
    cold = [e for e in run.get("steps_excluded") or () if e.get("step") is not None]
    assert len(cold) <= int(run["steps_profiled"])
    return int(run["steps_profiled"]) + len(cold)
