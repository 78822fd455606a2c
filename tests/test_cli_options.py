"""The analysis options are declared once (advisor/cli/analysis_options.py): ``analyze`` and
``profile`` take them with the same names, help and defaults."""

from __future__ import annotations

import typer

from advisor.cli.app import app

SHARED = ("--only", "--skip", "--set", "--no-source", "--debug", "--fail-on", "--json", "--open")


def _params(command: str) -> dict[str, object]:
    group = typer.main.get_command(app)
    cmd = group.commands[command]  # type: ignore[attr-defined]
    return {opt: p for p in cmd.params for opt in p.opts}


def test_analyze_and_profile_declare_the_analysis_options_alike() -> None:
    a, p = _params("analyze"), _params("profile")
    for name in SHARED:
        pa, pp = a[name], p[name]
        assert (pa.help, pa.default, pa.multiple) == (pp.help, pp.default, pp.multiple), name  # type: ignore[attr-defined]
