"""docs/errors.md lists every guarantee with the tests that hold it: each test it names exists."""

from __future__ import annotations

import ast
import re

from tests.conftest import REPO


def test_every_test_the_guarantee_table_names_exists() -> None:
    doc = (REPO / "docs" / "errors.md").read_text(encoding="utf-8")
    table = doc.split("## Every guarantee and the test that holds it", 1)[1]
    named = 0
    for row in table.splitlines():
        if not row.startswith("| ") or row.startswith("| guarantee"):
            continue
        current = None
        for ref in re.findall(r"`([^`]+)`", row.split(" | ")[-1]):
            file, _, func = ref.partition("::")
            if file.startswith("benchmarks/"):
                assert (REPO / file.split()[0]).is_file(), ref
                continue
            current = file or current
            assert current, ref
            path = REPO / "tests" / current
            assert path.is_file(), ref
            if func:
                tree = ast.parse(path.read_text(encoding="utf-8"))
                funcs = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
                assert func.split("[")[0] in funcs, ref
            named += 1
    assert named > 40
