"""torch.compile recompilations: a compiled function compiled again because a guard failed.

**What it detects.** Compiled code is guarded by what dynamo assumed while compiling it:
tensor shapes, strides, dtypes and devices, Python numbers it specialized on, object
identities, grad mode. A call that fails every guard compiles the function again; after
``torch._dynamo.config.recompile_limit`` compilations the function runs eagerly. With
``advisor profile``, run.json lists every recompilation with the failed guard
(``compile.recompiles``: ``tensor 'x' size mismatch at index 1. expected 16, actual 17``) and
the compiled function's file and line. In a trace, compile ranges inside the steady steps (with
the compile id ``N/M`` dynamo annotates, M > 0 for a recompilation) show recompiles in the loop,
and compiled regions of one frame with several compile ids (``Torch-Compiled Region: 0/0`` and
``0/1``) show a function that runs more than one compiled version.

**Why it costs time.** Each recompilation takes from a second to minutes of host time in the
step where it happens, and a function past the recompile limit loses compilation altogether.

**How the saving is estimated.** The compile time inside the steady steps is replayed away
(see docs/savings.md; range: half of it stays), as a per-step cost: compilations in every
step of the loop keep happening until the limit. Where the window holds no compilation (the
recompilations happened before it), the finding is information: no per-step saving is claimed.
Compile time outside the steady steps is ``one-time-init``'s.

**How to fix.** Per failed guard: a size that varies -> ``torch._dynamo.mark_dynamic(x, dim)``
on the input, ``torch.compile(dynamic=True)``, or pad/bucket lengths to a few sizes; a dtype,
device or ``requires_grad`` that varies -> keep it fixed; a Python number that varies (a step
counter, a float hyper-parameter) -> pass it as a tensor; a new object each call (``___check_obj_id``)
-> build it once outside the loop; grad mode or ``train()``/``eval()`` switches -> compile the
training and evaluation functions separately. ``TORCH_LOGS=recompiles`` prints each one.

**Known false positives.** A few recompilations early in the run (a last, shorter batch; the
first evaluation call) are normal: they are reported as information when the window shows none.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

import pandas as pd

from advisor.derive.timeline import union
from advisor.detect.draft import Draft
from advisor.detect.registry import Context, detector
from advisor.findings import Evidence, Location
from advisor.replay.fixes import ShrinkHost
from advisor.trace.model import Trace

from ._compile import Advice, advice_for, compile_in_steps, location, regions, user_rows
from ._per_step import fmt_ms, n_steps

ID = "compile-recompiles"
TITLE = "torch.compile recompiles"

ADVICE: Advice = (
    (
        re.compile(r"size mismatch|stride mismatch|\.size\(\)|\.shape|sizes", re.I),
        "a tensor size that varies: mark it dynamic (torch._dynamo.mark_dynamic(x, dim) before "
        "the call, or torch.compile(dynamic=True)), or pad/bucket the lengths to a few sizes",
    ),
    (
        re.compile(r"dtype|device|requires_grad|dispatch key", re.I),
        "a dtype, device or requires_grad that varies between calls: keep it fixed",
    ),
    (
        re.compile(r"check_obj_id|\bid\(|ID_MATCH|___check_type_id", re.I),
        "a different object on each call (a new module, closure, list or dict): build it once "
        "outside the loop",
    ),
    (
        re.compile(r"grad_mode|is_grad_enabled|training|GLOBAL_STATE", re.I),
        "grad mode or train()/eval() switching between calls: compile the training and the "
        "evaluation functions separately, or keep the mode fixed",
    ),
    (
        re.compile(r"recompile_limit|cache_size_limit|cache limit", re.I),
        "the recompile limit was reached: the function now runs without compilation; remove "
        "the cause of the recompilations rather than raising the limit",
    ),
    (
        re.compile(r"L\[.*\] == |== \d|!= \d|\bint\b|\bfloat\b", re.I),
        "a Python number that changes between calls (a step counter, a hyper-parameter): pass "
        "it as a tensor, or let dynamo treat it as dynamic",
    ),
)
DEFAULT_ADVICE = "see the failed guard: TORCH_LOGS=recompiles prints each recompilation"

SNIPPET = """\
# a size that varies: one dynamic compilation instead of one per size
x = torch.randn(batch, seq, dim, device=device)
torch._dynamo.mark_dynamic(x, 1)          # dim 1 (the sequence length) is dynamic
out = model(x)
# or: model = torch.compile(model, dynamic=True); or pad lengths to a few buckets
# see every recompilation:  TORCH_LOGS=recompiles python train.py"""


