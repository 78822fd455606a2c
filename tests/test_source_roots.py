"""Issue 20 case 5: a hostile trace cannot copy local files into report.html or findings.json.

Stack frames of a downloaded trace name an absolute ``.py`` outside every root, a ``../``
relative one, and a ``.py`` symlink shipped beside the trace that points at a secret; the
analysis (a real ``advisor analyze`` process) shows none of them, says that code was withheld,
and ``--source-root`` opts a folder in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import HANG_S
from tests.test_profile import _env
from tests.tracebuilder import TraceBuilder


def _hostile(tmp: Path) -> tuple[Path, Path]:
    secret = tmp / "secret"
    secret.mkdir()
    (secret / "creds.txt").write_text("SECRET_CREDS\n" * 20)
    (secret / "keys.py").write_text("SECRET_ABS\n" * 20)
    (secret / "rel.py").write_text("SECRET_REL\n" * 20)
    dl = tmp / "download"
    dl.mkdir()
    os.symlink(secret / "creds.txt", dl / "link.py")  # shipped beside the trace
    (tmp / "work").mkdir()
    b = TraceBuilder()
    files = [str(secret / "keys.py"), "../secret/rel.py", "link.py"]
    for i, f in enumerate(files):
        s = i * 1000
        b.step(i + 1, s, 1000)
        b.frame(f, 5, "train", s, 900)
        b.annotation("Optimizer.zero_grad#SGD.zero_grad", s + 10, 200)
        z = b.op("aten::zero_", s + 20, 100)
        b.launch(z, "cudaLaunchKernel", s + 30, 5, kernel="fill", gpu_ts=s + 300, gpu_dur=50)
    return b.write(dl / "trace.json"), secret


def _analyze(cwd: Path, *args: str | Path) -> tuple[str, dict]:  # type: ignore[type-arg]
    p = subprocess.run(
        [sys.executable, "-m", "advisor", "analyze", *map(str, args)],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert p.returncode == 0, p.stderr
    out = cwd / "o"
    return (out / "report.html").read_text(), json.loads((out / "findings.json").read_text())


def test_hostile_frames_read_no_local_files(tmp_path: Path) -> None:
    trace, secret = _hostile(tmp_path)
    work = tmp_path / "work"
    html, findings = _analyze(work, trace, "--out", "o")
    text = html + json.dumps(findings)
    assert "SECRET_" not in text
    assert findings["views"]["sources"] == {}
    assert sorted(findings["views"]["sources_withheld"]) == sorted(
        [str(secret / "keys.py"), "../secret/rel.py", "link.py"]
    )
    assert "Source code withheld from 3 files" in html
    # --source-root opts a folder in: its regular files are shown (a symlink into it is not)
    html, findings = _analyze(work, trace, "--out", "o", "--force", "--source-root", secret)
    assert "SECRET_ABS" in html and "SECRET_REL" in html and "SECRET_CREDS" not in html
    assert "sources_withheld" not in findings["views"]  # link.py is not a .py file really


def _secret_trace(tmp: Path, where: Path) -> tuple[Path, Path]:
    """A trace whose frames name ``secret.py`` (absolute) under ``where``."""
    where.mkdir(parents=True, exist_ok=True)
    secret = where / "secret.py"
    secret.write_text("LEAKED_SECRET = 1\n" * 20)
    b = TraceBuilder()
    for i in range(3):
        s = i * 1000
        b.step(i + 1, s, 1000)
        b.frame(str(secret), 5, "train", s, 900)
        b.annotation("Optimizer.zero_grad#SGD.zero_grad", s + 10, 200)
        z = b.op("aten::zero_", s + 20, 100)
        b.launch(z, "cudaLaunchKernel", s + 30, 5, kernel="fill", gpu_ts=s + 300, gpu_dur=50)
    run = tmp / "their-run"
    run.mkdir()
    return b.write(run / "trace.json"), secret


def test_a_run_json_never_widens_the_roots(tmp_path: Path) -> None:
    """Issue 31 item 1: run.json of a run folder someone sent says the script was /x.py run
    from /: the secret its frames name is withheld all the same, and listed."""
    trace, secret = _secret_trace(tmp_path, tmp_path / "elsewhere")
    (trace.parent / "run.json").write_text(json.dumps({"script": "/x.py", "cwd": "/"}))
    work = tmp_path / "work"
    work.mkdir()
    html, findings = _analyze(work, trace.parent, "--out", "o")
    assert "LEAKED_SECRET" not in html + json.dumps(findings)
    assert findings["views"]["sources_withheld"] == [str(secret)]


def test_the_home_folder_or_root_is_no_default_root(tmp_path: Path) -> None:
    """Run from the home folder itself (or /), the current folder is no root: a trace naming a
    .py under it shows no code; --source-root opts a folder in."""
    home = tmp_path / "home"
    trace, secret = _secret_trace(tmp_path, home / "project")
    for cwd in (home, Path("/")):
        p = subprocess.run(
            [sys.executable, "-m", "advisor", "analyze", str(trace), "--out", str(tmp_path / "o")]
            + ["--force"],
            cwd=cwd,
            env={**_env(), "HOME": str(home)},
            capture_output=True,
            text=True,
            timeout=HANG_S,
        )
        assert p.returncode == 0, p.stderr
        findings = json.loads((tmp_path / "o" / "findings.json").read_text())
        assert "LEAKED_SECRET" not in json.dumps(findings), cwd
        assert findings["views"]["sources_withheld"] == [str(secret)]
    # a folder below home is a root when it is the current folder
    _, findings = _analyze(home / "project", trace, "--out", "o")
    assert "LEAKED_SECRET" in json.dumps(findings["views"]["sources"])


def test_a_live_profile_reads_its_scripts_folder(tmp_path: Path) -> None:
    """``advisor profile`` run from one folder on a script in another: the report shows the
    script's code (the live run names its folder); the same run folder analyzed later from
    elsewhere withholds it and lists it (its run.json names the folder, but adds no root)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    script = (Path(__file__).parent.parent / "examples" / "zero_grad.py").read_text()
    (tmp_path / "b" / "zero_grad.py").write_text(script)
    p = subprocess.run(
        [sys.executable, "-m", "advisor", "profile", "--wait", "1", "--warmup", "1"]
        + ["--active", "3", "--out", "o", "../b/zero_grad.py", "--steps", "8"],
        cwd=tmp_path / "a",
        env=_env(),
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert p.returncode == 0, p.stderr
    live = json.loads((tmp_path / "a" / "o" / "findings.json").read_text())
    shown = [k for k in live["views"]["sources"] if "zero_grad.py" in k]
    assert shown and "opt.zero_grad(set_to_none=False)" in json.dumps(live["views"]["sources"])
    (tmp_path / "c").mkdir()  # a folder beside both: the script's folder is no root from here
    _, later = _analyze(tmp_path / "c", tmp_path / "a" / "o", "--out", "o")
    assert "zero_grad.py" not in json.dumps(later["views"].get("sources", {}))
    assert str(tmp_path / "b" / "zero_grad.py") in later["views"]["sources_withheld"]
