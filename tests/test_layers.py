"""Imports point down the stack (ARCHITECTURE.md): a module may import its own layer and the
layers below it, never one above, not even inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

# top to bottom; a module belongs to the first layer whose prefix it starts with
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("cli", ("advisor.cli", "advisor.__main__")),
    ("profile and api", ("advisor.profile", "advisor.api")),
    ("multirank", ("advisor.multirank",)),
    ("analysis", ("advisor.analysis",)),
    ("detectors", ("advisor.detectors",)),
    ("detector API", ("advisor.detect",)),
    ("replay", ("advisor.replay",)),
    ("output", ("advisor.output",)),
    ("derive", ("advisor.derive",)),
    ("trace", ("advisor.trace",)),
    (
        "base",
        ("advisor.report", "advisor.findings", "advisor.errors", "advisor.settings", "advisor"),
    ),
]


def layer_of(module: str) -> int:
    for i, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return i
    raise AssertionError(f"{module} is in no layer")


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted((REPO / "advisor").rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    for path in sorted((REPO / "heuristics").glob("*.py")):
        found["advisor.detectors." + path.stem] = path
    return found


def imported(module: str, path: Path) -> set[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            out.add(name)
            # "from advisor import settings" imports advisor.settings
            out.update(f"{name}.{a.name}" for a in node.names if f"{name}.{a.name}" in ALL)
    return {m for m in out if m == "advisor" or m.startswith("advisor.")}


ALL = modules()


def test_every_module_has_a_layer() -> None:
    for module in ALL:
        layer_of(module)


def test_no_import_runs_up_the_stack() -> None:
    upward = []
    for module, path in ALL.items():
        mine = layer_of(module)
        for dep in imported(module, path):
            if dep in ALL and dep.startswith(module + "."):
                continue  # a package importing its own modules
            if layer_of(dep) < mine:
                upward.append(
                    f"{module} ({LAYERS[mine][0]}) imports {dep} ({LAYERS[layer_of(dep)][0]})"
                )
    assert not upward, "\n".join(upward)


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    path = tmp_path / "x.py"
    path.write_text("def f():\n    from advisor.cli.app import app\n")
    assert "advisor.cli.app" in imported("advisor.trace.x", path)
    assert layer_of("advisor.cli.app") < layer_of("advisor.trace.x")


def environment_reads(path: Path) -> list[int]:
    """Lines of ``path`` that read or pass on the environment (``os.environ``, ``os.getenv``)."""
    tree = ast.parse(path.read_text())
    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "os"
        and node.attr in ("environ", "getenv", "environb", "putenv", "unsetenv")
    )


def test_only_settings_reads_the_environment() -> None:
    """Every environment variable the product reads is in advisor/settings.py (docs/settings.md)."""
    readers = {
        f"{path.relative_to(REPO)}:{line}"
        for module, path in ALL.items()
        if module != "advisor.settings"
        for line in environment_reads(path)
    }
    assert not readers, sorted(readers)
    documented = (REPO / "docs" / "settings.md").read_text()
    source = (REPO / "advisor" / "settings.py").read_text()
    for name in (
        "ADVISOR_DEBUG",
        "ADVISOR_NO_FORK",
        "ADVISOR_NO_DASK",
        "ADVISOR_TRY",
        "NO_COLOR",
        "LOCAL_WORLD_SIZE",
        "CUDA_LAUNCH_BLOCKING",
        "PYTORCH_CUDA_ALLOC_CONF",
    ):
        assert name in source and name in documented, name


def test_the_environment_check_sees_a_read(tmp_path: Path) -> None:
    path = tmp_path / "x.py"
    path.write_text("import os\n\nx = os.environ.get('A')\ny = 'os.environ in a string'\n")
    assert environment_reads(path) == [3]