def _trace_recompiles(trace: Trace) -> list[dict[str, Any]]:
    """Frames whose regions in the steady steps run more than one compiled version."""
    reg = regions(trace)
    out = []
    for f, g in reg.groupby("frame", sort=True):
        versions = sorted(set(g["attempt"].tolist()))
        if len(versions) > 1:
            out.append({"frame": int(f), "versions": versions, "count": len(versions) - 1})
    return out


class _Facts(NamedTuple):
    """The recompilations and their compile time inside the steady steps."""

    live: list[dict[str, Any]]  # run.json's compile.recompiles (user code), or []
    again: pd.DataFrame  # compile ranges of the steps that recompile
    n_in: int  # recompilations (frame, attempt) inside the steps
    in_ns: int  # compile time of those steps (union)
    in_ms: float  # per step
    groups: list[dict[str, Any]]  # the recompilations by site and failed guard, most first


@detector(ID, TITLE, needs=("cpu_ops",))
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    f = _measure(trace, ctx)
    if f is None:
        return []
    fields, how = _value(trace, ctx, f)
    advice = "; ".join(
        f"{_where(g)}: {advice_for(ADVICE, str(g.get('reason') or ''), DEFAULT_ADVICE)}"
        for g in f.groups[:3]
    )
    locs = [location(g, str(g.get("function") or "")) for g in f.groups]
    return [
        Draft(
            id=ID,
            title=TITLE,
            **fields,
            confidence="high" if f.live else "medium",
            summary=_summary(f),
            recommendation=f"Stop the recompilations: {advice}. TORCH_LOGS=recompiles prints each.",
            snippet=SNIPPET,
            evidence=_evidence(trace, f),
            locations=tuple(loc for loc in locs if isinstance(loc, Location))[:5],
            assumptions=(
                "Recompilations: "
                + (
                    "run.json's compile.recompiles (dynamo's failed guards)"
                    if f.live
                    else "the trace"
                )
                + "; in the loop: compile ranges with a compile id N/M, M > 0, inside the steady "
                "steps (compile time outside them is one-time-init's).",
                how,
            ),
            latent=not len(f.again),
            extra={
                "recompiles": sum(g["count"] for g in f.groups),
                "in_steps": f.n_in,
                "compile_ms_per_step": round(f.in_ms, 3),
            },
        )
    ]


def _measure(trace: Trace, ctx: Context) -> _Facts | None:
    """The recompilations (run.json's, else the trace's) and the compile time of the steps
    that recompile; None when there are none."""
    live = user_rows(ctx.live.compile.recompiles)
    comp = compile_in_steps(trace)
    # the steps that recompile (a compile id N/M with M > 0): all their compile time (the
    # backward graph, compiled at the first backward, carries no id); a first compile (M = 0)
    # is one-time-init's
    ids = comp[comp["attempt"].to_numpy() > 0]
    again = comp[comp["step"].isin(set(ids["step"].tolist()))]
    n_in = len(set(zip(ids["frame"].tolist(), ids["attempt"].tolist(), strict=True)))
    multi = _trace_recompiles(trace)
    if not live and not n_in and not multi:
        return None
    us, ue = union(again["ts_ns"].to_numpy(), again["end_ns"].to_numpy())
    in_ns = int((ue - us).sum())
    seen = set(zip(ids["frame"].tolist(), ids["attempt"].tolist(), strict=True))
    for m in multi:
        seen |= {(m["frame"], a) for a in m["versions"] if a > 0}
    rows = live or [
        {
            "file": None,
            "line": None,
            "function": f"compiled frame {f}",
            "reason": None,
            "count": sum(1 for g, _ in seen if g == f),
            "versions": sorted(a for g, a in seen if g == f),
        }
        for f in sorted({g for g, _ in seen})
    ]
    return _Facts(live, again, n_in, in_ns, in_ns / 1e6 / n_steps(trace), _by_guard(rows))


