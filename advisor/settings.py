"""Every environment variable torch-advisor reads, in one place (documented in
docs/settings.md). Each is read when asked, so a test or a parent process may set it at any time.

- ``ADVISOR_DEBUG=1``: an internal error prints its traceback (not only its one line); a
  failing decoding child says so before the trace is decoded in-process.
- ``ADVISOR_NO_FORK=1``: never fork the decoding child (:mod:`advisor.trace.prefetch`) or the
  detectors' helper (:mod:`advisor.analysis.sharing`); the trace is decoded, and every detector
  run, in the command's own process.
- ``ADVISOR_NO_DASK=1``: analyze many ranks in a local process pool, never on Dask
  (:mod:`advisor.multirank.analyze`).
- ``ADVISOR_NO_PLUGINS=1``: installed plugins (entry points of ``torch_advisor.detectors``) are
  not loaded; only the built-in detectors and those named with ``--detector`` run
  (:mod:`advisor.analysis.detection`). The test suite sets it, so installing a plugin leaves it
  green.
- ``ADVISOR_PLUGIN_TIMEOUT`` (seconds, default ``PLUGIN_TIMEOUT_S``; 0: no limit): how long a
  plugin's detector may run (at least; longer on a trace the built-in detectors take long on)
  before it is stopped and reported under *errored* (:mod:`advisor.analysis.isolation`).
- ``ADVISOR_SCHEDULER_TIMEOUT`` (seconds, default ``SCHEDULER_TIMEOUT_S``): how long
  ``--scheduler ADDRESS`` waits for the scheduler to answer; a refused connection fails at once.
- ``NO_COLOR`` (any value, https://no-color.org): no colors in the terminal summary.
- ``ADVISOR_NO_CACHE=1``: compile the report's templates on every run instead of keeping them
  compiled in the user's cache folder (:func:`cache_dir`: ``XDG_CACHE_HOME``, else ``~/.cache``;
  see :mod:`advisor.output.templatecache`).
- ``ADVISOR_TRY``: set by ``advisor try`` for the ``advisor profile`` runs it starts (the fixes
  to apply, as JSON; :mod:`advisor.profile.trial.runtime`), removed before the script starts.
- ``LOCAL_WORLD_SIZE``: set by torchrun; ``advisor try``'s DataLoader fix shares the node's CPUs
  among its ranks.
- Recorded, never acted on: ``CUDA_LAUNCH_BLOCKING`` and the caching allocator's variables
  (``PYTORCH_CUDA_ALLOC_CONF`` ...) go into run.json, where the detectors read them.
- ``HOME`` (with the password database's entry): the home folder, never a default source root
  (:mod:`advisor.derive.sources`).
- ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``TORCHELASTIC_RUN_ID``: set by torchrun, read by
  ``advisor profile`` (:func:`advisor.profile.torchrun.rank_env`) to write one trace per rank and merge them on rank 0.

Test-only switches (read by the test suite, never by the product): ``UPDATE_GOLDEN=1`` and
``ADVISOR_UPDATE_GOLDEN=1`` rewrite the findings and view-model goldens,
``ADVISOR_SCREENSHOTS=DIR`` keeps the report browser test's screenshots.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any


def _on(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


def debug() -> bool:
    """``ADVISOR_DEBUG``: tracebacks for internal errors."""
    return _on("ADVISOR_DEBUG")


def no_fork() -> bool:
    """``ADVISOR_NO_FORK``: decode and detect in-process, no child."""
    return _on("ADVISOR_NO_FORK")


def no_dask() -> bool:
    """``ADVISOR_NO_DASK``: many ranks in a local process pool, never on Dask."""
    return _on("ADVISOR_NO_DASK")


def no_plugins() -> bool:
    """``ADVISOR_NO_PLUGINS``: ignore installed plugins (entry points)."""
    return _on("ADVISOR_NO_PLUGINS")


PLUGIN_TIMEOUT_S = 5.0


def plugin_timeout_s() -> float:
    """``ADVISOR_PLUGIN_TIMEOUT``: seconds a plugin's detector may run (0: no limit)."""
    return _seconds("ADVISOR_PLUGIN_TIMEOUT", PLUGIN_TIMEOUT_S, allow_zero=True)


SCHEDULER_TIMEOUT_S = 10.0


def scheduler_timeout_s() -> float:
    """``ADVISOR_SCHEDULER_TIMEOUT``: seconds to wait for a ``--scheduler`` to answer."""
    return _seconds("ADVISOR_SCHEDULER_TIMEOUT", SCHEDULER_TIMEOUT_S, allow_zero=False)


