"""advisor.on_trace_ready (a tensorboard_trace_handler with the advisor's report) and
advisor.capture, with the real CPU profiler."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import advisor  # noqa: E402
from advisor.errors import AdvisorError  # noqa: E402
from tests.conftest import steps_marked  # noqa: E402


def _model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def _train_step(model, opt) -> None:
    loss = model(torch.randn(16, 32)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()


def test_on_trace_ready_exports_like_tensorboard_and_reports(tmp_path: Path) -> None:
    from torch.profiler import ProfilerActivity, profile, schedule

    model, opt = _model()
    handler = advisor.on_trace_ready(tmp_path / "tb", worker_name="w0")
    with profile(
        activities=[ProfilerActivity.CPU],
        record_shapes=True,
        with_stack=True,
        schedule=schedule(wait=1, warmup=1, active=3, repeat=2),
        on_trace_ready=handler,
    ) as prof:
        for _ in range(10):
            _train_step(model, opt)
            prof.step()
    traces = sorted((tmp_path / "tb").glob("w0.*.pt.trace.json.gz"))
    assert len(traces) == 2 and handler.traces == traces  # one per completed window
    for t in traces:
        stem = t.name.removesuffix(".json.gz")
        data = json.loads((t.parent / f"{stem}.findings.json").read_text())
        assert steps_marked(data["run"]) == 3 and data["errored"] == []
        assert Path(data["run"]["trace"]) == t
        html = (t.parent / f"{stem}.report.html").read_text()
        assert "torch-advisor report" in html and "Top operators" in html
    assert len(handler.reports) == 2
    r = handler.reports[0]
    assert "aten::addmm" in set(r.ops["name"]) and r.run["argv"] is not None


def test_on_trace_ready_never_breaks_the_loop(tmp_path: Path, monkeypatch) -> None:
    from torch.profiler import ProfilerActivity, profile, schedule

    import advisor.analysis.pipeline

    def boom(*a, **k):
        raise AdvisorError("cannot analyse this")

    monkeypatch.setattr(advisor.analysis.pipeline, "analyze_trace", boom)
    model, opt = _model()
    handler = advisor.on_trace_ready(tmp_path)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with profile(
            activities=[ProfilerActivity.CPU],
            schedule=schedule(wait=0, warmup=1, active=2, repeat=1),
            on_trace_ready=handler,
        ) as prof:
            for _ in range(4):
                _train_step(model, opt)
                prof.step()
    assert [str(w.message) for w in seen if "torch-advisor" in str(w.message)] == [
        f"torch-advisor: {handler.traces[0]}: not analysed (cannot analyse this)"
    ]
    assert handler.traces[0].is_file() and handler.reports == []
    assert not list(tmp_path.glob("*.findings.json"))


def test_capture_writes_the_report_and_marks_optimizer_steps(tmp_path: Path) -> None:
    model, opt = _model()
    out = tmp_path / "cap"
    with advisor.capture(out=out) as cap:
        for _ in range(4):
            _train_step(model, opt)
    assert {p.name for p in out.iterdir()} >= {"trace.json.gz", "findings.json", "report.html"}
    assert cap.report is not None
    assert steps_marked(cap.report.run) == 4
    assert cap.report.run["script"]  # the live process's facts
    assert advisor._step_hook is None  # hooks removed
    with pytest.raises(AdvisorError, match="not empty"):  # never overwrites
        with advisor.capture(out=out):
            pass
    with advisor.capture(out=out, force=True) as again:
        _train_step(model, opt)
    assert again.report is not None


def test_capture_without_optimizer_uses_advisor_step(tmp_path: Path) -> None:
    model, _ = _model()
    with advisor.capture(out=tmp_path / "inf") as cap, torch.no_grad():
        for _ in range(3):
            model(torch.randn(64, 32))
            advisor.step()
    assert cap.report is not None
    assert steps_marked(cap.report.run) == 3


def test_capture_keeps_the_report_when_the_block_fails(tmp_path: Path) -> None:
    model, opt = _model()
    with pytest.raises(ZeroDivisionError):
        with advisor.capture(out=tmp_path / "err"):
            for _ in range(3):
                _train_step(model, opt)
            1 / 0  # noqa: B018
    assert (tmp_path / "err" / "report.html").is_file()
