"""One JSON writer and one findings.json reader (ARCHITECTURE.md, "Stage data").

- Only :mod:`advisor.jsontext` turns values into JSON text: no other module of ``advisor/`` or
  ``heuristics/`` calls ``json.dump(s)``, ``orjson.dumps`` or msgspec's encoder. One exception,
  named: the trace decoder re-encodes an event it decoded loosely to read it again with its
  typed decoder (``advisor/trace/structs.py``), which reads a trace, never writes one.
- Only :func:`advisor.report.read` reads a findings.json file: no other module turns JSON into
  a :class:`~advisor.report.Report` (``Report.load``/``from_dict``), and a module that names
  the file (``FINDINGS_NAME``) parses no JSON itself. One exception, named: the output folder's
  check of whether a file is advisor's to replace (``advisor/output/outfolder.py``) reads the
  keys every file advisor writes carries, run.json and findings.json alike, so that a damaged
  findings.json of its own is still replaced.
- The writer's layouts are the ones findings.json, run.json and the trace events always had.
"""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import orjson
import pytest

from advisor import jsontext
from advisor.errors import AdvisorError
from advisor.report import read

REPO = Path(__file__).resolve().parents[1]
SOURCES = sorted([*(REPO / "advisor").rglob("*.py"), *(REPO / "heuristics").rglob("*.py")])

WRITER = "advisor/jsontext.py"
ENCODE_ALLOWED = {"advisor/trace/structs.py"}  # the decoder's re-encode (see the module doc)
READER = "advisor/report.py"
PARSE_ALLOWED = {"advisor/output/outfolder.py"}  # whether a file is ours to replace

ENCODERS = {
    ("json", "dump"),
    ("json", "dumps"),
    ("orjson", "dumps"),
    ("msgspec", "to_builtins"),
    ("msgspec.json", "encode"),
    ("msgspec.json", "Encoder"),
    ("msgspec.json", "format"),
}
PARSERS = {
    ("json", "load"),
    ("json", "loads"),
    ("orjson", "loads"),
    ("msgspec.json", "decode"),
    ("msgspec.json", "Decoder"),
}


def _rel(p: Path) -> str:
    return p.relative_to(REPO).as_posix()


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _uses(tree: ast.AST, names: set[tuple[str, str]]) -> list[str]:
    """Where ``tree`` names one of ``names`` (``module.attr``, or imported from its module)."""
    full = {f"{m}.{a}" for m, a in names}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _dotted(node) in full:
            out.append(f"{_dotted(node)} (line {node.lineno})")
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                if (node.module, alias.name) in names:
                    out.append(f"from {node.module} import {alias.name} (line {node.lineno})")
    return out


def _mentions(node: ast.AST, names: set[str]) -> bool:
    return any(
        (isinstance(n, ast.Name) and n.id in names)
        or (isinstance(n, ast.Constant) and isinstance(n.value, str) and "findings.json" in n.value)
        for n in ast.walk(node)
    )


def _findings_parses(tree: ast.AST) -> list[str]:
    """The JSON parses of a findings.json file: a parse call whose argument names the file
    (``FINDINGS_NAME``, a ``findings.json`` literal, or a variable or parameter of the same
    function that holds it, ``findings_path``...)."""
    full = {f"{m}.{a}" for m, a in PARSERS}
    out = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        held = {"FINDINGS_NAME"} | {a.arg for a in fn.args.args if "findings" in a.arg}
        for _ in range(3):  # what holds the file, through assignments
            for n in ast.walk(fn):
                if isinstance(n, ast.Assign) and _mentions(n.value, held):
                    held |= {t.id for t in n.targets if isinstance(t, ast.Name)}
        for n in ast.walk(fn):
            if (
                isinstance(n, ast.Call)
                and _dotted(n.func) in full
                and any(_mentions(a, held) for a in n.args)
            ):
                out.append(f"{_dotted(n.func)} (line {n.lineno})")
    return out


def _parsed() -> list[tuple[str, ast.AST]]:
    return [(_rel(p), ast.parse(p.read_text(encoding="utf-8"))) for p in SOURCES]


def test_only_the_writer_encodes_json() -> None:
    bad = {
        rel: hits
        for rel, tree in _parsed()
        if rel != WRITER and rel not in ENCODE_ALLOWED and (hits := _uses(tree, ENCODERS))
    }
    assert bad == {}, f"JSON written outside {WRITER} (call advisor.jsontext): {bad}"


def test_only_the_reader_reads_findings_json() -> None:
    loads_report = {}
    parses = {}
    for rel, tree in _parsed():
        if rel == READER:
            continue
        hits = [
            f"{_dotted(n)} (line {n.lineno})"
            for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and _dotted(n) in ("Report.load", "Report.from_dict")
        ]
        if hits:
            loads_report[rel] = hits
        if rel not in PARSE_ALLOWED and (found := _findings_parses(tree)):
            parses[rel] = found
    assert loads_report == {}, f"a Report read outside {READER}.read: {loads_report}"
    assert parses == {}, f"findings.json parsed outside {READER}.read: {parses}"


def test_the_rule_sees_a_writer_and_a_reader() -> None:
    """The scan finds what it forbids (so the two tests above can fail)."""
    src = (
        "import json, orjson\nfrom msgspec.json import encode\n"
        "from advisor.runfolder import FINDINGS_NAME\n"
        "def f(p):\n    return json.dumps(p), orjson.dumps(p), json.loads(p / FINDINGS_NAME)\n"
        "def g(folder, run):\n    f = folder / FINDINGS_NAME\n    data = f.read_bytes()\n"
        "    return orjson.loads(data), json.loads(run)\n"
    )
    tree = ast.parse(src)
    assert len(_uses(tree, ENCODERS)) == 3
    assert [h.split()[0] for h in _findings_parses(tree)] == ["json.loads", "orjson.loads"]


VALUE = {"b": [1, 2.5, None, 1e-05, 1e16], "a": {"é": "ü\u2028", "n": True}, "c": []}


def test_the_layouts_are_the_ones_the_files_always_had() -> None:
    assert jsontext.document(VALUE) == (
        orjson.dumps(VALUE, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n"
    )
    odd = {**VALUE, "nan": math.nan, "inf": [math.inf], "path": Path("x")}
    want = json.dumps({**VALUE, "nan": None, "inf": [None], "path": "x"}, indent=2, sort_keys=True)
    assert jsontext.ascii_document(odd) == (want + "\n").encode()
    assert jsontext.compact(VALUE) == orjson.dumps(VALUE)
    big = {"id": 1 << 70}
    assert jsontext.compact(big) == json.dumps(big, separators=(",", ":")).encode()


def test_the_reader_names_the_file_and_the_problem(tmp_path: Path) -> None:
    p = tmp_path / "findings.json"
    for raw, words in (
        (b"{bad", "not valid JSON"),
        (b"[1]", "not a torch-advisor findings.json"),
        (b'{"run": {"step_ms_median": "x"}, "findings": []}', "damaged findings.json"),
    ):
        p.write_bytes(raw)
        with pytest.raises(AdvisorError) as ei:
            read(p)
        assert words in str(ei.value) and str(p) in str(ei.value)
