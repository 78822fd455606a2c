"""The records that cross a stage boundary (advisor.record): typed all the way down (no ``Any``
carries stage data between layers), and findings.json written and read back byte for byte."""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Mapping
from pathlib import Path

import orjson
import pytest

from advisor import digest, record, report, runfacts, runinfo, viewdata
from advisor.analysis.options import Options
from advisor.record import UNSET, Unset, flat, omit_empty, omit_none, omit_unset
from advisor.report import Report
from advisor.runfacts import RunFacts
from advisor.viewdata import Views

GOLDEN = Path(__file__).resolve().parent / "golden"
# the records of the stages: what the analysis hands the renderers, the workers hand the merge
# and the cross-rank checks, the command line hands the analysis, and advisor profile hands the
# detectors (run.json)
STAGE_MODULES = (report, runfacts, viewdata, digest, runinfo)


def _records() -> list[type]:
    out = [Options]
    for mod in STAGE_MODULES:
        out += [
            c
            for c in vars(mod).values()
            if isinstance(c, type) and dataclasses.is_dataclass(c) and c.__module__ == mod.__name__
        ]
    return out


def _leaves(tp: object) -> list[object]:
    """Every type a field's annotation names (through unions, tuples, mappings...)."""
    args = typing.get_args(tp)
    if not args or typing.get_origin(tp) is typing.Literal:
        return [tp]
    return [tp] + [x for a in args for x in _leaves(a)]


@pytest.mark.parametrize("cls", _records(), ids=lambda c: f"{c.__module__}.{c.__name__}")
def test_no_field_of_a_stage_record_is_any(cls: type) -> None:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        for leaf in _leaves(hints[f.name]):
            assert leaf is not typing.Any, f"{cls.__name__}.{f.name}: {hints[f.name]}"
            assert leaf is not object, f"{cls.__name__}.{f.name}: {hints[f.name]}"


def test_the_check_sees_an_any() -> None:
    @dataclasses.dataclass(frozen=True)
    class Loose:
        run: dict[str, typing.Any]

    hints = typing.get_type_hints(Loose, localns={"typing": typing})
    assert typing.Any in _leaves(hints["run"])


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("*.findings.json")), ids=lambda p: p.name)
def test_golden_findings_load_and_dump_byte_for_byte(path: Path) -> None:
    raw = path.read_bytes()
    rep = Report.load(orjson.loads(raw))
    assert isinstance(rep.run, RunFacts) and isinstance(rep.views, Views)
    assert rep.dump() == raw


def test_an_older_findings_json_loads_with_defaults() -> None:
    old = {
        "schema_version": 1,
        "advisor_version": "0.1.0",
        "run": {"trace": "t.json", "step_ms_median": 12, "a_key_of_a_later_version": 1},
        "findings": [],
    }
    rep = Report.load(old)
    assert rep.run.trace == "t.json" and rep.run.step_ms_median == 12
    assert rep.run.gpu_busy_pct is None and rep.run.bound is None  # missing: defaults
    assert rep.run.trace_quality == () and rep.run.ranks is None
    assert rep.views.one_trace is None and rep.views.kernels == ()
    assert Report.load({"findings": []}).run == RunFacts()


@pytest.mark.parametrize(
    ("run", "says"),
    [
        ({"gpu_busy_pct": "n/a"}, "run.gpu_busy_pct: expected float | None, got 'n/a'"),
        ({"bound": {"by": 3, "shares_pct": {}}}, "run.bound: expected"),
        ({"trace_quality": [{"what": "x"}]}, "run.trace_quality[0].effect: missing"),
        ({"steps_profiled": True}, "run.steps_profiled: expected int, got True"),
        (None, "run: expected an object, got None"),
    ],
)
def test_a_value_of_another_type_names_the_key(run: object, says: str) -> None:
    with pytest.raises(record.RecordError, match=re.escape(says)):
        Report.load({"run": run, "findings": []})


def test_an_older_findings_json_renders_and_prints() -> None:
    """advisor report on a findings.json of an earlier version: missing keys, rows as dicts."""
    from advisor.output.html import render_html
    from advisor.output.terminal import headline

    old = {
        "run": {"trace": "x.json", "steps_profiled": 3, "step_ms_median": 12.5, "gpu_busy_pct": 40},
        "findings": [
            {
                "id": "sync-point",
                "title": "Host waits",
                "severity": "high",
                "est_savings_ms": 1.0,
                "est_savings_pct": 8.0,
                "confidence": "high",
                "summary": "s",
                "recommendation": "r",
                "snippet": "",
            }
        ],
        "views": {"kernels": [{"name": "k", "count": 2}]},
    }
    rep = Report.load(old)
    assert rep.views.kernels[0].name == "k" and rep.views.kernels[0].total_ms == 0.0
    html = render_html(rep, {"generated_at": "x"})
    assert "Host waits" in html and "40.0%" in html
    assert "median step 12.50 ms" in headline(rep)


@dataclasses.dataclass(frozen=True)
class _Inner:
    a: int
    b: str | None = None


@dataclasses.dataclass(frozen=True)
class _Outer:
    name: str
    always: float | None = None
    maybe: int | None = omit_none()
    many: tuple[int, ...] = omit_empty()
    absent: str | None | Unset = omit_unset()
    inner: _Inner | None = flat()
    rest: Mapping[str, float] = flat(mapping=True)


def test_the_writing_rules() -> None:
    bare = _Outer("x")
    assert record.dump(bare) == {"name": "x", "always": None}
    full = _Outer("x", 1.5, 2, (3,), None, _Inner(4), {"extra": 5.0})
    d = record.dump(full)
    assert d == {
        "name": "x",
        "always": 1.5,
        "maybe": 2,
        "many": [3],
        "absent": None,
        "a": 4,
        "b": None,
        "extra": 5.0,
    }
    assert record.load(_Outer, d) == full
    assert record.load(_Outer, record.dump(bare)) == bare
    assert record.load(_Outer, {"name": "x"}).absent is UNSET


def test_a_new_field_is_one_line() -> None:
    """A field added to RunFacts is written and read back with nothing else to change."""
    fields = [(f.name, f.type, f) for f in dataclasses.fields(RunFacts)]
    Grown = dataclasses.make_dataclass(  # noqa: N806
        "Grown",
        [*fields, ("host_name", "str | None", omit_none())],
        frozen=True,
        namespace={"__module__": runfacts.__name__},
    )
    g = Grown(trace="t", host_name="node-7")
    assert record.dump(g)["host_name"] == "node-7"
    assert "host_name" not in record.dump(Grown(trace="t"))
    assert record.load(Grown, record.dump(g)) == g
