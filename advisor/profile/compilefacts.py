"""What ``torch.compile`` did in the live run: the ``compile`` block of run.json.

- **graph_breaks**: each graph break dynamo logs (once per compilation of a frame), with its
  reason, its class (``gb_type``: "Data-dependent branching", "Unsupported Tensor.item() call
  ...") and the user's line (the innermost frame of the break's stack in the user's files),
  counted per line and class, with the compile ids it happened in. Recorded by wrapping dynamo's
  ``InstructionTranslatorBase.log_graph_break`` once the script first calls ``torch.compile``
  (importing dynamo earlier would cost the script seconds for nothing).
- **frames** and **recompiles**: ``torch._dynamo.utils.get_compilation_metrics()`` read at the
  end of the run: per compilation its compile id (``frame/attempt``, as the trace's
  ``Torch-Compiled Region: N/M`` markers name it), the compiled function and its file and first
  line, whether it is a resume function (the code after a graph break), its graph size and
  compile time, the guard that failed when it is a recompilation (``recompile_reason``), and a
  failure (``fail_type``/``fail_reason``).
- **counters**: the totals of ``torch._dynamo.utils.counters`` groups (graph breaks,
  unsupported constructs, frames, unique graphs).

Every part is best effort: a torch version whose internals differ records what it can, and
nothing here ever raises into the script.
"""

from __future__ import annotations

from typing import Any

from advisor.profile.facts import is_user_file
from advisor.runinfo import Compile, CompileCounters, CompiledFrame, GraphBreak, Recompile

MAX_ROWS = 32
MAX_FRAMES = 64
_REASON_CHARS = 400
RESUME_PREFIX = "torch_dynamo_resume_in_"


def _own(filename: object) -> bool:
    """A file of torch-advisor itself (its module hooks run under dynamo too)."""
    import os

    import advisor

    root = os.path.dirname(os.path.abspath(advisor.__file__)) + os.sep
    return os.path.abspath(str(filename or "")).startswith(root)


def _first_line(text: object) -> str:
    s = str(text or "").strip()
    return s.splitlines()[0][:_REASON_CHARS] if s else ""


class CompileRecorder:
    def __init__(self) -> None:
        self.breaks: dict[tuple[Any, ...], dict[str, Any]] = {}
        self._patch: tuple[Any, str, Any] | None = None

    def install(self) -> None:
        """Wrap dynamo's graph-break logging (called when the script first compiles)."""
        if self._patch is not None:
            return
        try:
            from torch._dynamo import symbolic_convert as sc

            owner = sc.InstructionTranslatorBase
            orig = owner.__dict__["log_graph_break"]
        except (ImportError, AttributeError, KeyError):
            return
        rec = self

        def log_graph_break(tx: Any, code_options: Any, reason: Any, exc: Any) -> Any:
            if not getattr(exc, "logged", False):
                try:
                    rec._on_break(reason, exc)
                except Exception:  # noqa: BLE001 (capture never breaks the script)
                    pass
            return orig(tx, code_options, reason, exc)

        setattr(owner, "log_graph_break", log_graph_break)  # noqa: B010 (a method, patched)
        self._patch = (owner, "log_graph_break", orig)

    def uninstall(self) -> None:
        if self._patch is not None:
            owner, name, orig = self._patch
            setattr(owner, name, orig)
            self._patch = None

    def _on_break(self, reason: Any, exc: Any) -> None:
        import torch

        stack = getattr(exc, "real_stack", None)
        if stack is None:
            stack = torch._guards.TracingContext.extract_stack()
        user = [f for f in stack or () if is_user_file(getattr(f, "filename", ""))]
        site = user[-1] if user else (stack[-1] if stack else None)
        file = getattr(site, "filename", None)
        line = getattr(site, "lineno", None)
        kind = getattr(exc, "gb_type", None) or type(exc).__name__
        cid = torch._guards.CompileContext.current_compile_id()
        key = (file, line, str(kind))
        row = self.breaks.get(key)
        if row is None:
            if len(self.breaks) >= MAX_ROWS:
                return
            row = self.breaks[key] = {
                "file": file,
                "line": line,
                "function": getattr(site, "name", None),
                "type": str(kind),
                "reason": _first_line(reason),
                "count": 0,
                "compile_ids": [],
            }
        row["count"] += 1
        if cid is not None and len(row["compile_ids"]) < 8:
            row["compile_ids"].append(str(cid))

    def facts(self) -> Compile:
        """The ``compile`` block (empty when the script never compiled)."""
        import sys

        if "torch._dynamo" not in sys.modules:
            return Compile()
        breaks = tuple(
            GraphBreak(
                file=b["file"],
                line=b["line"],
                function=b["function"],
                kind=b["type"],
                reason=b["reason"],
                count=b["count"],
                compile_ids=tuple(b["compile_ids"]),
            )
            for b in self.breaks.values()
        )
        try:
            frames, recompiles, counters = _metrics()
        except Exception as err:  # noqa: BLE001 (facts are best effort)
            return Compile(graph_breaks=breaks, error=f"{type(err).__name__}: {err}")
        return Compile(graph_breaks=breaks, frames=frames, recompiles=recompiles, counters=counters)


def _metrics() -> tuple[tuple[CompiledFrame, ...], tuple[Recompile, ...], CompileCounters]:
    from torch._dynamo import utils

    frames: list[CompiledFrame] = []
    recompiles: list[Recompile] = []
    for m in list(utils.get_compilation_metrics())[-MAX_FRAMES:]:
        name = str(m.co_name or "")
        if not name or _own(m.co_filename):
            continue  # a backward graph's entry (no code object) or the advisor's own hooks
        row = CompiledFrame(
            compile_id=None if m.compile_id is None else str(m.compile_id),
            function=name,
            file=m.co_filename,
            line=m.co_firstlineno,
            resume=name.startswith(RESUME_PREFIX),
            graph_ops=m.graph_op_count,
            compile_s=m.entire_frame_compile_time_s,
            graph_breaks=getattr(m, "num_graph_breaks", None),
            fail_type=m.fail_type,
            fail_reason=_first_line(m.fail_reason) or None,
        )
        frames.append(row)
        reason = getattr(m, "recompile_reason", None)
        if reason and len(recompiles) < MAX_ROWS:
            recompiles.append(
                Recompile(
                    compile_id=row.compile_id,
                    function=name,
                    file=m.co_filename,
                    line=m.co_firstlineno,
                    reason=_first_line(reason),
                    compile_s=m.entire_frame_compile_time_s,
                )
            )
    c = utils.counters
    counters = CompileCounters(
        graph_break=int(sum(c["graph_break"].values())),
        unimplemented=int(sum(c["unimplemented"].values())),
        frames={str(n): int(v) for n, v in c["frames"].items()},
        stats={str(n): int(v) for n, v in c["stats"].items()},
    )
    return tuple(frames), tuple(recompiles), counters
