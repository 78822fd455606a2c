"""How exact a finding's line is reaches every reader: ``advisor.analyze(...).findings`` has
``line_is`` beside ``location`` (and ``phase``), the notebook table marks an approximate line,
and a user's own ``torch.profiler`` loop with ``advisor.on_trace_ready`` (or ``advisor.capture``)
records the exact call sites as ``advisor profile`` does: an ``.item()`` is named at its own
line, not at ``prof.step()`` or the ``def`` line."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import HANG_S
from tests.test_profile import _env

LOOP = """
import torch, advisor
from torch.profiler import ProfilerActivity, profile, schedule

model = torch.nn.Linear(32, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def train(prof):
    for _ in range(8):
        loss = model(torch.randn(16, 32)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        total = loss.item()  # THE ITEM
        prof.step()


with profile(
    activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True,
    schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
    on_trace_ready=advisor.on_trace_ready("tb", worker_name="w0"),
) as prof:
    train(prof)
"""


def test_on_trace_ready_names_the_item_line(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    line = LOOP.splitlines().index("        total = loss.item()  # THE ITEM") + 1
    p = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert p.returncode == 0, p.stderr
    (found,) = sorted((tmp_path / "tb").glob("w0.*.findings.json"))
    doc = json.loads(found.read_text())
    sync = [f for f in doc["findings"] if f["id"] == "sync-point"]
    assert sync, [f["id"] for f in doc["findings"]]
    loc = sync[0]["locations"][0]
    assert (Path(loc["file"]).name, loc["line"], loc["line_is"]) == ("loop.py", line, "call")


def test_the_api_says_how_exact_a_line_is() -> None:
    import advisor
    from advisor.api import Report
    from tests.conftest import SAMPLES

    r = advisor.analyze(SAMPLES / "sync_point.cpu.json.gz")
    df = r.findings
    assert list(df.columns[-2:]) == ["line_is", "phase"]
    raw = r.raw
    first = raw.findings[0]
    assert first.locations and df["line_is"][0] == first.locations[0].line_is
    approx = replace(first, locations=(replace(first.locations[0], line_is="frame-start"),))
    shown = Report(replace(raw, findings=(approx,)))
    assert shown.findings["line_is"][0] == "frame-start"
    assert "(frame start)</code>" in shown._repr_html_()
