"""The view-model (the template's whole input) against golden JSON, and the HTML built from it.

Regenerate the golden files after an intended change with
``ADVISOR_UPDATE_GOLDEN=1 pytest tests/test_report_viewmodel.py`` and review the diff.
"""

from __future__ import annotations

import dataclasses
import os
import re
from html.parser import HTMLParser

import orjson
import pytest

from advisor.findings import Evidence, Finding, Location
from advisor.output.html import render_html
from advisor.output.viewmodel import build_viewmodel, doc_blocks, inline
from tests.report_samples import EVIL, GOLDEN, gpu_builder, sample_report, with_run
from tests.tracebuilder import TraceBuilder

WHEN = "2026-01-02 03:04 UTC"


def _golden(name: str, vm: dict) -> None:
    path = GOLDEN / name
    data = orjson.dumps(vm, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
    if os.environ.get("ADVISOR_UPDATE_GOLDEN"):
        path.write_bytes(data)
    assert path.is_file(), f"missing golden file {path} (run with ADVISOR_UPDATE_GOLDEN=1)"
    assert orjson.loads(path.read_bytes()) == orjson.loads(data)


def _gpu_report():
    return sample_report(gpu_builder().load())


def test_golden_gpu_report():
    vm = build_viewmodel(
        _gpu_report(), generated_at=WHEN, annotated_trace="trace.annotated.json.gz"
    )
    _golden("viewmodel_gpu.json", vm)
    # the figures a person reads first, spelled out so a golden refresh cannot hide them
    h = vm["header"]
    assert h["command"] == "python train_example.py --epochs 1"
    assert h["device"] == "NVIDIA A100-SXM4-80GB · compute capability 8.0 · 80.0 GiB"
    assert h["versions"] == "torch 2.5.1 · CUDA 12.4"
    facts = {f["label"]: f["value"] for f in h["facts"]}
    assert facts == {
        "Steps captured": "3",
        "Median step": "1.00 ms",
        "GPU busy": "58.0%",
        "Host's own work": "100.0%",
        "Peak memory": "3.0 GiB",
        "Possible saving": "≤ 0.520 ms",
    }
    assert [c["id"] for c in vm["findings"]] == [
        "dataloader-stall",
        "sync-point",
        "tiny-kernels",
        "memory-headroom",
    ]
    sync = vm["findings"][1]
    assert sync["saving"] == {
        "ms": "0.200 ms/step",
        "pct": "20.0% of step",
        "range": "0.100 ms to 0.250 ms",
        "value": 0.2,
    }
    assert len(sync["evidence"]["rows"]) == 8 and sync["evidence"]["more"] == 2
    assert sync["evidence"]["rows"][0]["at"] == "+0.700 ms"
    hot = [ln for ln in sync["locations"][0]["code"] if ln["hot"]]
    assert hot[0]["no"] == 12 and "loss.item()" in hot[0]["text"]
    assert sync["locations"][1]["code"] is None  # file not found: location only
    assert [b["kind"] for b in sync["why"]] == ["p", "p", "list", "p"]
    assert vm["footer"]["errored"][0]["id"] == "gpu-idle"
    assert vm["charts"]["steps"]["legend"][0]["label"] == "GPU compute"
    assert len(vm["charts"]["savings"]["bars"]) == 3  # info finding has no bar


def test_golden_cpu_only_empty_report():
    b = TraceBuilder(cc=None)
    b.step(7, 0, 2000)
    b.op("aten::add", 100, 500)
    report = dataclasses.replace(sample_report(b.load(), run_ctx={}), findings=(), errored=())
    report = with_run(
        report, ended_early=True, end_reason="KeyboardInterrupt", est_savings_bound_ms=0.0
    )
    vm = build_viewmodel(report, generated_at=WHEN)
    _golden("viewmodel_cpu_empty.json", vm)
    notes = " ".join(n["text"] for n in vm["header"]["notes"])
    assert "ended early (KeyboardInterrupt)" in notes and "No GPU activity" in notes
    assert vm["header"]["device"] == "no GPU (CPU-only trace)"
    assert vm["charts"]["util"] is None and vm["charts"]["savings"] is None
    assert vm["charts"]["steps"]["legend"] == [
        {"label": "Host only (no GPU)", "cls": "c-host", "mean": "2.00 ms", "pct": "100.0%"}
    ]


def test_doc_blocks_paragraphs_lists_and_code():
    blocks = doc_blocks("Title line.\n\nWhy:\n- one `x`\n  two\n- three\nAfter.\n")
    assert blocks == [
        {"kind": "p", "parts": [{"text": "Title line.", "code": False}]},
        {"kind": "p", "parts": [{"text": "Why:", "code": False}]},
        {
            "kind": "list",
            "items": [
                [
                    {"text": "one ", "code": False},
                    {"text": "x", "code": True},
                    {"text": " two", "code": False},
                ],
                [{"text": "three", "code": False}],
            ],
        },
        {"kind": "p", "parts": [{"text": "After.", "code": False}]},
    ]
    assert doc_blocks("") == []
    assert inline("a `b` c") == [
        {"text": "a ", "code": False},
        {"text": "b", "code": True},
        {"text": " c", "code": False},
    ]


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):  # type: ignore[no-untyped-def]
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag in ("script", "style")

    def handle_endtag(self, tag):  # type: ignore[no-untyped-def]
        self._in_script = False

    def handle_data(self, data):  # type: ignore[no-untyped-def]
        if not self._in_script:
            self.text.append(data)


