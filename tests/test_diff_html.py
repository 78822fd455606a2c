"""advisor diff --html: one self-contained page (no script, no external URL, names escaped)
with the figures of --json, written atomically and never over a file unless --force."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from pathlib import Path

from advisor.analysis.pipeline import Options
from advisor.multirank.diff import diff_sides, load_side
from advisor.output.diff_html import render_diff_html
from tests.conftest import HANG_S
from tests.diff_builders import ab_run
from tests.tracebuilder import TraceBuilder


def _pair(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = ab_run(tmp_path / "a" / "t.json")
    b = ab_run(tmp_path / "b" / "t.json", sync=False, dtoh="Pinned")
    return a, b


def test_the_page_shows_the_diff(tmp_path: Path) -> None:
    a, b = _pair(tmp_path)
    d = diff_sides(load_side(a, Options()), load_side(b, Options()))
    page = render_diff_html(d)
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page
    assert not re.search(r"(?:src|href)=\"(?!data:|#)", page)  # nothing loaded from elsewhere
    assert "Why the step changed" in page and "Still to fix" in page
    assert "syncs: 1 -&gt; 0 per step" in page  # the runtime calls, escaped
    assert "DtoH Device -&gt; Pinned" in page


def test_names_from_the_trace_are_escaped(tmp_path: Path) -> None:
    bad = "void k<script>alert(1)</script>()"
    for side in ("a", "b"):
        t = TraceBuilder()
        for s in range(2):
            t.step(s + 1, s * 1000.0, 1000.0)
            op = t.op("aten::mm", s * 1000.0 + 5, 5)
            dur = 100.0 if side == "a" else 300.0
            t.launch(
                op,
                "cudaLaunchKernel",
                s * 1000.0 + 6,
                2,
                kernel=bad,
                gpu_ts=s * 1000.0 + 20,
                gpu_dur=dur,
            )
        t.write(tmp_path / f"{side}.json")
    d = diff_sides(
        load_side(tmp_path / "a.json", Options()), load_side(tmp_path / "b.json", Options())
    )
    page = render_diff_html(d)
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)" in page


def test_the_command_writes_the_page_and_keeps_an_existing_file(tmp_path: Path) -> None:
    a, b = _pair(tmp_path)
    page = tmp_path / "diff.html"
    cmd = [sys.executable, "-m", "advisor", "diff", str(a), str(b), "--html", str(page)]
    r = subprocess.run([*cmd, "--json"], capture_output=True, text=True, timeout=HANG_S)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)  # stdout stays JSON; the page's name goes to stderr
    assert str(page) in r.stderr and page.is_file()
    assert html.escape(d["verdict"].split(";")[0], quote=False) in page.read_text()
    page.write_text("mine")
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=HANG_S)
    assert again.returncode == 1 and "already exists" in again.stderr
    assert "Traceback" not in again.stderr and page.read_text() == "mine"
    forced = subprocess.run([*cmd, "--force"], capture_output=True, text=True, timeout=HANG_S)
    assert forced.returncode == 0 and page.read_text().startswith("<!DOCTYPE html>")
    missing = [*cmd[:-1], str(tmp_path / "nope" / "d.html")]
    bad = subprocess.run(missing, capture_output=True, text=True, timeout=HANG_S)
    assert bad.returncode == 1 and "no such folder" in bad.stderr
