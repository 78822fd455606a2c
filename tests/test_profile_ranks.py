"""`advisor profile` under torchrun: per-rank files, rank 0's merged report, the output rule."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from advisor.errors import AdvisorError
from advisor.output.outfolder import check_out_dir
from advisor.profile.torchrun import RankEnv
from tests.conftest import HANG_S

DDP = textwrap.dedent("""
    import time
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    model = torch.nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(50):
        if rank == 1:
            time.sleep(0.03)  # the straggler
        loss = model(torch.randn(16, 32)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()
""")

LOOP = textwrap.dedent("""
    import torch
    m = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for _ in range(20):
        m(torch.randn(4, 8)).sum().backward()
        opt.step()
        opt.zero_grad()
""")

WINDOW = ["--wait", "1", "--warmup", "1", "--active", "3"]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["OMP_NUM_THREADS"] = "1"
    return env


def _torchrun(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        *args,
    ]
    return subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=HANG_S)


def _check_run(out: Path, p: subprocess.CompletedProcess[str]) -> dict:
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-3000:])
    names = sorted(x.name for x in out.iterdir())
    assert names == [
        "findings.json",
        "report.html",
        "run.rank0.json",
        "run.rank1.json",
        "trace.rank0.json.gz",
        "trace.rank1.json.gz",
    ], names
    d = json.loads((out / "findings.json").read_text())
    assert [r["rank"] for r in d["run"]["ranks"]] == [0, 1] and d["run"]["ranks_missing"] == []
    run1 = json.loads((out / "run.rank1.json").read_text())
    assert run1["distributed"]["rank"] == 1 and run1["trace"] == "trace.rank1.json.gz"
    return d


@pytest.mark.slow
def test_torchrun_module_form_merges_ranks(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    (tmp_path / "ddp.py").write_text(DDP)
    out = tmp_path / "out"
    p = _torchrun(tmp_path, "-m", "advisor", "profile", "--out", str(out), *WINDOW, "ddp.py")
    d = _check_run(out, p)
    (f,) = [f for f in d["findings"] if f["id"] == "straggler"]
    assert f["title"] == "Rank 1 holds the other ranks back"
    assert 20 <= f["est_savings_ms"] <= 45, f["est_savings_ms"]
    assert d["run"]["script"] == "ddp.py"
    assert "<h3>Ranks</h3>" in (out / "report.html").read_text()


@pytest.mark.slow
def test_torchrun_no_python_form(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    exe = shutil.which("advisor", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("no advisor console script next to this Python")
    (tmp_path / "ddp.py").write_text(DDP)
    out = tmp_path / "out"
    p = _torchrun(tmp_path, "--no-python", exe, "profile", "--out", str(out), *WINDOW, "ddp.py")
    _check_run(out, p)


@pytest.mark.slow
def test_missing_rank_is_reported_not_fatal(tmp_path: Path) -> None:
    # rank 0 of a world of 2 whose rank 1 never runs: rank 0 waits --rank-timeout, then reports
    pytest.importorskip("torch")
    (tmp_path / "loop.py").write_text(LOOP)
    out = tmp_path / "out"
    env = {**_env(), "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}
    t0 = time.monotonic()
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "advisor",
            "profile",
            "--out",
            str(out),
            "--rank-timeout",
            "1",
            *WINDOW,
            "loop.py",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert "waits up to 1 s for rank(s) 1" in p.stderr
    d = json.loads((out / "findings.json").read_text())
    assert d["run"]["ranks_missing"] == [1] and [r["rank"] for r in d["run"]["ranks"]] == [0]
    assert "No result from rank(s) 1 within 1 s" in p.stderr
    assert "No trace for 1 of 2 rank(s): 1." in (out / "report.html").read_text()
    assert time.monotonic() - t0 < 60


def test_out_dir_rule_ignores_this_launchs_rank_files(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "trace.rank1.json.gz").write_bytes(b"x")  # a fast rank of this launch
    (out / ".run.rank1.json.abc.tmp").write_bytes(b"")
    check_out_dir(out, False, RankEnv(0, 2, 0))  # accepted
    with pytest.raises(AdvisorError, match="not empty"):
        check_out_dir(out, False, None)  # a single run keeps the plain rule


def test_out_dir_rule_refuses_an_earlier_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    old = out / "trace.rank1.json.gz"
    old.write_bytes(b"x")
    os.utime(old, (time.time() - 3600 * 24, time.time() - 3600 * 24))
    with pytest.raises(AdvisorError, match="not empty"):
        check_out_dir(out, False, RankEnv(1, 2, 1))
    # --force replaces an earlier advisor run's rank files, never files advisor did not write
    with pytest.raises(AdvisorError, match="did not write"):
        check_out_dir(out, True, RankEnv(1, 2, 1))
    (out / "run.rank1.json").write_text(
        json.dumps({"advisor_version": "0", "end_reason": "x", "trace": "trace.rank1.json.gz"})
    )
    check_out_dir(out, True, RankEnv(1, 2, 1))
