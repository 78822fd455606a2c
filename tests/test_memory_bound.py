"""Issue 20 case 6: memory is bounded by what the trace holds, not by what it inflates to.

A 0.5 MB gzip whose events are padded with 512 MB of whitespace (the issue's 10 MB gzip of
whitespace, scaled down) loads in a real ``advisor inspect`` process whose memory stays far
below the inflated size; the events around the padding are all read."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import HANG_S
from tests.test_profile import _env
from tests.tracebuilder import TraceBuilder

pytestmark = pytest.mark.slow


def test_whitespace_padding_does_not_fill_memory(tmp_path: Path) -> None:
    b = TraceBuilder(cc=None)
    for i in range(4):
        b.step(i + 1, i * 1000, 1000)
        b.op("aten::mm", i * 1000 + 10, 500)
    doc = b.to_dict()
    events = [json.dumps(e).encode() for e in doc["traceEvents"]]
    path = tmp_path / "padded.json.gz"
    pad = b" " * (1 << 20)
    with gzip.open(path, "wb", compresslevel=9) as fh:
        fh.write(b'{"traceEvents": [' + events[0])
        for e in events[1:]:
            fh.write(b",")
            for _ in range(512 // len(events)):  # 512 MiB of blanks in all
                fh.write(pad)
            fh.write(e)
        fh.write(b"]}")
    assert path.stat().st_size < 2 << 20
    # a fresh parent, so its children's peak RSS is this command's alone
    measure = (
        "import resource, subprocess, sys; p = subprocess.run(sys.argv[1:]); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); "
        "sys.exit(p.returncode)"
    )
    p = subprocess.run(
        [
            sys.executable,
            "-c",
            measure,
            sys.executable,
            "-m",
            "advisor",
            "inspect",
            "--json",
            str(path),
        ],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["steps"]["count"] == 4
    peak_mb = int(p.stderr.strip().splitlines()[-1]) / 1024
    assert peak_mb < 400, f"peak RSS {peak_mb:.0f} MB for 512 MiB of padding"
