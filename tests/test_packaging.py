"""The built wheel ships templates/ and the detectors (as ``advisor.detectors``, no top-level
``heuristics`` package) and works outside the repository."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from tests.conftest import HANG_S, REPO, SAMPLES


@pytest.mark.slow
def test_wheel_installs_and_runs(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(dist),
            str(REPO),
        ],
        check=True,
    )
    wheel = next(dist.glob("torch_advisor-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "advisor/templates/report.html.j2" in names
    assert "advisor/templates/diff.html.j2" in names
    assert "advisor/detectors/__init__.py" in names and "advisor/detectors/sync_point.py" in names
    assert "advisor/detectors/_ops.py" in names
    # nothing outside advisor/ but the dist-info: no top-level package another project may own
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"advisor"}
    assert not any("__pycache__" in n for n in names)
    assert not any(n.startswith("tests/") for n in names)
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
    )
    # dependencies come from this interpreter's site-packages; .pth files there (our editable
    # install) are not processed for PYTHONPATH entries, so the repository is not importable
    deps = sysconfig.get_paths()["purelib"]
    env = {**os.environ, "PYTHONPATH": f"{target}{os.pathsep}{deps}", "NO_COLOR": "1"}
    work = tmp_path / "cwd"
    work.mkdir()
    where = subprocess.run(
        [
            str(py),
            "-c",
            "import advisor.detectors as d; print(d.__file__);"
            " print(d.__path__); import heuristics",
        ],
        cwd=work,
        env=env,
        text=True,
        capture_output=True,
    )
    assert "No module named 'heuristics'" in where.stderr
    assert str(REPO) not in where.stdout and str(target) in where.stdout
    sample = sorted(SAMPLES.glob("*.json.gz"))
    if not sample:
        pytest.skip("no sample traces yet")
    out = subprocess.run(
        [str(py), "-m", "advisor", "inspect", str(sample[0])],
        cwd=work,
        env=env,
        text=True,
        capture_output=True,
    )
    assert out.returncode == 0, out.stderr
    assert "steps:" in out.stdout
    res = subprocess.run(
        [str(py), "-m", "advisor", "analyze", str(sample[0]), "--out", str(tmp_path / "o")],
        cwd=work,
        env=env,
        text=True,
        capture_output=True,
    )
    assert res.returncode == 0, res.stderr
    html = (tmp_path / "o" / "report.html").read_text()
    assert "<html" in html and "torch-advisor" in html
    page = tmp_path / "diff.html"
    res = subprocess.run(
        [str(py), "-m", "advisor", "diff", str(sample[0]), str(sample[0]), "--html", str(page)],
        cwd=work,
        env=env,
        text=True,
        capture_output=True,
    )
    assert res.returncode == 0, res.stderr
    assert "torch-advisor diff" in page.read_text()


def test_readme_starts_with_two_commands_and_ci_runs_the_test_one() -> None:
    text = (REPO / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)\n```", text, re.S)
    assert len(blocks) >= 2
    head = text.split("```bash")[0]
    assert head.strip().startswith("# torch-advisor") and len(head.strip().splitlines()) <= 2
    demo, tests = blocks[0].strip(), blocks[1].strip()
    assert "pip install torch==2.13.0" in demo and "advisor " in demo
    assert "pip install torch==2.13.0" in tests
    ci = (REPO / ".ci" / "run").read_text()
    assert tests in ci
    # no unpinned torch anywhere in the install commands
    for cmd in (demo, tests, ci):
        assert not re.search(r"pip install[^\n&]*\btorch\b(?!==)", cmd)


@pytest.mark.slow
def test_fresh_venv_without_torch_analyzes_the_sample(tmp_path: Path) -> None:
    """``pip install torch-advisor`` brings only what the analysis needs: in a fresh virtual
    environment (no torch, no TensorBoard, no Dask) ``advisor analyze`` runs on the sample, and
    ``advisor profile`` says in one line how to get torch."""
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
        + ["-w", str(dist), str(REPO)],
        check=True,
    )
    wheel = next(dist.glob("torch_advisor-*.whl"))
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["NO_COLOR"] = "1"
    inst = subprocess.run(
        [str(py), "-m", "pip", "install", "-q", str(wheel)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if inst.returncode != 0 and "No matching distribution" in inst.stderr:
        pytest.skip("no package index reachable: " + inst.stderr.strip().splitlines()[-1])
    assert inst.returncode == 0, inst.stderr[-2000:]
    missing = subprocess.run(
        [
            str(py),
            "-c",
            "import importlib.util as u; print([m for m in ('torch', 'tensorboard',"
            " 'dask', 'distributed') if u.find_spec(m)])",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert missing.stdout.strip() == "[]"
    advisor = env_dir / "bin" / "advisor"
    work = tmp_path / "cwd"
    work.mkdir()
    sample = SAMPLES / "resnet50_v100.kineto.json.gz"
    r = subprocess.run(
        [str(advisor), "analyze", str(sample), "--out", "demo"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "dataloader-stall" in r.stdout and (work / "demo" / "report.html").is_file()
    (work / "train.py").write_text("print('never runs')\n", encoding="utf-8")
    p = subprocess.run(
        [str(advisor), "profile", "train.py"], cwd=work, env=env, capture_output=True, text=True
    )
    assert p.returncode == 1 and "never runs" not in p.stdout
    (line,) = p.stderr.strip().splitlines()
    assert "torch is not installed" in line and "pip install torch" in line
