"""report.html and try.html on a phone (390 px) and a desktop (1400 px) in real headless
Chromium, checked by the geometry of the elements on screen (screenshots kept with
``ADVISOR_SCREENSHOTS=DIR``): every finding's saving is visible without sideways scrolling (the
table's Saving column and the chart's values), nothing is cut (bar labels, the kernel table's
Cause, try.html's last column), no code lies under a Copy button, the tables stay within the text
column at 1400 px, the Checks show no raw backticks, no "0.00 us" and one date format."""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import pytest

from advisor.analysis.pipeline import write_outputs
from advisor.report import Skipped
from advisor.runfacts import Phase, PhaseWindow
from tests.report_browser import Browser, find_chromium
from tests.report_samples import gpu_builder, sample_report

pytestmark = pytest.mark.slow

WIDTHS = (390, 1400)
LONG_TITLE = "Communication not hidden under computation on every rank of this job"
LONG_LINE = "optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)  # " + "x" * 60

GEOMETRY_JS = """(() => {
  const vw = window.innerWidth;
  const box = e => e.getBoundingClientRect();
  const inside = (e, c) => { const a = box(e), b = box(c);
    return a.left >= b.left - 0.5 && a.right <= b.right + 0.5; };
  const shown = e => e.offsetParent !== null;
  const cut = [];
  for (const e of document.body.querySelectorAll('*')) {
    const cs = getComputedStyle(e);
    const clips = ['hidden', 'clip'].includes(cs.overflowX) || cs.textOverflow === 'ellipsis';
    if (shown(e) && clips && e.scrollWidth > e.clientWidth + 1)
      cut.push(e.tagName + '.' + e.className + ': ' + e.textContent.slice(0, 60));
  }
  const savings = [...document.querySelectorAll('table.summary td.saving, .hbars .hval')];
  const hidden_savings = savings.filter(e => !shown(e) || box(e).right > vw + 0.5 ||
    box(e).left < -0.5 || (e.closest('.scroll') && !inside(e, e.closest('.scroll'))))
    .map(e => e.textContent);
  const covered = [];
  for (const b of document.querySelectorAll('button.copy')) {
    if (!shown(b)) continue;
    for (const p of document.querySelectorAll('pre')) {
      const r = box(b), q = box(p);
      if (r.left < q.right && q.left < r.right && r.top < q.bottom && q.top < r.bottom)
        covered.push(p.textContent.slice(0, 40));
    }
  }
  const main = document.querySelector('main');
  const cs = getComputedStyle(main);
  const column = box(main).width - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
  const wide = [...document.querySelectorAll('.scroll')].filter(s => shown(s) &&
    (s.scrollWidth > s.clientWidth + 1 || box(s).width > column + 1))
    .map(s => (s.querySelector('th') || s).textContent.slice(0, 30));
  const labels = [...document.querySelectorAll('.hbars .hlbl')].map(e => ({
    text: e.textContent, over: e.scrollWidth > e.clientWidth + 1, right: box(e).right}));
  const checks = document.getElementById('checks');
  return {page: document.documentElement.scrollWidth, vw, cut, savings: savings.length,
          hidden_savings, covered, wide, labels, text: document.body.innerText,
          checks: checks ? checks.innerText : '',
          summary_wide: [...document.querySelectorAll('table.summary')].map(t =>
            t.closest('.scroll').scrollWidth > t.closest('.scroll').clientWidth + 1)};
})()"""


@pytest.fixture(scope="module")
def browser():
    exe = find_chromium()
    if exe is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    b = Browser(exe)
    yield b
    b.close()


def _shots(tmp_path: Path) -> Path:
    d = os.environ.get("ADVISOR_SCREENSHOTS")
    if d:
        Path(d).mkdir(parents=True, exist_ok=True)
        return Path(d)
    return tmp_path


def _report(tmp: Path) -> Path:
    """Two phases, a long title, a long first line of code under a Copy button, a skip reason
    with `code` in it, and a replay that gains nothing."""
    report = sample_report(gpu_builder().load())
    fs = list(report.findings)
    fs[0] = dataclasses.replace(fs[0], title=LONG_TITLE, snippet=LONG_LINE + "\nstep()\n")
    fs = [dataclasses.replace(f, phase="train") for f in fs]
    ev = dataclasses.replace(fs[0], title="Steps wait on the DataLoader", phase="eval")
    ev = dataclasses.replace(ev, est_savings_ms=1473.0, est_savings_pct=73.6, severity="high")
    phases = (
        Phase("train", PhaseWindow("trace.json.gz", 3, float(report.run.step_ms_median or 1))),
        Phase("eval", PhaseWindow("trace.eval.json.gz", 3, 2000.0)),
    )
    report = dataclasses.replace(
        report,
        findings=(*fs, ev),
        run=dataclasses.replace(report.run, phases=phases),
        skipped=(
            *report.skipped,
            Skipped("optimizer-host-time", "needs run.json, which only `advisor profile` records"),
        ),
    )
    return write_outputs(report, tmp / "run")["report"]


