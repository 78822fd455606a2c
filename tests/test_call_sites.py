"""The exact line of each finding inside a training loop (issue 15, part 1).

``advisor profile`` writes each user call's site into the trace (``args.call_site`` on the
python_function events); findings then name the line that ran: the ``.item()``, the ``.cpu()``,
the data-dependent branch, the ``torch.cat`` of an inner loop, the DataLoader's own line. Two
real runs on the CPU: a loop at module level and the same loop inside a function.
"""

from __future__ import annotations

import gzip
import io
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from advisor.analysis.pipeline import analyze_path
from advisor.derive.locate import Locator
from advisor.output.terminal import print_summary
from advisor.output.viewmodel import build_viewmodel
from advisor.profile.callsites import annotate
from advisor.trace import load_trace
from tests.test_profile import FAST, advisor, outputs

pytestmark = pytest.mark.slow

BODY = """
import time
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        time.sleep(0.005)  # 40 ms a batch, however busy the machine: longer than the step
        return torch.randn(16), torch.randn(1)


def train():
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Slow(), batch_size=8)  # LOADER
    for step, (x, y) in enumerate(loader):  # ITERATE
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        seen = loss.item()  # ITEM
        peak = model[0].weight.abs().max().cpu()  # CPU
        if x.sum() > 0:  # BRANCH
            seen += peak
        rows = x[:1]
        for i in range(1, 8):
            rows = torch.cat([rows, x[i : i + 1]])  # CAT
        opt.step()  # STEP
        if step == 10:
            break


train()
"""


def _module_level(text: str) -> str:
    """The same loop at module level: the function's body, dedented, without the call."""
    head, rest = text.split("def train():\n", 1)
    body = rest.rsplit("\n\ntrain()\n", 1)[0]
    return head + textwrap.dedent(body) + "\n"


def _line(text: str, tag: str) -> int:
    return next(i for i, ln in enumerate(text.splitlines(), 1) if ln.endswith(f"# {tag}"))


@pytest.fixture(scope="module", params=["module", "function"])
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    work = tmp_path_factory.mktemp(f"calls_{request.param}")
    text = _module_level(BODY) if request.param == "module" else BODY
    (work / "loop.py").write_text(text, encoding="utf-8")
    res = advisor(work, *FAST, "--no-memory", "-o", "out", "loop.py")
    assert res.returncode == 0, res.stderr
    run_json, findings = outputs(work / "out")
    lines = {t: _line(text, t) for t in ("LOADER", "ITERATE", "ITEM", "CPU", "BRANCH", "CAT")}
    lines["STEP"] = _line(text, "STEP")
    by_id = {f["id"]: f for f in findings["findings"]}
    return request.param, work / "out", run_json, by_id, lines


def _where(f: dict[str, Any]) -> list[tuple[int, str]]:
    return [(loc["line"], loc["line_is"]) for loc in f["locations"]]


def test_findings_name_the_exact_line(run: Any) -> None:
    kind, _, run_json, by_id, ln = run
    assert run_json["call_sites"] and run_json["call_sites"] > 0, run_json["call_sites_error"]
    sync = _where(by_id["sync-point"])
    assert (ln["ITEM"], "call") in sync, (kind, sync)
    # `if t:` makes no Python call: the line of the frame's last call (x.sum()), said so
    assert (ln["BRANCH"], "last-call") in sync, (kind, sync)
    assert _where(by_id["cat-in-loop"]) == [(ln["CAT"], "call")], kind
    stall = by_id["dataloader-stall"]["locations"]
    assert (stall[0]["line"], stall[0]["function"]) == (ln["LOADER"], "DataLoader(...)")
    assert _where(by_id["dataloader-stall"])[1] == (ln["ITERATE"], "call"), kind
    every = [w for f in by_id.values() for w in _where(f)]
    assert all(line != ln["STEP"] for line, _ in every), (kind, every)


