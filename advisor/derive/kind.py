"""What the trace is: training steps, inference calls, serving steps, a micro-benchmark, a graph
capture, or a mix; read by the step finder (:mod:`advisor.derive.steps`), shown by ``advisor
inspect``, the report header and the terminal (``run.trace_kind``). Each kind comes from
evidence in the trace, stated in :attr:`TraceKind.why`:

- **capture**: most launch calls lie inside stream-capture ranges (``*StreamBeginCapture`` to
  ``*StreamEndCapture``): they record a CUDA/HIP graph and nothing of them runs on the GPU, so
  the window's timings are capture overhead, not steady-state execution
  (:func:`captured_launches` counts them).
- **compile**: torch.compile compiling: its compile ranges (dynamo, AOT autograd, Inductor:
  :mod:`advisor.derive.onetime`) take at least ``COMPILE_SHARE`` of the recorded window. The
  operators inside them trace the model on fake tensors: compilation, counted once
  (``one-time-init``), never a step's host work.
- **mixed**: some capture beside executed work.
- **serving**: an inference engine's own steps: outermost ranges named for one engine
  iteration over a batch (``execute_model``, vLLM's ``execute_context_N(...)_generation_M(...)``,
  SGLang's ``step[DECODE bs=16]``, ``execute_16_context_0(...)``...; see :func:`is_engine_step`),
  or Python frames of an engine's function so named (``.../gpu_model_runner.py(1002):
  execute_model``).
- **training**: backward or optimizer work (autograd backward ops, ``*Backward`` nodes,
  ``Optimizer.step`` ranges, ops run on the backward thread).
- **micro-benchmark**: no model structure (no ``nn.Module`` calls, no backward, no ranges of the
  user's own but the profiler's steps, no calls of compiled code) and the host's top-level calls
  are a few ops repeated
  (``aten::mm`` ten times): each call is an iteration of the benchmark, not a step of a model.
- **inference**: forward work only.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

import numpy as np

from advisor.derive.onetime import COMPILED_CALL_RE, compile_spans
from advisor.derive.runtime import GPU_WORK_CALL_PARTS, in_capture
from advisor.derive.timeline import union
from advisor.trace.model import Trace
from advisor.trace.names import name_flags

KINDS = ("training", "inference", "serving", "micro-benchmark", "capture", "compile", "mixed")
CAPTURE_SHARE = 0.5  # launch calls inside capture ranges from this share: a capture trace
COMPILE_SHARE = 0.5  # compile ranges over this share of the recorded window: a compile run
BENCH_MAX_OPS = 3  # a micro-benchmark's top-level calls are at most this many distinct ops...
BENCH_MIN_CALLS = 3  # ...the most common repeated at least this often

# an engine iteration: "execute_model", "execute_context_1(...)_generation_0(...)",
# "execute_16_context_0(...)", "step[DECODE bs=16]", "engine_step", "model_step"
_ENGINE_STEP_RE = re.compile(
    r"^(?:execute_model\b|execute_(?:\d+_)?context_\d+|step\[|engine_step\b|model_step\b|"
    r"run_batch\b|forward_batch\b|execute_step\b)",
    re.IGNORECASE,
)
_BACKWARD_RE = re.compile(r"backward|Backward\d*$|^autograd::engine", re.IGNORECASE)
_MODULE_PREFIX = "nn.Module: "


def is_engine_step(name: str) -> bool:
    """A serving engine's annotation of one iteration over a batch."""
    return _ENGINE_STEP_RE.match(name) is not None


def is_module_call(name: str) -> bool:
    """A module call as the profiler records it (``nn.Module: Linear_0``)."""
    return name.startswith(_MODULE_PREFIX)


@dataclass(frozen=True)
class TraceKind:
    kind: str  # one of KINDS
    why: str  # the evidence, one sentence
    iterations: int = 0  # micro-benchmark: the repeated calls
    op: str = ""  # micro-benchmark: the op repeated most


def trace_kind(trace: Trace) -> TraceKind:
    """What ``trace`` is (computed once per trace)."""
    return trace.memo("kind.trace_kind", lambda: _kind(trace))


def _kind(trace: Trace) -> TraceKind:
    captured, launches = captured_launches(trace)
    training = _training(trace)
    if launches and captured >= CAPTURE_SHARE * launches:
        return TraceKind(
            "capture",
            f"{captured:,} of {launches:,} launch calls record a CUDA/HIP graph (stream capture): "
            "nothing of them runs on the GPU in this window",
        )
    compiling = _compiling(trace)
    if compiling:
        return TraceKind("compile", compiling)
    if captured:
        return TraceKind(
            "mixed",
            f"{captured:,} of {launches:,} launch calls record a CUDA/HIP graph (stream "
            "capture); the rest run",
        )
    engine = _engine_steps(trace)
    if engine and not training:
        return TraceKind("serving", f"{engine} engine step annotation(s) ({_engine_names(trace)})")
    if training:
        return TraceKind("training", training)
    bench = _benchmark(trace)
    if bench is not None:
        return bench
    if not len(trace.cpu_ops) and not trace.has_gpu:
        return TraceKind("inference", "no ops recorded")
    return TraceKind("inference", "forward work only: no backward or optimizer ops")