def _by_guard(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The recompilations grouped by site and failed guard (its values left out), most first."""
    by_guard: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in rows:
        guard = _guard_kind(str(r.get("reason") or ""))
        key = (r.get("file"), r.get("line"), guard)
        g = by_guard.setdefault(key, {**r, "count": 0, "guard": guard})
        g["count"] += int(r.get("count") or 1)
    return sorted(by_guard.values(), key=lambda g: -g["count"])


def _value(trace: Trace, ctx: Context, f: _Facts) -> tuple[dict[str, Any], str]:
    """The recompiling steps' compile time gone, replayed; without GPU work to replay, that
    compile time per step; no compilation inside the steps: no saving."""
    if not len(f.again):
        return (
            {"est_savings_ms": 0.0},
            "No compilation inside the steady steps: no per-step saving is claimed.",
        )
    tids = f.again["tid"].to_numpy()
    rep = ctx.whatif(
        ShrinkHost(
            f.again["ts_ns"].to_numpy(),
            f.again["end_ns"].to_numpy(),
            None if (tids < 0).any() else tids,
            keep=0.0,
            low=0.5,
            label="no recompilation",
        )
    )
    if rep.replayed and trace.has_gpu:
        return rep.draft_fields(), rep.assumption
    return (
        {
            "est_savings_ms": round(f.in_ms, 3),
            "est_savings_range_ms": (round(f.in_ms / 2, 3), round(f.in_ms, 3)),
        },
        "Not replayed (no GPU work the replay can place): the compile time per step.",
    )


def _summary(f: _Facts) -> str:
    first = f.groups[0]
    reason = f": {first['reason']}" if first.get("reason") else ""
    in_loop = (
        f"; {f.n_in} of them inside the steady steps, {fmt_ms(f.in_ms)} of compile time per step"
        if len(f.again)
        else ""
    )
    n = sum(g["count"] for g in f.groups)
    summary = f"{n} recompilation(s) of compiled code ({_where(first)}{reason}){in_loop}."
    if not f.live:
        summary += " run.json (advisor profile) would name the failed guards."
    return summary


def _evidence(trace: Trace, f: _Facts) -> tuple[Evidence, ...]:
    evidence = [
        Evidence(
            f"{_where(g)}: {g.get('reason') or 'compilations N/M with M = ' + str(g.get('versions'))}",
            g["count"],
            0.0,
        )
        for g in f.groups[:5]
    ]
    if len(f.again):
        evidence.append(
            Evidence(
                "compile ranges in the steady steps that recompile",
                len(f.again),
                round(f.in_ns / 1e6, 3),
                trace.to_trace_us(int(f.again["ts_ns"].min())),
            )
        )
    return tuple(evidence)


def _guard_kind(reason: str) -> str:
    """The failed guard without its values (``tensor 'x' size mismatch at index 1``)."""
    r = re.sub(r"^\d+/\d+:\s*", "", reason)
    return re.sub(r"\.\s*expected .*$", "", r).strip()


def _where(row: dict[str, Any]) -> str:
    file, line, fn = row.get("file"), row.get("line"), row.get("function")
    if isinstance(file, str):
        return f"{fn} at {file.rsplit('/', 1)[-1]}:{line}"
    return str(fn or "?")
