"""activation-recompute, host-preprocessing, compile-graph-breaks and compile-recompiles end to
end: each fires on its example through ``advisor profile`` on the CPU, naming the user's line,
and not on the example's fixed twin.

The eight runs are short (``--wait 1 --warmup 1 --active 2 --steps 6``) and run two at a time
in one module fixture; the compiled examples use dynamo's ``eager``/``aot_eager`` backends on
the CPU, so no C++ compiler runs, and the recompiling one runs without Python stacks (run.json
names its line and guard).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import HANG_S, REPO

pytestmark = pytest.mark.slow

# example -> (finding id, the user's line it must name, a word its text must hold)
CASES: dict[str, tuple[str, int, str]] = {
    "activation_checkpoint": ("activation-recompute", 32, "aten::linear"),
    "host_preprocessing": ("host-preprocessing", 71, "resize"),
    "compile_graph_break": ("compile-graph-breaks", 25, "Data-dependent branching"),
    "compile_recompile": ("compile-recompiles", 23, "size mismatch at index 1"),
}


# a recompilation inside the window under with_stack records every Python call dynamo makes
# (millions of events, minutes to export); run.json has the line and the guard without them
NO_STACK = {"compile_recompile", "compile_recompile_fixed"}


def _run(out: Path, script: str) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(OMP_NUM_THREADS="1", NO_COLOR="1", CUDA_VISIBLE_DEVICES="")
    args = ["--wait", "1", "--warmup", "1", "--active", "2", "--phases", "train", "--no-memory"]
    args += ["--no-stack"] if script in NO_STACK else []
    p = subprocess.run(
        [sys.executable, "-m", "advisor", "profile", *args, "--out", str(out)]
        + [str(REPO / "examples" / f"{script}.py"), "--steps", "6"],
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads((out / "findings.json").read_text())  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    d = tmp_path_factory.mktemp("cpu_checks")
    scripts = [s for name in CASES for s in (name, f"{name}_fixed")]
    with ThreadPoolExecutor(max_workers=2) as pool:
        got = list(pool.map(lambda s: _run(d / s, s), scripts))
    return dict(zip(scripts, got, strict=True))


def _finding(findings: dict[str, Any], fid: str) -> dict[str, Any] | None:
    hits = [f for f in findings["findings"] if f["id"] == fid]
    return hits[0] if hits else None


@pytest.mark.parametrize("example", sorted(CASES))
def test_fires_on_the_example_with_the_users_line(
    runs: dict[str, dict[str, Any]], example: str
) -> None:
    fid, line, word = CASES[example]
    assert not runs[example]["errored"], runs[example]["errored"]
    f = _finding(runs[example], fid)
    assert f is not None, [x["id"] for x in runs[example]["findings"]]
    lines = {(Path(loc["file"]).name, loc["line"]) for loc in f["locations"]}
    assert (f"{example}.py", line) in lines, lines
    text = " ".join([f["summary"], f["recommendation"]] + [e["what"] for e in f["evidence"]])
    assert word in text


@pytest.mark.parametrize("example", sorted(CASES))
def test_silent_on_the_fixed_twin(runs: dict[str, dict[str, Any]], example: str) -> None:
    fid = CASES[example][0]
    twin = runs[f"{example}_fixed"]
    assert not twin["errored"], twin["errored"]
    assert _finding(twin, fid) is None
