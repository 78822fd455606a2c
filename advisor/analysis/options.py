"""What the user chose for an analysis (``--only``, ``--skip``, ``--set``, ``--no-source``...):
:class:`Options`, shared by ``analyze``, ``profile``, ``diff``, the multi-rank workers and the
Python API. The command line declares the options once (:mod:`advisor.cli.analysis_options`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from advisor.analysis.detection import all_detectors, load_detectors, resolve_detector_spec
from advisor.detect.thresholds import Thresholds, parse_overrides
from advisor.errors import AdvisorError
from advisor.trace.decode import DEFAULT_MAX_TRACE_BYTES
from advisor.trace.gpus import GPUS, match_name


@dataclass(frozen=True)
class Options:
    only: frozenset[str] = frozenset()
    skip: frozenset[str] = frozenset()
    overrides: dict[str, float] = field(default_factory=dict)
    debug: bool = False
    no_source: bool = False
    source_roots: tuple[str, ...] = ()  # --source-root: more folders code may be read from
    max_trace_bytes: int = DEFAULT_MAX_TRACE_BYTES
    device: str | None = None  # --device: the GPU the trace ran on, whatever it says
    kernel_sequence: bool = False  # digests carry their kernels in order (advisor diff)
    # --detector: more detectors to run, files (absolute paths) or module names
    detectors: tuple[str, ...] = ()
    # the built-in detectors shared with a forked helper on a second core, where there is one
    # (advisor.analysis.sharing): for a command analysing one trace in its own process
    share_cores: bool = False

    def validate(self) -> None:
        load_detectors(self.detectors)  # their ids and thresholds are known from here on
        Thresholds(self.overrides).validate()
        if self.device and match_name(self.device) is None:
            raise AdvisorError(
                f"--device: unknown GPU {self.device!r} (known: "
                + ", ".join(g.name for g in GPUS)
                + ")"
            )
        known = {d.id for d in all_detectors()}
        for flag, ids in (("--only", self.only), ("--skip", self.skip)):
            bad = sorted(i for i in ids if i not in known)
            if bad:
                raise AdvisorError(f"{flag}: unknown finding id {bad[0]!r}")


def split_ids(values: Iterable[str]) -> frozenset[str]:
    return frozenset(v.strip() for item in values for v in item.split(",") if v.strip())


def options_from_cli(
    only: Iterable[str],
    skip: Iterable[str],
    set_: Iterable[str],
    debug: bool,
    no_source: bool,
    max_trace_bytes: int,
    source_roots: Iterable[Path | str] = (),
    device: str | None = None,
    detectors: Iterable[Path | str] = (),
) -> Options:
    """:class:`Options` from the strings the user typed (``--only a,b --set k=v``), validated."""
    opts = Options(
        detectors=tuple(resolve_detector_spec(str(d)) for d in detectors),
        device=device or None,
        only=split_ids(only),
        skip=split_ids(skip),
        overrides=parse_overrides(list(set_)),
        debug=debug,
        no_source=no_source,
        max_trace_bytes=max_trace_bytes,
        source_roots=tuple(str(p) for p in source_roots),
    )
    opts.validate()
    return opts
