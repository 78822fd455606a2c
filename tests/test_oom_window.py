"""Issue 20 case 7: running out of memory inside the profiling window keeps the trace.

A real ``advisor profile`` of a script that caps its own address space (``RLIMIT_AS``) and
then allocates until ``MemoryError`` in the middle of the window: the script's tensors are
still held when the trace is exported, and the export still succeeds (the advisor gives back
the room it held back for this), so the report covers the window's steps until then."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_profile import _write, advisor

pytestmark = pytest.mark.slow

OOM = """
import resource, torch
m = torch.nn.Linear(256, 256)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
resource.setrlimit(resource.RLIMIT_AS, (6 << 30, hard))
hold = []  # a global: still alive while the advisor exports the trace
for i in range(100000):
    m(torch.randn(64, 256)).sum().backward()
    opt.step()
    opt.zero_grad()
    if i == 4:  # inside the window (steps 3-6): allocate until out of memory
        while True:
            hold.append(torch.empty(1 << 20, dtype=torch.uint8))  # never touched: no RSS
"""


def test_out_of_memory_inside_the_window_keeps_the_trace(tmp_path: Path) -> None:
    _write(tmp_path, "oom.py", OOM)
    p = advisor(tmp_path, "--wait", "1", "--warmup", "1", "--active", "4", "--out", "o", "oom.py")
    assert p.returncode == 1, p.stderr
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    assert run["end_reason"] == "out-of-memory"
    assert run.get("export_error") is None, run.get("export_error")
    assert run["trace_scope"] == "partial-window" and (tmp_path / "o" / "trace.json.gz").is_file()
    findings = json.loads((tmp_path / "o" / "findings.json").read_text())
    assert findings["run"]["steps_profiled"] >= 1
