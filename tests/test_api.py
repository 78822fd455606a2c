"""The Python API (advisor.analyze -> Report) and the example notebook, whose code cells run here
in order, as Jupyter would run them (nbclient is not needed)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import advisor
from advisor.api import FINDING_COLUMNS, KERNEL_COLUMNS, OP_COLUMNS, STEP_COLUMNS
from advisor.errors import AdvisorError
from tests.conftest import REPO, SAMPLES
from tests.mr_helpers import rank_builder, write_ranks
from tests.report_samples import EVIL, gpu_builder

GPU_SAMPLE = SAMPLES / "resnet50_v100.kineto.json.gz"
NOTEBOOK = REPO / "examples" / "notebook.ipynb"


@pytest.fixture(scope="module")
def resnet() -> advisor.Report:
    return advisor.analyze(GPU_SAMPLE)


def test_import_stays_light() -> None:
    code = (
        "import sys, advisor; advisor.step; "
        "print(sorted(m for m in ('torch', 'pandas', 'typer') if m in sys.modules))"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert p.stdout.strip() == "[]"


def test_findings_frame_matches_findings_json(resnet: advisor.Report) -> None:
    df = resnet.findings
    assert tuple(df.columns) == FINDING_COLUMNS
    data = json.loads(resnet.to_json())
    assert list(df["id"]) == [f["id"] for f in data["findings"]]
    assert list(df["rank"]) == list(range(1, len(df) + 1))
    assert df["est_savings_ms"].is_monotonic_decreasing or df["severity"].iloc[-1] == "info"
    top = df.iloc[0]
    assert top["id"] == "dataloader-stall" and top["severity"] == "high"
    assert top["location"] == "resnet50_profiler_api.py:42"
    assert {"fp32-matmul", "blocking-copy", "single-tensor-optimizer"} <= set(df["id"])


def test_steps_kernels_ops_frames(resnet: advisor.Report) -> None:
    st, k, ops = resnet.steps, resnet.kernels, resnet.ops
    assert tuple(st.columns) == STEP_COLUMNS and list(st["step"]) == [5, 6, 7, 8, 9, 10]
    parts = st[["compute_ms", "communication_ms", "memcpy_ms", "dataloader_ms", "idle_ms"]]
    assert ((parts.sum(axis=1) - st["total_ms"]).abs() < 0.05).all()
    assert tuple(k.columns) == KERNEL_COLUMNS and tuple(ops.columns) == OP_COLUMNS
    assert k["total_ms"].is_monotonic_decreasing and k["share_pct"].sum() <= 100.01
    assert k.iloc[0]["name"].startswith("void cudnn::detail::dgrad_engine")
    assert k.iloc[0]["op"] == "aten::cudnn_convolution_backward_input"
    assert "aten::cudnn_convolution" in set(ops["name"])
    assert resnet.ranks.empty and resnet.run["device"] == "Tesla V100-DGXS-32GB"


def test_repr_html_escapes_and_ranks(tmp_path: Path) -> None:
    from tests.report_samples import sample_report

    r = advisor.Report(sample_report(gpu_builder(kernel_name=EVIL).load()))
    page = r._repr_html_()
    assert EVIL not in page and "&lt;script&gt;" in page
    assert page.count("<tr>") == len(r.raw.findings) + 1
    assert "advisor.Report" in repr(r)


def test_to_html_never_overwrites(resnet: advisor.Report, tmp_path: Path) -> None:
    p = resnet.to_html(tmp_path)
    assert p == tmp_path / "report.html" and "Top kernels" in p.read_text()
    with pytest.raises(AdvisorError, match="exists"):
        resnet.to_html(p)
    mine = tmp_path / "mine.html"
    mine.write_text("my notes")
    with pytest.raises(AdvisorError):
        resnet.to_html(mine)
    assert mine.read_text() == "my notes"
    assert resnet.to_html(mine, force=True) == mine and "<html" in mine.read_text()


def test_options_and_bad_input(tmp_path: Path) -> None:
    # dataloader-stall saves ~34% of the step: high by default, medium once "high" needs 50%
    r = advisor.analyze(GPU_SAMPLE, only=["dataloader-stall"], thresholds={"rank.high_pct": 50})
    assert list(r.findings["id"]) == ["dataloader-stall"] and r.findings["severity"][0] == "medium"
    with pytest.raises(AdvisorError, match="unknown finding id"):
        advisor.analyze(GPU_SAMPLE, only=["no-such-check"])
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(AdvisorError, match="bad.json"):
        advisor.analyze(bad)


def test_rank_folder_gives_ranks_frame(tmp_path: Path) -> None:
    write_ranks(
        tmp_path,
        {
            0: rank_builder(0, arrive_us=3_000, sync=True),
            1: rank_builder(1, arrive_us=8_000, sync=True),
        },
    )
    r = advisor.analyze(tmp_path, jobs=1)
    assert list(r.ranks["rank"]) == [0, 1] and r.findings["id"][0] == "straggler"


def test_notebook_cells_run_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nb = json.loads(NOTEBOOK.read_text())
    assert nb["nbformat"] == 4
    cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    assert len(cells) >= 6
    monkeypatch.chdir(NOTEBOOK.parent)  # Jupyter runs a notebook in its own folder
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    ns: dict[str, object] = {"__name__": "__main__"}
    before = sorted(os.listdir(NOTEBOOK.parent))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for i, src in enumerate(cells):
            exec(compile(src, f"notebook cell {i}", "exec"), ns)  # noqa: S102
    assert sorted(os.listdir(NOTEBOOK.parent)) == before  # nothing written beside it
    r, cap = ns["r"], ns["cap"]
    assert isinstance(r, advisor.Report) and isinstance(cap.report, advisor.Report)  # type: ignore[attr-defined]
    assert "Training loop waits for the DataLoader" in out.getvalue()
    assert Path(str(ns["path"])).is_file()
    assert cap.report.run["steps_profiled"] >= 3  # type: ignore[attr-defined]
