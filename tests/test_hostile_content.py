"""User-controlled text (op and kernel names, file paths, script and arguments) in the outputs.

End to end through ``advisor analyze``: the report shows the hostile strings as text only (no
new tags, attributes or scripts), loads nothing over http(s), and findings.json keeps them
verbatim.
"""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from advisor.cli.app import main
from tests.tracebuilder import TraceBuilder

EVIL = "<script>alert(1)</script>"
ATTR = "\"><img src=x onerror=alert(2)>'"
AMP = "a&b &amp; &lt;c&gt;"


class _Html(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _evil_trace(tmp_path: Path) -> Path:
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.step(2, 1000, 1000)
    evil_file = f"/home/me/{EVIL}{ATTR}/tr&ain.py"
    for s in (0, 1000):
        top = b.frame(evil_file, 42, f"loop_{AMP}", s, 900)
        b.annotation("Optimizer.zero_grad#SGD.zero_grad", s + 10, 200)
        z = b.op("aten::zero_", s + 20, 100)
        b.launch(
            z,
            "cudaLaunchKernel",
            s + 30,
            5,
            kernel=f"void fill<{EVIL}{ATTR}{AMP}>()",
            gpu_ts=s + 300,
            gpu_dur=50,
        )
        b.frame(f"/home/me/{EVIL}{ATTR}/mo&del.py", 7, f"forward{ATTR}", s + 20, 100, parent=top)
    d = tmp_path / f"run {EVIL[:7]}&'\""
    d.mkdir()
    path = b.write(d / f"t{AMP}.json")
    (d / "run.json").write_text(
        json.dumps(
            {
                "script": f"/home/me/{EVIL}/train.py",
                "argv": ["--name", ATTR, AMP, EVIL],
                "torch": "2.13.0",
            }
        )
    )
    return path


def test_hostile_strings_are_text_in_the_report_and_verbatim_in_findings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _evil_trace(tmp_path)
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as ei:
        main(["analyze", str(trace), "--out", str(out)])
    assert ei.value.code == 0, capsys.readouterr().err
    html = (out / "report.html").read_text(encoding="utf-8")
    assert (
        EVIL not in html
        and "<img" not in html
        and "onerror=alert" not in html.replace("onerror=alert(2)&gt;", "")
    )
    p = _Html()
    p.feed(html)
    assert [t for t, _ in p.tags].count("script") == 1  # the report's own script only
    assert not [t for t, _ in p.tags if t in ("img", "iframe", "object", "embed")]
    for tag, attrs in p.tags:
        for key, val in attrs.items():
            assert not key.startswith("on"), (tag, key)  # no event handler attributes
            v = (val or "").strip().lower()
            assert not v.startswith("javascript:"), (tag, key, val)
            if tag != "a":  # the one plain link to ui.perfetto.dev is not a loaded resource
                assert not v.startswith(("http:", "https:", "//")), (tag, key, val)
    text = "".join(p.text)
    assert f"/home/me/{EVIL}/train.py" in text  # the script path, readable as text
    assert ATTR in text and AMP in text
    # findings.json keeps the strings verbatim (valid JSON, nothing escaped away)
    doc = json.loads((out / "findings.json").read_text(encoding="utf-8"))
    assert doc["run"]["argv"] == ["--name", ATTR, AMP, EVIL]
    assert doc["run"]["trace"] == str(trace)
    (zero,) = [f for f in doc["findings"] if f["id"] == "zero-grad-not-none"]
    assert zero["locations"][0]["file"] == f"/home/me/{EVIL}{ATTR}/mo&del.py"
    assert zero["locations"][0]["function"] == f"forward{ATTR}"
    shown = text + "".join(v or "" for _, a in p.tags for v in a.values())
    assert f"/home/me/{EVIL}{ATTR}/mo&del.py" in shown  # the source location, as plain text
    assert "mo&del.py:7" in text


def test_names_do_not_break_the_terminal_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _evil_trace(tmp_path)
    with pytest.raises(SystemExit):
        main(["analyze", str(trace), "--out", str(tmp_path / "o")])
    out = capsys.readouterr().out
    assert "Traceback" not in out
    with pytest.raises(SystemExit) as ei:
        main(["inspect", str(trace)])
    assert ei.value.code in (0, None)
    assert EVIL in capsys.readouterr().out  # printed verbatim, never interpreted as markup
