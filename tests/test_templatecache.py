"""The report's templates kept compiled between runs (advisor.output.templatecache): a second
run loads the compiled code instead of compiling, the HTML is the same either way, and every
failure of the cache (damaged file, unusable folder, turned off) compiles from source."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jinja2
import pytest
from jinja2.bccache import bc_magic

from advisor import settings
from advisor.output import html
from advisor.output.templatecache import SUBDIR, template_cache

NAME = "report.html.j2"


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh cache folder, and a fresh template environment before and after the test."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("ADVISOR_NO_CACHE", raising=False)
    html.environment.cache_clear()
    yield tmp_path / "cache" / "torch-advisor" / SUBDIR
    html.environment.cache_clear()


def _fresh_env() -> jinja2.Environment:
    html.environment.cache_clear()
    return html.environment()


def _no_compiling(monkeypatch: pytest.MonkeyPatch, env: jinja2.Environment) -> None:
    def refuse(*_a: object, **_k: object) -> None:
        raise AssertionError("compiled from source")

    monkeypatch.setattr(env, "compile", refuse)


def _files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.jinja")) if folder.is_dir() else []


def test_second_run_loads_the_compiled_template(
    cache_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _fresh_env().get_template(NAME)
    assert len(_files(cache_home)) == 1
    assert cache_home.stat().st_mode & 0o777 == 0o700
    env = _fresh_env()
    _no_compiling(monkeypatch, env)  # the second environment may only read the cache
    second = env.get_template(NAME)
    vm = {"x": 1}
    with pytest.raises(jinja2.UndefinedError):  # StrictUndefined came along with the code
        second.render(vm=vm, css="", js="")
    with pytest.raises(jinja2.UndefinedError):
        first.render(vm=vm, css="", js="")


def test_same_html_with_and_without_the_cache(
    cache_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from advisor.output.viewmodel import build_viewmodel
    from tests.report_samples import gpu_builder, sample_report

    report = sample_report(gpu_builder().load())  # findings, evidence, charts, sources
    vm = build_viewmodel(report, generated_at="2026-01-01 00:00 UTC")
    monkeypatch.setenv("ADVISOR_NO_CACHE", "1")
    _fresh_env()
    plain = html.render_viewmodel(vm)
    assert not _files(cache_home)
    monkeypatch.delenv("ADVISOR_NO_CACHE")
    _fresh_env()
    writing = html.render_viewmodel(vm)  # compiles and writes
    env = _fresh_env()
    _no_compiling(monkeypatch, env)
    reading = html.render_viewmodel(vm)  # loads
    assert plain == writing == reading
    assert "<html" in plain


@pytest.mark.parametrize(
    "damage",
    [b"", b"garbage", bc_magic + b"\x80\x02X\x01"],  # the last: a checksum cut short
    ids=["empty", "garbage", "right-magic-then-cut"],
)
def test_a_damaged_file_compiles_from_source_and_is_written_again(
    cache_home: Path, damage: bytes
) -> None:
    _fresh_env().get_template(NAME)
    (path,) = _files(cache_home)
    good = path.read_bytes()
    path.write_bytes(damage)
    assert _fresh_env().get_template(NAME).render is not None
    assert path.read_bytes() == good  # compiled again and written whole


def test_another_jinja2_or_source_never_reads_the_file(
    cache_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fresh_env().get_template(NAME)
    monkeypatch.setattr(jinja2, "__version__", "0.0-other")
    _fresh_env().get_template(NAME)
    assert len(_files(cache_home)) == 2  # keyed apart: each version its own file


def test_changed_template_source_is_compiled_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "c"))
    monkeypatch.delenv("ADVISOR_NO_CACHE", raising=False)
    cache = template_cache("salt")
    assert cache is not None
    folder = tmp_path / "tpl"
    folder.mkdir()
    for text, want in (("one {{ x }}", "one 1"), ("two {{ x }}", "two 1")):
        (folder / "t.j2").write_text(text)  # same name and path, another source
        loader = jinja2.FileSystemLoader(str(folder))
        env = jinja2.Environment(loader=loader, bytecode_cache=cache)
        assert env.get_template("t.j2").render(x=1) == want


@pytest.mark.parametrize("how", ["a-file", "a-link", "others-may-write", "turned-off"])
def test_no_usable_folder_means_no_cache_and_the_report_still_renders(
    cache_home: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    cache_home.parent.mkdir(parents=True)
    if how == "a-file":
        cache_home.write_text("not a folder")
    elif how == "a-link":
        real = cache_home.parent / "elsewhere"
        real.mkdir(mode=0o700)
        cache_home.symlink_to(real)
    elif how == "others-may-write":
        cache_home.mkdir()
        cache_home.chmod(0o777)
    else:
        monkeypatch.setenv("ADVISOR_NO_CACHE", "1")
    assert template_cache("salt") is None
    env = _fresh_env()
    assert env.bytecode_cache is None
    assert env.get_template(NAME) is not None
    assert not list((cache_home.parent / "elsewhere").glob("*")) if how == "a-link" else True


def test_a_folder_that_cannot_be_written_costs_nothing_but_time(
    cache_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = _fresh_env()
    assert env.bytecode_cache is not None

    def full(*_a: object, **_k: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("tempfile.NamedTemporaryFile", full)
    assert env.get_template(NAME) is not None
    assert not _files(cache_home)


def test_cache_folder_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("ADVISOR_NO_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert settings.cache_dir() == tmp_path / "torch-advisor"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")  # ignored, as XDG says
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert settings.cache_dir() == tmp_path / "home" / ".cache" / "torch-advisor"
    monkeypatch.setenv("ADVISOR_NO_CACHE", "1")
    assert settings.cache_dir() is None


@pytest.mark.parametrize(
    ("settings_a", "settings_b", "want_a", "want_b"),
    [
        ({"trim_blocks": True}, {"trim_blocks": False}, "a\n1", "\na\n\n1"),
        (
            {},
            {"variable_start_string": "[[", "variable_end_string": "]]"},
            "\na\n\n1",
            "\na\n\n{{ x }}",
        ),
    ],
    ids=["trim_blocks", "delimiters"],
)
def test_other_environment_settings_never_read_the_file(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    settings_a: dict[str, Any],
    settings_b: dict[str, Any],
    want_a: str,
    want_b: str,
) -> None:
    """The key holds what shapes the generated code, so a template compiled under other
    settings renders as its own settings say."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "c"))
    monkeypatch.delenv("ADVISOR_NO_CACHE", raising=False)
    folder = tmp_path / "tpl"
    folder.mkdir()
    (folder / "t.j2").write_text("{% if x %}\na\n{% endif %}\n{{ x }}\n")
    got = []
    for settings_ in (settings_a, settings_b, settings_a):
        loader = jinja2.FileSystemLoader(str(folder))
        env = jinja2.Environment(loader=loader, **settings_)
        env.bytecode_cache = template_cache(html._shape(env))
        got.append(env.get_template("t.j2").render(x=1))
    assert got == [want_a, want_b, want_a]
    assert len(_files(tmp_path / "c" / "torch-advisor" / SUBDIR)) == 2
