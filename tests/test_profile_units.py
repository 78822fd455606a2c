"""Fast tests of the ``advisor profile`` pieces that need no profiler: running a script like
``python`` does, exit codes, the output-folder rules, notes, and the analysis fallback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from advisor.errors import AdvisorError
from advisor.output.outfiles import write_json
from advisor.output.outfolder import check_out_dir, default_out_dir
from advisor.profile.execute import Target, resolve_target, run_target

REPO = Path(__file__).resolve().parent.parent


def _script(tmp_path: Path, body: str, name: str = "s.py") -> Path:
    p = tmp_path / name
    p.write_text(body, encoding="utf-8")
    return p


def test_script_runs_as_main_and_state_is_restored(tmp_path: Path) -> None:
    _script(tmp_path, "X = 3\n", "sib.py")
    s = _script(
        tmp_path,
        (
            "import sys, os\nfrom sib import X\n"
            "RESULT.update(name=__name__, argv=list(sys.argv), path0=sys.path[0], file=__file__, x=X)\n"
            "os.chdir(os.path.dirname(__file__))\n"
        ),
    )
    result: dict[str, object] = {}
    import builtins

    builtins.RESULT = result  # type: ignore[attr-defined]
    argv, path, cwd, main = list(sys.argv), list(sys.path), os.getcwd(), sys.modules["__main__"]
    try:
        out = run_target(Target("script", os.path.relpath(s), ("--lr", "0.1")))
    finally:
        del builtins.RESULT  # type: ignore[attr-defined]
    assert out.end_reason == "completed" and out.exit_code == 0
    assert result == {
        "name": "__main__",
        "argv": [os.path.relpath(s), "--lr", "0.1"],
        "path0": str(tmp_path),
        "file": str(s),
        "x": 3,
    }
    assert (sys.argv, sys.path, os.getcwd(), sys.modules["__main__"]) == (argv, path, cwd, main)


@pytest.mark.parametrize(
    ("body", "reason", "code"),
    [
        ("import sys; sys.exit(4)", "sys-exit", 4),
        ("import sys; sys.exit()", "sys-exit", 0),
        ("import sys; sys.exit('bye')", "sys-exit", 1),
        ("raise KeyboardInterrupt", "keyboard-interrupt", 130),
        ("raise RuntimeError('no')", "exception", 1),
        ("x = 1", "completed", 0),
    ],
)
def test_exit_codes(
    tmp_path: Path, body: str, reason: str, code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run_target(Target("script", str(_script(tmp_path, body + "\n")), ()))
    assert (out.end_reason, out.exit_code) == (reason, code)
    err = capsys.readouterr().err
    if reason == "exception":
        assert err.startswith("Traceback (most recent call last):\n  File ")
        assert "advisor" not in err and err.rstrip().endswith("RuntimeError: no")
        assert out.error == "RuntimeError: no" and out.ended_early
    if body.endswith("('bye')"):
        assert err == "bye\n"


def test_resolve_target_errors(tmp_path: Path) -> None:
    with pytest.raises(AdvisorError, match="no such script"):
        resolve_target(str(tmp_path / "nope.py"), [], module=False)
    with pytest.raises(AdvisorError, match="no module named"):
        resolve_target("surely_not_a_module_xyz", [], module=True)
    assert resolve_target("json.tool", ["-h"], module=True).stem == "json.tool"


def test_out_dir_rules(tmp_path: Path) -> None:
    a = default_out_dir("train", tmp_path)
    assert a.parent == tmp_path / "advisor-runs" and a.name.startswith("train-")
    a.mkdir(parents=True)
    assert default_out_dir("train", tmp_path).name == a.name + "-2"
    check_out_dir(a, force=False)  # empty: fine
    (a / "mine.txt").write_text("x")
    with pytest.raises(AdvisorError, match="not empty"):
        check_out_dir(a, force=False)
    check_out_dir(a, force=True)  # only unrelated files: --force may add ours beside them
    (a / "report.html").write_text("<html>my own page</html>")
    with pytest.raises(AdvisorError, match="report.html, which advisor did not write"):
        check_out_dir(a, force=True)
    (a / "report.html").write_text("<!DOCTYPE html><title>torch-advisor report</title>")
    with pytest.raises(AdvisorError, match="report.html, which advisor did not write"):
        check_out_dir(a, force=True)  # mentioning torch-advisor does not make it ours
    (a / "report.html").write_text(
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n'
        '<meta name="generator" content="torch-advisor 0.1">\n'
    )
    write_json(
        a / "run.json",
        {
            "advisor_version": "0",
            "end_reason": "completed",
            "trace": "trace.json.gz",
            "x": float("nan"),
        },
    )
    (a / "trace.json.gz").write_bytes(b"")
    (a / ".findings.json.x1y2.tmp").write_bytes(b"{")  # left by a killed run
    assert json.loads((a / "run.json").read_text())["x"] is None  # strict JSON
    check_out_dir(a, force=True)  # the earlier run's outputs go before the script runs
    assert sorted(os.listdir(a)) == ["mine.txt"]
    f = tmp_path / "file"
    f.write_text("")
    with pytest.raises(AdvisorError, match="not a directory"):
        check_out_dir(f, force=True)


def test_analysis_without_trace_still_writes_valid_outputs(tmp_path: Path) -> None:
    from advisor.profile.analysis import _analyze_and_write

    write_json(
        tmp_path / "run.json",
        {
            "script": "t.py",
            "argv": [],
            "ended_early": True,
            "end_reason": "sigterm",
            "notes": ["No trace."],
        },
    )
    report, written, _ = _analyze_and_write(
        tmp_path, tmp_path / "trace.json.gz", tmp_path / "run.json"
    )
    doc = json.loads(written["findings"].read_text())
    assert doc["schema_version"] == 1 and doc["findings"] == [] and doc["run"]["ended_early"]
    assert "No trace." in written["report"].read_text()


def test_help_does_not_import_torch() -> None:
    code = (
        "import sys\nfrom advisor.cli.app import main\ntry:\n    main(['profile', '--help'])\n"
        "except SystemExit:\n    pass\nassert 'torch' not in sys.modules, 'torch imported'\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "--run-to-end" in p.stdout and "SCRIPT_ARGS" in p.stdout


def test_allocator_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from advisor.settings import allocator_env

    for k in (
        "PYTORCH_CUDA_ALLOC_CONF",
        "PYTORCH_HIP_ALLOC_CONF",
        "PYTORCH_ALLOC_CONF",
        "PYTORCH_NO_CUDA_MEMORY_CACHING",
        "PYTORCH_NO_HIP_MEMORY_CACHING",
    ):
        monkeypatch.delenv(k, raising=False)
    assert allocator_env() == {
        "alloc_conf": None,
        "caching_disabled": False,
        "no_memory_caching_env": None,
    }
    monkeypatch.setenv("PYTORCH_HIP_ALLOC_CONF", "expandable_segments:True")
    monkeypatch.setenv("PYTORCH_NO_CUDA_MEMORY_CACHING", "0")  # "0" leaves the pool on
    env = allocator_env()
    assert env["alloc_conf"] == "expandable_segments:True" and env["caching_disabled"] is False
    assert env["no_memory_caching_env"] == "0"
    monkeypatch.delenv("PYTORCH_NO_CUDA_MEMORY_CACHING")
    monkeypatch.setenv("PYTORCH_NO_HIP_MEMORY_CACHING", "1")
    assert allocator_env()["caching_disabled"] is True
