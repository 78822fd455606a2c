"""report.html in real headless Chromium, as a person opens it: JavaScript on and off, light and
dark, no console errors, no network, findings visible. Skipped when Chromium is not installed
(``.ci/run`` installs it: ``apt-get install -y --no-install-recommends chromium``).

Set ``ADVISOR_SCREENSHOTS=DIR`` to keep the screenshots for a look.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from advisor.analysis.pipeline import write_outputs
from tests.report_browser import Browser, find_chromium
from tests.report_samples import EVIL, gpu_builder, sample_report, with_run

pytestmark = pytest.mark.slow

CARDS_JS = """(() => [...document.querySelectorAll('details.card')].map(c => {
  const r = c.querySelector('summary').getBoundingClientRect();
  const body = c.querySelector('.card-body').getBoundingClientRect();
  const cs = getComputedStyle(c);
  return {title: c.querySelector('.ftitle').textContent, w: r.width, h: r.height,
          body: body.height, visible: cs.visibility === 'visible' && cs.display !== 'none',
          open: c.open};
}))()"""
STATE_JS = """(() => ({
  copyShown: [...document.querySelectorAll('button.copy')].map(b => b.offsetParent !== null),
  toolbarShown: [...document.querySelectorAll('.toolbar')].map(b => b.offsetParent !== null),
  scripts: document.scripts.length,
  text: document.body.innerText,
  bg: getComputedStyle(document.body).backgroundColor,
  charts: [...document.querySelectorAll('svg.svg-chart, .hbars')].map(s => s.getBoundingClientRect().height),
  width: document.documentElement.scrollWidth,
}))()"""


@pytest.fixture(scope="module")
def browser():
    exe = find_chromium()
    if exe is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    b = Browser(exe)
    yield b
    b.close()


@pytest.fixture(scope="module")
def report_url(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("browser")
    src = gpu_builder(kernel_name=EVIL).write(tmp / "trace.json.gz")
    report = sample_report(gpu_builder(kernel_name=EVIL).load())
    report = with_run(report, trace=str(src))
    written = write_outputs(report, tmp / "run")
    return written["report"].resolve().as_uri()


def _shots_dir(tmp_path: Path) -> Path:
    d = os.environ.get("ADVISOR_SCREENSHOTS")
    if d:
        Path(d).mkdir(parents=True, exist_ok=True)
        return Path(d)
    return tmp_path


def _check_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # a real, non-blank page
    try:
        from PIL import Image
    except ImportError:
        return
    im = Image.open(path).convert("L")
    lo, hi = im.getextrema()
    assert hi - lo > 100 and im.size[1] > 1500  # contrast and a full-length page


def _check_cards(page) -> None:
    cards = page.eval(CARDS_JS)
    assert [c["title"] for c in cards] == [
        "Steps wait on the DataLoader",
        "Host waits on the device",
        f"{EVIL} & <b>kernels</b>",
        "Memory headroom",
    ]
    for c in cards:
        assert c["visible"] and c["open"] and c["w"] > 500 and c["h"] > 20 and c["body"] > 50


def test_javascript_on_light(browser, report_url, tmp_path):
    page = browser.open(report_url, javascript=True)
    _check_cards(page)
    st = page.eval(STATE_JS)
    assert all(st["copyShown"]) and len(st["copyShown"]) == 3 and all(st["toolbarShown"])
    assert st["scripts"] == 1 and EVIL in st["text"]
    assert st["bg"] == "rgb(255, 255, 255)"
    assert len(st["charts"]) == 3 and all(h > 60 for h in st["charts"])
    assert st["width"] <= 1200  # nothing overflows the window sideways
    # sorting by severity keeps the info finding last; clicking '#' twice reverses the ranks
    page.eval("document.querySelector('table.sortable th').click()")
    page.eval("document.querySelector('table.sortable th').click()")
    ranks = page.eval(
        "[...document.querySelectorAll('table.summary tbody tr')].map(r => r.cells[0].textContent)"
    )
    assert ranks == ["4", "3", "2", "1"]
    page.eval("document.querySelector('[data-action=collapse]').click()")
    assert page.eval("[...document.querySelectorAll('details.card')].every(d => !d.open)")
    page.eval("document.querySelector('[data-action=expand]').click()")
    _check_cards(page)
    _check_png(page.screenshot(_shots_dir(tmp_path) / "report-light.png"))
    assert page.problems() == []
    assert all(u.startswith(("file:", "data:")) for u in page.requests()), page.requests()


def test_javascript_off(browser, report_url, tmp_path):
    page = browser.open(report_url, javascript=False)
    _check_cards(page)
    st = page.eval(STATE_JS)
    assert st["copyShown"] == [False, False, False] and st["toolbarShown"] == [False]
    assert "Why this costs time" in st["text"] and "chrome://tracing" in st["text"]
    _check_png(page.screenshot(_shots_dir(tmp_path) / "report-nojs.png"))
    assert page.problems() == []


def test_dark_mode(browser, report_url, tmp_path):
    page = browser.open(report_url, dark=True)
    _check_cards(page)
    assert page.eval(STATE_JS)["bg"] == "rgb(13, 17, 23)"
    _check_png(page.screenshot(_shots_dir(tmp_path) / "report-dark.png"))
    assert page.problems() == []


def test_narrow_window(browser, report_url, tmp_path):
    page = browser.open(report_url, width=420, height=900)
    cards = page.eval(CARDS_JS)
    assert all(c["visible"] and c["w"] > 300 for c in cards)
    assert page.eval("document.documentElement.scrollWidth") <= 440
    page.screenshot(_shots_dir(tmp_path) / "report-narrow.png")
    assert page.problems() == []


LABELS_JS = """(() => { const chart = document.querySelector('.hbars');
  const left = chart.getBoundingClientRect().left;
  return [...chart.querySelectorAll('.hlbl')].map(t => ({text: t.textContent,
    over: t.scrollWidth > t.clientWidth + 1, left: t.getBoundingClientRect().left - left})); })()"""
LONG_TITLES = (
    "Communication not hidden under computation on every rank of this job",
    "WWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWW",
    "Memory-bound elementwise kernels MMMMMMMMMMMMMMMMMMMMMMMM@@@@",
)


def test_saving_bar_labels_are_never_clipped(browser, tmp_path):
    import dataclasses

    report = sample_report(gpu_builder().load())
    fs = list(report.findings)
    for i, title in enumerate(LONG_TITLES[: len(fs)]):
        fs[i] = dataclasses.replace(fs[i], title=title)
    report = dataclasses.replace(report, findings=tuple(fs))
    url = write_outputs(report, tmp_path / "run")["report"].resolve().as_uri()
    for width in (1200, 420):
        page = browser.open(url, width=width)
        labels = page.eval(LABELS_JS)
        assert len(labels) >= 2 and any(lb["text"].endswith(LONG_TITLES[0]) for lb in labels)
        for lb in labels:
            assert not lb["over"] and lb["left"] >= -0.5, lb  # in full, inside the chart
        assert page.problems() == []


KERNEL_TABLES_JS = """(() => {
  const table = (id, n = 1) => { let h = document.getElementById(id);
    for (let i = 0; h && i < n; i++) h = h.nextElementSibling;
    const t = h && h.querySelector('table');
    return t ? {head: [...t.tHead.rows[0].cells].map(c => c.textContent),
                rows: [...t.tBodies[0].rows].map(r => [...r.cells].map(c => c.textContent)),
                titles: [...t.tBodies[0].rows].map(r => r.cells[0].title),
                visible: t.getBoundingClientRect().height > 20} : null; };
  return {kernels: table('top-kernels'), compiled: table('compiled'),
          gemms: table('compiled', 2),
          toc: [...document.querySelectorAll('nav.toc a')].map(a => a.textContent)};
})()"""


def _kernel_tables_trace(tmp: Path) -> Path:
    """An eager elementwise kernel with shapes (its share of the MI300X's bandwidth is known)
    whose name carries markup, then a Dynamo frame replaying a HIP graph of a hipBLASLt GEMM and
    a Triton kernel (no shapes: the compiled-regions table accounts for them)."""
    from tests.tracebuilder import TraceBuilder

    b = TraceBuilder(cc=(9, 4), gpu_name="AMD Instinct MI300X")
    for s in range(3):
        t0 = s * 1000.0
        b.step(s + 1, t0, 1000)
        o = b.op("aten::add", t0 + 5, 10, dims=[[4096, 4096], [4096, 4096]], types=["float"] * 2)
        b.launch(
            o, "hipLaunchKernel", t0 + 8, 2, kernel=f"add<{EVIL}&>", gpu_ts=t0 + 20, gpu_dur=200
        )
        region = b.op("Torch-Compiled Region: 0/0", t0 + 30, 100)
        rt = b.runtime("hipGraphLaunch", t0 + 50, 20, region)
        corr, ext = rt["args"]["correlation"], rt["args"]["External id"]
        b.kernel(
            "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x192x64_MI16x16x1_ISA942",
            t0 + 300,
            300,
            corr=corr,
            ext=ext,
        )
        b.kernel("triton_poi_fused_add_gelu_0", t0 + 600, 50, corr=corr, ext=ext)
        b.runtime("hipDeviceSynchronize", t0 + 140, 520)
    return b.write(tmp / "trace.json.gz")


def test_kernel_tables(browser, tmp_path):
    """The top-kernels table's 'Of limit' and 'Cause' columns and the compiled-regions table:
    shown, escaped, sortable, offline, with JavaScript on and off."""
    from advisor.analysis.pipeline import analyze_trace
    from advisor.trace import load_trace

    src = _kernel_tables_trace(tmp_path)
    report = analyze_trace(load_trace(src), None)
    url = write_outputs(report, tmp_path / "run")["report"].resolve().as_uri()
    for js in (True, False):
        page = browser.open(url, javascript=js)
        t = page.eval(KERNEL_TABLES_JS)
        assert "Compiled regions" in t["toc"] and "Top kernels" in t["toc"]
        kernels, compiled = t["kernels"], t["compiled"]
        assert kernels["visible"] and kernels["head"][-2:] == ["Of limit", "Cause"]
        i = next(i for i, r in enumerate(kernels["rows"]) if r[0].startswith("add<"))
        add = kernels["rows"][i]
        assert add[0] == "add<…>"  # the name shortened; in full in its title
        assert kernels["titles"][i] == f"add<{EVIL}&>"  # the markup is text, not elements
        assert add[-2].endswith("% memory")
        gemm = next(r for r in kernels["rows"] if r[0].startswith("Cijk_"))
        assert gemm[-2:] == ["", ""]  # no shapes: no share and no cause, not a guess
        assert compiled["visible"] and compiled["head"][:3] == ["Region", "Calls", "GPU time"]
        graph, eager = compiled["rows"]
        assert graph[0] == "Torch-Compiled Region: 0/0" and graph[1] == "3"
        assert "GEMM (hipBLASLt)" in graph[4] and "Triton pointwise" in graph[4]
        assert eager[0].startswith("eager")
        (gemm_row,) = t["gemms"]["rows"]  # the GEMM kernels' table: tile, and no guessed share
        assert t["gemms"]["head"][0] == "GEMM kernel"
        assert gemm_row[3] == "256x192" and gemm_row[-1] == "unknown (no shapes)"
        if js:  # sorting by the share of the limit puts the one kernel with a share at an end
            page.eval(
                "[...document.querySelectorAll('#top-kernels + .scroll th')]"
                ".find(th => th.textContent === 'Of limit').click()"
            )
            names = page.eval(
                "[...document.querySelectorAll('#top-kernels + .scroll tbody tr')]"
                ".map(r => r.cells[0].textContent)"
            )
            assert sorted(names) == sorted(r[0] for r in kernels["rows"])
            assert add[0] in (names[0], names[-1]), names
        assert page.problems() == []
        assert all(u.startswith(("file:", "data:")) for u in page.requests()), page.requests()