def _kernels_report(tmp: Path) -> Path:
    from advisor.analysis.pipeline import analyze_trace
    from advisor.trace import load_trace
    from tests.test_report_browser import _kernel_tables_trace

    return write_outputs(analyze_trace(load_trace(_kernel_tables_trace(tmp)), None), tmp / "k")[
        "report"
    ]


def _try_html(tmp: Path) -> Path:
    from advisor.output.try_view import render_html
    from advisor.tryresult import Round, Settings, StepStats, TryResult, TryRow

    def stats(m: float) -> StepStats:
        return StepStats(steps=8, median_ms=m, p25_ms=m * 0.97, p75_ms=m * 1.04)

    rows = tuple(
        TryRow(
            label=f"after-{fid}",
            fixes=(fid,),
            folders=(f"after-{fid}",),
            before=stats(1234.56),
            after=stats(1100.12),
            measured_saving_ms=134.44,
            measured_saving_pct=10.9,
            ratio=0.93,
            verdict="faster",
            estimated_saving_ms=144.2,
            estimated_saving_pct=11.7,
            acted=True,
            rounds=(Round(1, 1234.5, 1100.1, 134.4), Round(2, 1236.0, 1101.0, 135.0)),
        )
        for fid in ("dataloader-stall", "zero-grad-not-none")
    )
    doc = TryResult(
        advisor_version="1.0",
        script="examples/train_with_a_long_name.py",
        fix="dataloader-stall,zero-grad-not-none",
        started_at="2026-11-28T19:00:05+00:00",
        settings=Settings(),
        results=rows,
    )
    path = tmp / "try.html"
    path.write_text(render_html(doc), encoding="utf-8")
    return path


def _dates_agree(text: str) -> None:
    dates = re.findall(
        r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(?::\d{2})?(?:\.\d+)?(?: UTC|[+-]\d{2}:\d{2}|Z)?", text
    )
    assert dates and all(re.fullmatch(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC", d) for d in dates), (
        dates
    )


def _check(page, width: int, shot: Path) -> dict:
    g = page.eval(GEOMETRY_JS)
    page.screenshot(shot)
    assert g["vw"] == width
    assert g["page"] <= width, g["page"]  # no sideways scrolling of the page
    assert g["cut"] == [], g["cut"]  # nothing clipped or ellipsized
    assert g["hidden_savings"] == [], g["hidden_savings"]
    assert g["covered"] == [], g["covered"]  # no code under a Copy button
    assert not any(g["summary_wide"]), g["summary_wide"]
    for lb in g["labels"]:
        assert not lb["over"] and "…" not in lb["text"] and lb["right"] <= width, lb
    assert "0.00 us" not in g["text"] and "0.00 µs" not in g["text"]
    assert "`" not in g["checks"]
    assert page.problems() == []
    return g


@pytest.mark.parametrize("width", WIDTHS)
def test_report_at_phone_and_desktop_widths(browser, tmp_path: Path, width: int) -> None:
    url = _report(tmp_path).resolve().as_uri()
    page = browser.open(url, width=width, height=900)
    g = _check(page, width, _shots(tmp_path) / f"report-{width}.png")
    assert g["savings"] == 5 + 4  # every finding's saving in the tables, and 4 bars
    assert any(lb["text"] == f"#1 {LONG_TITLE}" for lb in g["labels"])  # in full
    assert "Evaluation phase" in g["text"] and "Training phase" in g["text"]
    _dates_agree(g["text"])
    if width >= 1000:
        assert g["wide"] == [], g["wide"]  # every table within the text column


@pytest.mark.parametrize("width", WIDTHS)
def test_kernel_table_keeps_to_the_text_column(browser, tmp_path: Path, width: int) -> None:
    page = browser.open(_kernels_report(tmp_path).resolve().as_uri(), width=width, height=900)
    g = _check(page, width, _shots(tmp_path) / f"kernels-{width}.png")
    if width >= 1000:
        assert g["wide"] == [], g["wide"]
    assert "% memory" in g["text"]  # the Of limit column, and its Cause beside it in full


@pytest.mark.parametrize("width", WIDTHS)
def test_try_html_at_phone_and_desktop_widths(browser, tmp_path: Path, width: int) -> None:
    page = browser.open(_try_html(tmp_path).resolve().as_uri(), width=width, height=900)
    g = _check(page, width, _shots(tmp_path) / f"try-{width}.png")
    if width >= 1000:
        assert g["wide"] == [], g["wide"]  # the last column (Run folder) on screen
    assert "after-zero-grad-not-none/" in g["text"]
    _dates_agree(g["text"])
