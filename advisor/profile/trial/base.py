"""What a fix for ``advisor try`` is: a documented, reversible patch applied at run time.

A :class:`Fix` names the finding(s) whose estimate it answers, says what it changes and its
risks (docs/try.md), whether it changes numerics (then ``--fix all-safe`` leaves it out), and
decides from the *before* run (:class:`RunFacts`) whether it can act at all. Its ``apply``
runs inside the script's process, before the script's first line, through a :class:`Patcher`
that records every attribute it replaces and every hook it adds, so ``revert`` puts the
interpreter back exactly as it was (last patch first).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from advisor import runinfo
from advisor.runfolder import FINDINGS_NAME, RUN_NAME
from advisor.runinfo import DataLoader, Optimizer, RunInfo, ZeroGrad

MAX_NOTES = 20  # per fix: what the patch did, kept for run.json and the report


@dataclass(frozen=True)
class RunFacts:
    """What the before run tells about the script: device, setup, the findings that fired."""

    cuda: bool = False
    compute_capability: float | None = None
    dataloaders: tuple[DataLoader, ...] = ()
    optimizers: tuple[Optimizer, ...] = ()
    zero_grad: tuple[ZeroGrad, ...] = ()
    eval_with_grad: bool = False
    findings: frozenset[str] = frozenset()

    @staticmethod
    def from_run_dir(folder: Path) -> RunFacts:
        """From ``run.json`` and ``findings.json`` of an ``advisor profile`` folder (missing or
        unreadable files give the empty facts)."""
        from advisor.errors import AdvisorError
        from advisor.report import read

        run = runinfo.read_file(folder / RUN_NAME) or RunInfo()
        try:
            found = {f.id for f in read(folder / FINDINGS_NAME).findings}
        except AdvisorError:
            found = set()
        raw_cc = run.device.compute_capability
        try:
            cc = float(raw_cc) if raw_cc else None
        except (TypeError, ValueError):
            cc = None
        return RunFacts(
            cuda=run.device.type == "cuda",
            compute_capability=cc,
            dataloaders=run.dataloaders,
            optimizers=run.optimizers,
            zero_grad=run.zero_grad,
            eval_with_grad=bool(run.forward.eval_with_grad),
            findings=frozenset(found),
        )


@dataclass
class Patcher:
    """Every change the fixes make, recorded so it can be undone, plus what each fix did."""

    _undo: list[tuple[str, Any]] = field(default_factory=list)  # (fix id, undo callable)
    notes: dict[str, list[str]] = field(default_factory=dict)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    def patch(self, fix_id: str, owner: Any, name: str, new: Any) -> Any:
        """Replace ``owner.name`` with ``new``; returns the original (the one ``new`` wraps)."""
        had = name in getattr(owner, "__dict__", {})
        orig = owner.__dict__[name] if had else getattr(owner, name, None)

        def undo() -> None:
            if had:
                setattr(owner, name, orig)
            else:
                delattr(owner, name)

        setattr(owner, name, new)
        self._undo.append((fix_id, undo))
        return orig

    def on_revert(self, fix_id: str, undo: Any) -> None:
        """Register any other undo step (a hook handle's ``remove``, a flag to restore)."""
        self._undo.append((fix_id, undo))

    def note(self, fix_id: str, text: str) -> None:
        rows = self.notes.setdefault(fix_id, [])
        if text not in rows and len(rows) < MAX_NOTES:
            rows.append(text)

    def count(self, fix_id: str, what: str, n: int = 1) -> None:
        c = self.counts.setdefault(fix_id, {})
        c[what] = c.get(what, 0) + n

    def revert(self, fix_id: str | None = None) -> None:
        """Undo the patches of ``fix_id`` (all fixes when None), the last one first."""
        keep: list[tuple[str, Any]] = []
        while self._undo:
            fid, undo = self._undo.pop()
            if fix_id is not None and fid != fix_id:
                keep.append((fid, undo))
                continue
            try:
                undo()
            except Exception as err:  # noqa: BLE001 (one undo never blocks the others)
                self.errors.setdefault(fid, f"revert: {type(err).__name__}: {err}")
        self._undo = keep[::-1]


class Fix(Protocol):
    """One run-time fix. ``applies_to`` returns None when the fix can act on this run, else
    the one-line reason it cannot (reported, never faked)."""

    id: str
    finding_ids: tuple[str, ...]  # findings whose estimated saving this fix answers
    changes: str  # what the patch changes (docs/try.md, the report)
    risks: str
    numerics_changing: bool  # left out of --fix all-safe; its loss check matters most

    def applies_to(self, facts: RunFacts) -> str | None: ...

    def apply(self, patcher: Patcher) -> None: ...

    def revert(self, patcher: Patcher) -> None: ...


class PatchFix:
    """Shared behaviour: reverting undoes this fix's own patches; safe fixes apply anywhere
    their finding or setup is present (subclasses narrow ``applies_to``)."""

    id: str = ""
    finding_ids: tuple[str, ...] = ()
    changes: str = ""
    risks: str = ""
    numerics_changing: bool = False

    def applies_to(self, facts: RunFacts) -> str | None:
        return None

    def apply(self, patcher: Patcher) -> None:  # pragma: no cover (every fix overrides it)
        raise NotImplementedError

    def revert(self, patcher: Patcher) -> None:
        patcher.revert(self.id)
