"""Issue 20 case 9 (and issue 16): names from a trace reach the terminal verbatim and inert.

A kernel, an op and a device name holding ESC sequences, a bidi override and rich-markup
brackets, in a file named ``weird[b].json``: ``inspect``, ``diff`` and ``analyze``'s summary
(real processes) print the names with their control characters escaped and the brackets kept,
and never write an ESC byte."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import HANG_S
from tests.test_profile import _env
from tests.tracebuilder import TraceBuilder

ESC = "\x1b]0;pwned\x07\x1b[2J\x1b[31m"
KERNEL = f"k[/oops]{ESC}\u202eevil"
DEVICE = f"GPU[bold]{ESC}"


def _trace(path: Path, slow: float) -> Path:
    b = TraceBuilder(gpu_name=DEVICE)
    for i in range(3):
        s = i * 1000
        b.step(i + 1, s, 1000)
        op = b.op(f"aten::mm[/x]{ESC}", s + 10, 50)
        b.launch(op, "cudaLaunchKernel", s + 20, 5, kernel=KERNEL, gpu_ts=s + 30, gpu_dur=slow)
    return b.write(path)


def _cli(cwd: Path, *args: str | Path) -> str:
    p = subprocess.run(
        [sys.executable, "-m", "advisor", *map(str, args)],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert p.returncode == 0, p.stderr
    out = p.stdout + p.stderr
    assert "\x1b" not in out and "\u202e" not in out and "\x07" not in out
    return out


def test_names_print_verbatim_with_controls_escaped(tmp_path: Path) -> None:
    a = _trace(tmp_path / "weird[b].json", 400)
    b = _trace(tmp_path / "after.json", 100)
    shown = "k[/oops]\\x1b]0;pwned\\x07\\x1b[2J\\x1b[31m\\u202eevil"
    out = _cli(tmp_path, "inspect", a)
    assert "weird[b].json" in out and shown in out and "GPU[bold]\\x1b]0;pwned" in out
    out = _cli(tmp_path, "diff", a, b)
    assert "weird[b].json" in out and shown[:40] in out
    out = _cli(tmp_path, "analyze", a, "--out", "o")
    assert "GPU[bold]\\x1b]0;pwned" in out
    # a file name with an ESC in it, in the one-line error
    bad = tmp_path / "x\x1b[31m.json"
    bad.write_text("{")
    p = subprocess.run(
        [sys.executable, "-m", "advisor", "inspect", str(bad)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert p.returncode == 1 and "\x1b" not in p.stderr and "x\\x1b[31m.json" in p.stderr