def captured_launches(trace: Trace) -> tuple[int, int]:
    """(launch calls inside stream-capture ranges, launch calls) of the whole window."""
    return trace.memo("kind.captured", lambda: _captured(trace))


def _captured(trace: Trace) -> tuple[int, int]:
    rt = trace.runtime
    if not len(rt):
        return 0, 0
    launch = name_flags(rt["name"], lambda n: any(p in n for p in GPU_WORK_CALL_PARTS))
    inside = in_capture(trace, rt["tid"].to_numpy(), rt["ts_ns"].to_numpy())
    return int((launch & inside).sum()), int(launch.sum())


def _compiling(trace: Trace) -> str:
    """The evidence of a compile run: compile ranges over ``COMPILE_SHARE`` of the window."""
    spans = compile_spans(trace)
    if not spans:
        return ""
    window = max(trace.meta.window.last_ns, int(trace.steps["end_ns"].max()), 1)
    lo, hi = union(
        np.concatenate([s for s, _ in spans.values()]),
        np.concatenate([e for _, e in spans.values()]),
    )
    took = int((hi - lo).sum())
    if took < COMPILE_SHARE * window:
        return ""
    return (
        f"torch.compile compile ranges take {took / 1e6:,.1f} of the {window / 1e6:,.1f} ms "
        "window: the window records compilation (its operators trace the model on fake "
        "tensors), counted once, not steady steps"
    )


def _training(trace: Trace) -> str:
    ops = trace.cpu_ops
    parts = []
    if len(ops):
        bwd = int(name_flags(ops["name"], lambda n: _BACKWARD_RE.search(n) is not None).sum())
        if bwd:
            parts.append(f"{bwd:,} backward ops")
    for df in (trace.annotations, trace.cpu_ops):
        if len(df):
            opt = int(name_flags(df["name"], lambda n: n.startswith("Optimizer.step#")).sum())
            if opt:
                parts.append(f"{opt:,} optimizer steps")
                break
    return ", ".join(parts)


def _engine_names_all(trace: Trace) -> list[str]:
    """The names of the engine's steps: host annotations, else Python frames of the engine's
    function (one entry per step)."""
    ann = trace.annotations
    if len(ann):
        m = name_flags(ann["name"], is_engine_step) & ~ann["on_gpu"].to_numpy(dtype=bool)
        if m.any():
            return [str(n) for n in ann["name"].to_numpy()[m]]
    py = trace.python
    if len(py):
        m = name_flags(py["function"], is_engine_step)
        if m.any():
            f = py.loc[m, ["tid", "ts_ns", "end_ns", "name"]].sort_values(["tid", "ts_ns"])
            ends = f.groupby("tid", sort=False)["end_ns"].cummax().to_numpy()
            same = f["tid"].to_numpy()[1:] == f["tid"].to_numpy()[:-1]
            inner = np.r_[False, same & (f["ts_ns"].to_numpy()[1:] < ends[:-1])]
            return [str(n) for n in f["name"].to_numpy()[~inner]]  # the outermost frames
    return []


def _engine_steps(trace: Trace) -> int:
    return len(_engine_names_all(trace))


def _engine_names(trace: Trace) -> str:
    names = sorted(set(_engine_names_all(trace)))
    short = [n if len(n) <= 40 else n[:37] + "..." for n in names[:2]]
    return ", ".join(short) + (", ..." if len(names) > 2 else "")


def _benchmark(trace: Trace) -> TraceKind | None:
    """A few ops called again and again at the top level, with no model around them."""
    ops = trace.cpu_ops
    if not len(ops) or not trace.has_gpu:
        return None
    py = trace.python
    if len(py) and name_flags(py["name"], is_module_call).any():
        return None
    ann = trace.annotations
    if len(ann):  # the user's own ranges (record_function) other than the profiler's steps
        host = ~ann["on_gpu"].to_numpy(dtype=bool)
        if (host & ~name_flags(ann["name"], lambda n: n.startswith("ProfilerStep#"))).any():
            return None
    top = ops[(ops["depth"].to_numpy() == 0)]
    top = top[~name_flags(top["name"], lambda n: n.startswith("ProfilerStep#"))]
    if not len(top) or name_flags(top["name"], lambda n: bool(COMPILED_CALL_RE.search(n))).any():
        return None  # calls of compiled code run a model's graphs
    counts = Counter(str(n) for n in top["name"].to_numpy())
    op, n = counts.most_common(1)[0]
    if len(counts) > BENCH_MAX_OPS or n < BENCH_MIN_CALLS:
        return None
    calls = int(np.sum(list(counts.values())))
    return TraceKind(
        "micro-benchmark",
        f"{calls} top-level calls of {len(counts)} op(s) ({op} x{n}) and no model around them",
        iterations=n,
        op=op,
    )
