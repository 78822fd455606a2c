"""The report reads well: short kernel names (full name on hover), bar labels in full,
a balanced header grid, one date format, paths relative to the run folder, evidence rows that
say what they mean; checked on the demo trace in headless Chromium at 1400 px."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from advisor.output.doctext import counted, date_str, shown_path
from advisor.output.kernelname import short_kernel_name
from tests.conftest import HANG_S, REPO, SAMPLES
from tests.report_browser import Browser, find_chromium


def test_kernel_names_are_shortened() -> None:
    cases = {
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
        "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, "
        "at::detail::Array<char*, 3>)": "at::native::vectorized_elementwise_kernel<…>",
        "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>("
        "cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4::Params)": (
            "cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>"
        ),
        "volta_sgemm_64x64_nt": "volta_sgemm_64x64_nt",
        "Memcpy HtoD (Pageable -> Device)": "Memcpy HtoD (Pageable -> Device)",
        "void (anonymous namespace)::softmax_warp_forward<float, float, float, 8, false>(float*, "
        "float const*, int, int, int)": "(anonymous namespace)::softmax_warp_forward<…>",
        "a<b": "a<b",  # unbalanced: left alone
        "": "",
    }
    for full, short in cases.items():
        assert short_kernel_name(full) == short, full
    mangled = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5ArrayIPcLi1EEEEEviT0_T1_"
    assert short_kernel_name(mangled) in (mangled, "at::native::vectorized_elementwise_kernel<…>")


def test_texts_say_what_they_count() -> None:
    assert (
        counted("divided over 6 step(s); 1 call(s) per step")
        == "divided over 6 steps; 1 call per step"
    )
    assert counted("no counts here (s)") == "no counts here (s)"
    assert date_str("2026-11-21T12:00:00+00:00") == date_str("2026-11-21 12:00:00 UTC")
    assert date_str("2026-11-21 12:00:00 UTC") == "2026-11-21 12:00 UTC"
    assert date_str("soon") == "soon"
    assert shown_path("/a/run/trace.json.gz", "/a/run") == "trace.json.gz"
    assert shown_path("/a/other/t.json", "/a/run") == "../other/t.json"
    assert shown_path("/x/t.json", "/a/b/c/run") == "/x/t.json"  # far away: as it is
    assert shown_path("trace.json.gz", "/a/run") == "trace.json.gz"


LAYOUT_JS = """(() => {
  const h = document.getElementById('top-kernels');
  const table = h ? h.nextElementSibling.getBoundingClientRect() : null;
  const trs = h ? [...h.nextElementSibling.querySelectorAll('tbody tr')] : [];
  const rowsTall = Math.max(0, ...trs.map(r => r.getBoundingClientRect().height));
  const rows = {};
  for (const f of document.querySelectorAll('.fact')) {
    const y = Math.round(f.getBoundingClientRect().y); rows[y] = (rows[y] || 0) + 1;
  }
  return {kernels: table ? table.height : 0, rows: Object.values(rows), row_max: rowsTall,
          kernels_w: table ? table.width : 0,
          column: document.querySelector('main section').getBoundingClientRect().width,
          labels: [...document.querySelectorAll('.hbars .hlbl')].map(t => t.textContent),
          titles: [...document.querySelectorAll('.hbars a.hbar')].map(a => a.title),
          hovers: [...document.querySelectorAll('td.tname[title]')].length,
          text: document.body.innerText};
})()"""


@pytest.mark.slow
def test_demo_report_in_chromium_at_1400px(tmp_path: Path) -> None:
    exe = find_chromium()
    if exe is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    out = tmp_path / "demo"
    r = subprocess.run(
        [sys.executable, "-m", "advisor", "analyze", str(SAMPLES / "resnet50_v100.kineto.json.gz")]
        + ["--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert r.returncode == 0, r.stderr
    assert "USDT" not in r.stdout + r.stderr
    b = Browser(exe)
    try:
        page = b.open((out / "report.html").resolve().as_uri(), width=1400, height=900)
        got = page.eval(LAYOUT_JS)
        shots = tmp_path / "shots"
        shots.mkdir()
        page.screenshot(shots / "demo-1400.png")
    finally:
        b.close()
    # the top kernels stay compact (every row at most three lines, the Cause in full, wrapped)
    # and within the text column
    assert got["kernels"] > 0 and got["row_max"] <= 72, got["row_max"]
    assert got["kernels_w"] <= got["column"] + 1, (got["kernels_w"], got["column"])
    assert got["hovers"] > 0  # each short kernel name has its full name on hover
    assert max(got["rows"]) - min(got["rows"]) <= 1, got["rows"]  # a balanced header grid
    for label, title in zip(got["labels"], got["titles"], strict=True):
        assert label == title.split(": ")[0]  # the bar's label in full (it wraps, never cut)
    text = got["text"]
    assert "(s)" not in re.sub(r"\(s\)\s*$", "", text) or "step(s)" not in text
    dates = re.findall(
        r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(?::\d{2})?(?: UTC|[+-]\d{2}:\d{2})?", text
    )
    assert dates and all(re.fullmatch(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC", d) for d in dates), (
        dates
    )
    findings = json.loads((out / "findings.json").read_text(encoding="utf-8"))
    assert findings["findings"]
