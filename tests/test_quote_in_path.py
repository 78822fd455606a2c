"""A ``"`` in a source file's name: torch writes the Python frame's name unescaped (invalid
JSON); ``advisor profile`` repairs the export so the trace, findings and report are made."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from advisor.profile.tracefix import repair_line
from tests.conftest import HANG_S, REPO, steps_marked

BROKEN = b'    "name": "q"d/a"b.py(6): <module>",\n'


def test_a_name_line_is_escaped_and_other_lines_are_kept() -> None:
    fixed = repair_line(BROKEN)
    assert fixed == b'    "name": "q\\"d/a\\"b.py(6): <module>",\n'
    assert json.loads(b"{" + fixed.strip().rstrip(b",") + b"}")["name"] == 'q"d/a"b.py(6): <module>'
    for keep in (
        b'    "name": "aten::mm",\n',
        b'    "name": "a\\"b.py(1): f"\n',
        b'  "ph": "X",\n',
    ):
        assert repair_line(keep) is keep


SCRIPT = """import torch
m = torch.nn.Linear(16, 16)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for i in range(12):
    m(torch.randn(4, 16)).sum().backward()
    opt.step()
    opt.zero_grad()
"""


@pytest.mark.slow
def test_profile_of_a_script_with_a_quote_in_its_name(tmp_path: Path) -> None:
    folder = tmp_path / 'q"d'
    folder.mkdir()
    (folder / 'a"b.py').write_text(SCRIPT)
    out = tmp_path / "o"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "advisor",
            "profile",
            "--out",
            str(out),
            "--eval-wait",
            "0",
            str(folder / 'a"b.py'),
        ],
        cwd=folder,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=HANG_S,
    )
    assert p.returncode == 0, p.stderr
    assert "analysis failed" not in p.stderr
    trace = json.loads(gzip.open(out / "trace.json.gz").read())
    names = [e["name"] for e in trace["traceEvents"] if e.get("cat") == "python_function"]
    assert any('a"b.py(' in n for n in names)
    run = json.loads((out / "findings.json").read_text())["run"]
    assert steps_marked(run) == 5