def test_each_op_is_placed_on_its_line(run: Any) -> None:
    kind, out, _, _, ln = run
    trace = load_trace(out / "trace.json.gz")
    loc = Locator(trace)
    ops = trace.cpu_ops
    top = ops.index[ops["parent_idx"].to_numpy() == -1]
    got: dict[str, set[tuple[int, str]]] = {}
    for i in top:
        where = loc.for_op(int(i))
        if where is not None and where.file == "loop.py":
            got.setdefault(str(ops["name"].iat[i]), set()).add((where.line, where.line_is))
    assert got["aten::item"] == {(ln["ITEM"], "call")}, kind
    for name in ("aten::abs", "aten::max", "aten::to"):  # model[0].weight.abs().max().cpu()
        assert got[name] == {(ln["CPU"], "call")}, (kind, name, got[name])
    assert got["aten::is_nonzero"] == {(ln["BRANCH"], "last-call")}, kind
    assert got["aten::cat"] == {(ln["CAT"], "call")}, kind


def test_analyze_on_the_run_folder_gives_the_same_lines(run: Any) -> None:
    _, out, _, by_id, _ = run
    _, report = analyze_path(out / "trace.json.gz")
    again = {f.id: [(loc.line, loc.line_is) for loc in f.locations] for f in report.findings}
    assert again == {k: _where(f) for k, f in by_id.items()}


def test_a_trace_without_call_sites_says_its_lines_are_frame_starts(
    run: Any, tmp_path: Path
) -> None:
    kind, out, _, _, ln = run
    with gzip.open(out / "trace.json.gz", "rb") as fh:
        data = json.load(fh)
    for ev in data["traceEvents"]:
        (ev.get("args") or {}).pop("call_site", None)
    plain = tmp_path / "elsewhere.json"
    plain.write_text(json.dumps(data))
    _, report = analyze_path(plain)
    sync = next(f for f in report.findings if f.id == "sync-point")
    assert {loc.line_is for loc in sync.locations} == {"frame-start"}, kind
    # a frame already running when tracing began is named by the line it stood on then
    assert ln["ITEM"] not in {loc.line for loc in sync.locations}
    # the report says so under each such line, and the terminal table marks it
    vm = build_viewmodel(report, "2026-11-24T00:00:00Z")
    card = next(c for c in vm["findings"] if c["id"] == "sync-point")
    assert all(
        "not the line that was running" in "".join(p["text"] for p in loc["how"])
        for loc in card["locations"]
    )
    out = io.StringIO()
    print_summary(report, {}, file=out)
    assert "(frame start)" in out.getvalue()


def test_exact_lines_carry_no_note(run: Any) -> None:
    _, out, _, _, _ = run
    _, report = analyze_path(out / "trace.json.gz")
    vm = build_viewmodel(report, "2026-11-24T00:00:00Z")
    hows = {(loc["line"], loc["how"] is None) for c in vm["findings"] for loc in c["locations"]}
    card = next(c for c in vm["findings"] if c["id"] == "sync-point")
    assert any(loc["how"] is None for loc in card["locations"]), hows
    assert any(loc["how"] is not None for loc in card["locations"]), hows  # the branch


def test_annotate_matches_by_start_and_name(tmp_path: Path) -> None:
    base = 1_790_857_026_000_000_000
    events = [
        {
            "ph": "X",
            "cat": "python_function",
            "name": "<built-in method item>",
            "ts": 4659536070010.791,
            "dur": 1.0,
            "args": {"Python id": 3},
        },
        {
            "ph": "X",
            "cat": "python_function",
            "name": "<built-in method cat>",
            "ts": 4659536070020.5,
            "dur": 1.0,
            "args": {},
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::item",
            "ts": 4659536070010.791,
            "dur": 1,
            "args": {},
        },
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"baseTimeNanoseconds": base, "traceEvents": events}))
    sites = {
        (base + 4659536070010791, "<built-in method item>"): "loop.py(14): <module>",
        (base + 4659536070020501, "<built-in method cat>"): "loop.py(20): step",  # rounding
        (base + 4659536070010791, "aten::item"): "never.py(1): x",  # not a python event
    }
    assert annotate(path, sites) == 2
    got = json.loads(path.read_text())["traceEvents"]
    assert [e["args"].get("call_site") for e in got] == [
        "loop.py(14): <module>",
        "loop.py(20): step",
        None,
    ]
    assert got[0]["args"]["Python id"] == 3