def _seconds(name: str, default: float, allow_zero: bool) -> float:
    """A number of seconds from ``name`` (``default`` when unset); a one-line error otherwise."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not (0 <= value < 1e9) or (value == 0 and not allow_zero):  # NaN fails too
        from advisor.errors import AdvisorError

        zero = ", 0 for no limit" if allow_zero else ""
        raise AdvisorError(f"{name}={raw!r}: expected a number of seconds{zero}")
    return value


def annotate_always() -> bool:
    """``ADVISOR_ANNOTATE=1``: write trace.annotated.json.gz whatever the trace's size (by
    default only for traces up to ``ANNOTATED_MAX_BYTES``, a copy being as large again)."""
    return _on("ADVISOR_ANNOTATE")


def no_color() -> bool:
    """``NO_COLOR``: plain terminal output (set to any non-empty value)."""
    return bool(os.environ.get("NO_COLOR"))


def cache_dir() -> Path | None:
    """Where torch-advisor keeps what it may rebuild at any time (the compiled report
    templates): ``$XDG_CACHE_HOME/torch-advisor``, else ``~/.cache/torch-advisor``; None with
    ``ADVISOR_NO_CACHE=1`` or without a home folder."""
    if _on("ADVISOR_NO_CACHE"):
        return None
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):  # the XDG rule: a relative value is ignored
        home = os.path.expanduser("~")
        if not os.path.isabs(home):
            return None
        base = os.path.join(home, ".cache")
    return Path(base) / "torch-advisor"


def home_folders() -> set[Path]:
    """The user's home folder (``HOME``, and the account's from the password database), as real
    paths: never a default source root (:mod:`advisor.derive.sources`)."""
    found: set[Path] = set()
    cands = [os.environ.get("HOME")]
    try:
        import pwd

        cands.append(pwd.getpwuid(os.getuid()).pw_dir)
    except (ImportError, KeyError, AttributeError):
        pass
    for c in cands:
        if c:
            with contextlib.suppress(OSError, ValueError):
                found.add(Path(os.path.realpath(c)))
    return found


def torchrun_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables torchrun sets that ``advisor profile`` reads (absent ones left out)."""
    e = os.environ if env is None else env
    keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID")
    return {k: e[k] for k in keys if k in e}


def local_world_size() -> int:
    """``LOCAL_WORLD_SIZE`` (torchrun): the ranks on this node; 1 when unset or not a number."""
    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        return 1


TRY_VAR = "ADVISOR_TRY"  # advisor try -> the advisor profile runs it starts


def try_child_env(spec: str) -> dict[str, str]:
    """This process's environment with ``ADVISOR_TRY`` set to ``spec``, for a child run."""
    return {**os.environ, TRY_VAR: spec}


def pop_try_spec() -> str | None:
    """``ADVISOR_TRY``, removed from the environment (the script's own children never see it)."""
    return os.environ.pop(TRY_VAR, None)


STARTER_VAR = "ADVISOR_DIE_WITH"  # the advisor -> the fork server it starts (advisor.lifeline)
FORKSERVER_VAR = "ADVISOR_FORKSERVER"  # the advisor's fork server -> the workers it forks


@contextlib.contextmanager
def starter_set(pid: int) -> Iterator[None]:
    """``ADVISOR_DIE_WITH`` set to ``pid`` while a helper process starts, then as it was."""
    old = os.environ.get(STARTER_VAR)
    os.environ[STARTER_VAR] = str(pid)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(STARTER_VAR, None)
        else:
            os.environ[STARTER_VAR] = old


def starter_given() -> bool:
    """Whether ``ADVISOR_DIE_WITH`` is set: this process is a helper the advisor started."""
    return bool(os.environ.get(STARTER_VAR))


def pop_starter() -> str:
    """``ADVISOR_DIE_WITH``, removed from the environment (the helper's children never see it)."""
    return os.environ.pop(STARTER_VAR, "")


def set_forkserver(pid: int) -> None:
    """In the advisor's fork server: ``ADVISOR_FORKSERVER``, its pid, for the workers it forks."""
    os.environ[FORKSERVER_VAR] = str(pid)


def forkserver_pid() -> int | None:
    """In a worker: the pid of the advisor's fork server that forked it (None: not set)."""
    raw = os.environ.get(FORKSERVER_VAR, "")
    return int(raw) if raw.isdigit() else None


def cuda_launch_blocking() -> bool:
    """``CUDA_LAUNCH_BLOCKING``, recorded in run.json (every launch then waits for its kernel)."""
    return _on("CUDA_LAUNCH_BLOCKING")


def allocator_env() -> dict[str, Any]:
    """The caching allocator's settings from the environment (CUDA or ROCm names), recorded in
    run.json."""
    env = os.environ
    conf = (
        env.get("PYTORCH_CUDA_ALLOC_CONF")
        or env.get("PYTORCH_HIP_ALLOC_CONF")
        or env.get("PYTORCH_ALLOC_CONF")
    )
    raw = env.get("PYTORCH_NO_CUDA_MEMORY_CACHING") or env.get("PYTORCH_NO_HIP_MEMORY_CACHING")
    # current torch reads "1" as off; older versions took any value, "0" included
    return {
        "alloc_conf": conf,
        "caching_disabled": raw not in (None, "", "0"),
        "no_memory_caching_env": raw,
    }
