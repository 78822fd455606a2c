"""A plugin runs in a process of its own (advisor/analysis/plugins.py, childrun.py): what it does
to its process (exits, kills itself, changes the working directory, closes stdout, holds the GIL
in C, raises an exception whose message cannot be read, returns an endless iterable or a type of
its own) is one ``errored`` row, and the analysis writes its outputs where it was asked to, its
``--json`` intact. One ``advisor analyze`` run holds every hostile plugin at once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import HANG_S, SAMPLES
from tests.test_profile import _env

SAMPLE = SAMPLES / "sync_point.cpu.json.gz"
LIMIT_S = 2  # ADVISOR_PLUGIN_TIMEOUT for this run

HEAD = '''"""A hostile plugin."""
import itertools, os, signal, sys
from advisor.detect import Draft, detector

def draft(**kw):
    base = dict(id=ID, title="t", est_savings_ms=1.0, confidence="low", summary="s",
                recommendation="r", snippet="")
    base.update(kw)
    return Draft(**base)
'''


def _det(body: str) -> str:
    return "@detector(ID, 'A hostile plugin')\ndef detect(trace, ctx):\n" + body


# case -> (module text after HEAD, what its errored row says; None: no row, it ran fine)
CASES: dict[str, tuple[str, str | None]] = {
    "str-raises": (
        "class E(Exception):\n    def __str__(self):\n        raise RuntimeError('no')\n"
        + _det("    raise E()\n"),
        "E (its message could not be read",
    ),
    "str-loops": (
        "class E(Exception):\n    def __str__(self):\n        while True:\n            pass\n"
        + _det("    raise E()\n"),
        "still running after",
    ),
    "endless-result": (
        "class Forever(list):\n    def __iter__(self):\n        while True:\n"
        "            yield draft()\n" + _det("    return Forever([draft()])\n"),
        "still running after",
    ),
    "holds-the-gil": (_det("    return sum(itertools.repeat(1, 10**14))\n"), "still running after"),
    "exits-in-detect": (_det("    os._exit(7)\n"), "exited with code 7"),
    "exits-at-import": ("os._exit(9)\n" + _det("    return []\n"), "exited with code 9"),
    "kills-itself": (
        _det("    os.kill(os.getpid(), signal.SIGTERM)\n    return []\n"),
        "killed by SIGTERM",
    ),
    "own-type": (
        "class Mine(Draft):\n    pass\n"
        + _det("    return [Mine(**{**draft().__dict__, 'title': 'x'})]\n"),
        "Mine, not a type of advisor.detect",
    ),
    "changes-directory": (_det("    os.chdir('/')\n    return []\n"), None),
    "closes-stdout": (_det("    sys.stdout.close()\n    os.close(1)\n    return []\n"), None),
    "prints": (_det("    print('not json')\n    return []\n"), None),
}


def test_every_misbehaviour_is_one_errored_row(tmp_path: Path) -> None:
    args = [sys.executable, "-m", "advisor", "analyze", str(SAMPLE), "--out", "o", "--json"]
    names = {}
    for case, (text, _) in sorted(CASES.items()):
        path = tmp_path / f"{case.replace('-', '_')}.py"
        path.write_text(HEAD + f"ID = 'evil-{case}'\n" + text)
        names[case] = str(path)
        args += ["--detector", str(path)]
    p = subprocess.run(
        args,
        cwd=tmp_path,
        env={**_env(), "ADVISOR_PLUGIN_TIMEOUT": str(LIMIT_S)},
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)  # --json intact: no plugin's print, a closed stdout is its own
    # the outputs landed where they were asked for, whatever directory a plugin moved to
    assert (tmp_path / "o" / "report.html").is_file()
    assert json.loads((tmp_path / "o" / "findings.json").read_text())["errored"] == doc["errored"]
    errored = {e["id"]: e["error"] for e in doc["errored"]}
    for case, (_, message) in CASES.items():
        key = names[case] if case == "exits-at-import" else f"evil-{case}"
        if message is None:
            assert key not in errored, (case, errored.get(key))
            continue
        assert message in errored.get(key, ""), (case, errored)
        assert "\n" not in errored[key]
    assert [f["id"] for f in doc["findings"]].count("sync-point") == 1
    assert not any(f["id"].startswith("evil") for f in doc["findings"])


RANKS_PLUGIN = '''"""Counts the ranks of a job."""
from advisor.detect import Draft, across_ranks, comm_kernels, detector, register_threshold

register_threshold("rank_note.level", 1.0, "a level the note states")
comm_kernels("MyLib", r"^mylib_\\w*exchange")

def note(summary):
    return Draft(id="rank-note", title="A note on the job", est_savings_ms=0.0,
                 confidence="low", summary=summary, recommendation="r", snippet="", latent=True)

@detector("rank-note", "A note on the job")
def detect(trace, ctx):
    return [note(f"level {ctx.t('rank_note.level'):g}")]

@across_ranks("rank-note")
def check(drafts, digests, ctx):
    return list(drafts) + [note(f"{len(digests)} ranks")]
'''


def _analyze(target: Path, *extra: str) -> dict:
    p = subprocess.run(
        [sys.executable, "-m", "advisor", "analyze", str(target), "--json", *extra],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_what_a_plugin_registers_reaches_the_analysis(tmp_path: Path) -> None:
    """Its threshold (--set), its communication kernels (the loader's figures), its detector's
    docstring and its check across ranks, all learnt without importing it in the analysis."""
    from tests.mr_helpers import rank_builder, write_ranks
    from tests.tracebuilder import TraceBuilder

    plugin = tmp_path / "rank_note.py"
    plugin.write_text(RANKS_PLUGIN)
    (tmp_path / "job").mkdir()
    write_ranks(tmp_path / "job", {0: rank_builder(0), 1: rank_builder(1)})
    doc = _analyze(tmp_path / "job", "--detector", str(plugin), "--set", "rank_note.level=3")
    notes = sorted(f["summary"] for f in doc["findings"] if f["id"] == "rank-note")
    assert notes[0] == "2 ranks" and notes[1].startswith("level 3 "), notes
    assert doc["views"]["detectors"]["rank-note"]["doc"].startswith("Counts the ranks")
    assert not doc["errored"]

    b = TraceBuilder()
    for i in range(4):
        t0 = i * 10_000
        b.step(i + 1, t0, 10_000)
        op = b.op("aten::mm", t0 + 10, 60)
        b.launch(op, "cudaLaunchKernel", t0 + 20, 5, kernel="sgemm", gpu_ts=t0 + 100, gpu_dur=3000)
        op2 = b.op("mylib::exchange", t0 + 3100, 40)
        b.launch(
            op2,
            "cudaLaunchKernel",
            t0 + 3110,
            5,
            kernel="mylib_ring_exchange",
            gpu_ts=t0 + 3200,
            gpu_dur=5000,
            stream=20,
        )
    trace = b.write(tmp_path / "one.json")
    # the loader counts the plugin's kernels as communication: comm-overlap runs on them
    skipped = {s["id"] for s in _analyze(trace)["skipped"]}
    found = {f["id"] for f in _analyze(trace, "--detector", str(plugin))["findings"]}
    assert "comm-overlap" in skipped and "comm-overlap" in found
