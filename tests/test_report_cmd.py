"""``advisor report RUN_DIR|findings.json``: re-render without re-running."""

from __future__ import annotations

import orjson
from typer.testing import CliRunner

from advisor.analysis.pipeline import write_outputs
from advisor.cli.app import app
from advisor.runfacts import RankRow, Ranks
from tests.report_samples import gpu_builder, sample_report, with_run

runner = CliRunner()


def _run_dir(tmp_path):
    src = gpu_builder().write(tmp_path / "trace.json.gz")
    report = sample_report(gpu_builder().load())
    report = with_run(report, trace=str(src))
    out = tmp_path / "run"
    write_outputs(report, out)
    return out


def test_rerender_from_the_run_folder_and_from_findings_json(tmp_path):
    out = _run_dir(tmp_path)
    (out / "report.html").unlink()
    res = runner.invoke(app, ["report", str(out)])
    assert res.exit_code == 0, res.output
    html = (out / "report.html").read_text()
    assert "Steps wait on the DataLoader" in html and "host waits for the GPU here" in html
    assert "trace.annotated.json.gz" in html  # found next to findings.json
    assert "analysis" not in res.output and f"report: {out / 'report.html'}" in res.output
    other = tmp_path / "elsewhere" / "r.html"
    other.parent.mkdir()
    res = runner.invoke(
        app, ["report", str(out / "findings.json"), "--out", str(other), "--no-source"]
    )
    assert res.exit_code == 0, res.output
    html2 = other.read_text()
    assert "host waits for the GPU here" not in html2 and "train_example.py:12" in html2
    assert "../run/trace.annotated.json.gz" in html2  # a path that works from the new place


def test_rerender_needs_no_trace_and_no_source_files(tmp_path):
    out = _run_dir(tmp_path)
    (tmp_path / "trace.json.gz").unlink()
    (out / "trace.annotated.json.gz").unlink()
    res = runner.invoke(app, ["report", str(out), "--out", str(tmp_path / "x.html")])
    assert res.exit_code == 0, res.output
    html = (tmp_path / "x.html").read_text()
    assert "host waits for the GPU here" in html  # the snippets were saved in findings.json
    assert "Where the time went" in html and "c-compute" in html  # charts from saved views


def test_old_findings_json_without_views_still_renders(tmp_path):
    out = _run_dir(tmp_path)
    data = orjson.loads((out / "findings.json").read_bytes())
    data.pop("views")
    (out / "findings.json").write_bytes(orjson.dumps(data))
    res = runner.invoke(app, ["report", str(out)])
    assert res.exit_code == 0, res.output
    assert "Steps wait on the DataLoader" in (out / "report.html").read_text()


def test_errors_are_one_line(tmp_path):
    from advisor.cli.app import main

    def run(argv):
        import contextlib
        import io

        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            try:
                main(argv)
            except SystemExit as e:
                return e.code, err.getvalue()
        return 0, err.getvalue()

    code, msg = run(["report", str(tmp_path)])
    assert code == 1 and "no findings.json here" in msg and msg.count("\n") == 1
    bad = tmp_path / "findings.json"
    bad.write_text("{not json")
    code, msg = run(["report", str(bad)])
    assert code == 1 and "not valid JSON" in msg
    bad.write_text('{"a": 1}')
    code, msg = run(["report", str(bad)])
    assert code == 1 and "not a torch-advisor findings.json" in msg


def test_open_flag_opens_the_written_file(tmp_path, monkeypatch):
    import webbrowser

    out = _run_dir(tmp_path)
    opened = []
    monkeypatch.setattr(webbrowser, "open", lambda url: opened.append(url) or True)
    res = runner.invoke(app, ["report", str(out), "--open"])
    assert res.exit_code == 0, res.output
    assert opened == [(out / "report.html").resolve().as_uri()]


def test_analyze_no_source_keeps_code_out_of_both_files(tmp_path):
    import json

    from tests.report_samples import GOLDEN

    b = gpu_builder()
    b.frame(str(GOLDEN / "train_example.py"), 12, "train", 300, 100)
    src = b.write(tmp_path / "trace.json.gz")
    for flag, expect in (([], True), (["--no-source"], False)):
        out = tmp_path / f"run{len(flag)}"
        res = runner.invoke(app, ["analyze", str(src), "--out", str(out), *flag])
        assert res.exit_code == 0, res.output
        data = json.loads((out / "findings.json").read_text())
        assert ("sources" in data["views"]) is expect
        assert (out / "trace.annotated.json.gz").is_file()
        assert "median step 1.00 ms" in res.output


def test_ranks_table_rendered_when_present(tmp_path):
    from advisor.output.html import render_html

    rows = (
        RankRow(0, "trace.rank0.json.gz", 5, step_ms_median=10.0, gpu_busy_pct=80.0, comm_pct=12.5),
        RankRow(1, "trace.rank1.json.gz", 5, step_ms_median=14.0, gpu_busy_pct=None, comm_pct=3.0),
    )
    report = with_run(sample_report(gpu_builder().load()), ranks=Ranks(ranks=rows))
    html = render_html(report, {"generated_at": "x"})
    assert "<h3>Ranks</h3>" in html and "14.00 ms" in html and "12.5%" in html