def _parse(html: str) -> _Tags:
    p = _Tags()
    p.feed(html)
    return p


def test_kernel_names_render_as_text_never_as_markup():
    trace = gpu_builder(kernel_name=EVIL).load()
    report = sample_report(trace)
    html = render_html(report, {"generated_at": WHEN})
    assert EVIL not in html and "<b>kernels</b>" not in html and "<b>starve" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    p = _parse(html)
    assert [t for t, _ in p.tags].count("script") == 1  # only the report's own script
    assert EVIL in "".join(p.text)  # and the name is readable as text


def test_no_external_resources():
    html = render_html(_gpu_report(), {"generated_at": WHEN})
    p = _parse(html)
    for tag, attrs in p.tags:
        if tag in (
            "script",
            "link",
            "img",
            "iframe",
            "source",
            "video",
            "audio",
            "embed",
            "object",
            "use",
            "image",
        ):
            for key in ("src", "href", "data", "xlink:href"):
                val = attrs.get(key) or ""
                assert not re.match(r"\s*(https?:)?//", val, re.I), (tag, key, val)
    assert "@import" not in html and "url(" not in html
    assert 'http-equiv="Content-Security-Policy"' in html
    # the Perfetto hint is text and a plain link, not a loaded resource
    links = [
        a.get("href") for t, a in p.tags if t == "a" and (a.get("href") or "").startswith("http")
    ]
    assert links == ["https://ui.perfetto.dev"]


def test_readable_without_javascript():
    html = render_html(
        _gpu_report(), {"generated_at": WHEN, "annotated_trace": "trace.annotated.json.gz"}
    )
    body = re.sub(r"<script>.*?</script>", "", html, flags=re.S)
    text = " ".join(_parse(body).text)
    for needle in (
        "Steps wait on the DataLoader",
        "Host waits on the device",
        "Evidence",
        "host waits for the GPU here",
        "if step % 100 == 0:",
        "Why this costs time",
        "the GPU stays busy once the host stops waiting",
        "ui.perfetto.dev",
        "chrome://tracing",
        "trace.annotated.json.gz",
        "ZeroDivisionError",
        "no input shapes in this trace",
        "rank.high_pct",
        "0.0.0-test",
    ):
        assert needle in text, needle
    # the JS-only controls start hidden; the findings start open
    assert re.search(r'<button type="button" class="copy" data-copy="fix-1" hidden>', html)
    assert html.count('<details class="card') == html.count("open>\n    <summary>") == 4


def test_fifty_findings_with_huge_evidence_stay_under_3_mb():
    report = _gpu_report()
    base = report.findings[1]
    long = (
        "void cutlass::Kernel<"
        + "cutlass_80_tensorop_s1688gemm_256x128_32x3_nn_align4, " * 20
        + ">"
    )
    many = tuple(
        base.with_(
            title=f"finding {i}",
            evidence=tuple(Evidence(f"{long} #{j}", j, 1.5, 1e15 + j) for j in range(500)),
            locations=tuple(Location(f"/src/mod{i}.py", j, "f", 1) for j in range(50)),
            summary="s" * 2000,
            snippet="x = 1\n" * 200,
        )
        for i in range(50)
    )
    big = dataclasses.replace(report, findings=many)
    html = render_html(big, {"generated_at": WHEN})
    assert len(html.encode()) < 3 * 1024 * 1024
    assert html.count('class="what"') == 50 * 8  # evidence capped per finding


def test_bytes_and_edge_values_format():
    from advisor.units import fmt_bytes

    assert fmt_bytes(None) is None and fmt_bytes(512) == "512 B" and fmt_bytes(3 << 30) == "3.0 GiB"
    f = Finding("x", "t", "low", 0.5, 1.0, "low", "s", "r", "", est_savings_range_ms=None)
    vm = build_viewmodel(dataclasses.replace(_gpu_report(), findings=(f,)), generated_at=WHEN)
    assert vm["findings"][0]["saving"]["range"] is None
    assert vm["findings"][0]["why"] == [] and vm["findings"][0]["where"] == ""


@pytest.mark.parametrize("steps", [1, 40, 300])
def test_step_chart_scales_to_many_steps(steps):
    b = TraceBuilder()
    for i in range(steps):
        b.step(i, i * 100, 100)
        op = b.op("aten::mm", i * 100, 10)
        b.launch(
            op, "cudaLaunchKernel", i * 100 + 1, 5, kernel="k", gpu_ts=i * 100 + 10, gpu_dur=50
        )
    vm = build_viewmodel(sample_report(b.load()), generated_at=WHEN)
    chart = vm["charts"]["steps"]
    assert len(chart["bars"]) == steps
    assert sum(1 for bar in chart["bars"] if bar["label"]) <= 17
    right = max(s["x"] + s["w"] for bar in chart["bars"] for s in bar["segments"])
    assert right <= chart["left"] + chart["plot_w"] + 0.01
