"""Host work inside the step while the GPU has nothing to do, told apart by whose work it is.

**What it detects.** Python frames inside the steps that run for at least
``host_preprocessing.min_frame_ms`` without launching any GPU work (no kernel launch, copy,
memset or sync starts inside them; see ``heuristics/_preprocess.py``), during the time the main
GPU is idle. Each frame's time is read for whose work it is (``heuristics/_hostwork.py``):

- *the user's input work* (decoding images or video, tokenizing, an image processor, resizing
  and normalizing with PIL or NumPy, building the batch in Python): **preprocessing**, the
  only work DataLoader workers or GPU-side preprocessing fit;
- *output post-processing*: the same kind of work after the step's last read of device
  results, with no launch or copy after it in the step (results turned into images or text):
  reported apart, with advice to overlap it with the next request;
- *a framework's own bookkeeping* (its hooks, logging, checks: diffusers' offload and cache
  hooks, Lightning's ``self.log``): reported apart per library, named with the library and,
  for the known causes of ``heuristics/_frameworks.py``, its setting;
- *torch operators outside the forward* (a loss in an evaluation loop, ``clip_grad_norm_``):
  the step's own math on the host, never reported here.

Frames are grouped by the user's frame that calls them and the library frame doing the work,
with the largest parts inside it (a decode, an image processor, ``np.array``). On a CPU run
(no GPU to idle: the titles and summaries say nothing of one), frames that run none of the
model's operators (no autograd-recording op, no backward, nothing under an ``nn.Module`` or
optimizer step) count the same way. Time inside a ``DataLoader`` fetch is
``dataloader-stall``'s, not this finding's. Input work happens for every input: with two or
more steady steps, a frame (by name, under its caller) found in only one of them is a one-off
and is not counted. Torch's own machinery around the model (the optimizer's step wrapper,
torch.compile's wrappers) is never counted. Needs a trace with Python stacks
(``with_stack=True``, which ``advisor profile`` records).

**Near the threshold.** Each kind is reported when its share of the median step reaches
``host_preprocessing.min_pct``. The share is a measurement, and the trace shows how much the
same work varies: across the steady steps (the per-step figure's spread), or with one step,
across the repeated calls of the same frame inside it. A share whose spread reaches across
the threshold is *near* it: reported at ``low`` severity on either side of the line, saying
so, so that two runs of the same work agree (one does not fire while the other does not).

**Why it costs time.** The GPU waits while the host works: the step takes the host time plus
the model time instead of the larger of the two. ``gpu-idle`` lists this share as
*preprocessing*, not as waiting for launches.

**How the saving is estimated.** The steady steps are replayed (see docs/savings.md) with the
frames' host time cut to ``host_preprocessing.keep`` of itself for input and output work
(what stays on the step's thread once the work runs in workers or overlaps the GPU: receiving
and collating the batch); the range keeps none of it to half of it. A framework's known
setting removes its work (range: half of it to all of it); a framework cause without a known
setting claims no saving (info). Without GPU work (a CPU run) the saving is the frames' time
per step times ``1 - host_preprocessing.keep``.

**How to fix.** Input work: run it in ``DataLoader`` workers (``num_workers > 0``,
``persistent_workers=True``, ``prefetch_factor``) so it overlaps the GPU; preprocess on the GPU
(``torchvision.transforms.v2`` on tensors on the device, a fast image processor with
``use_fast=True`` and ``device="cuda"``, GPU video decoding); batch requests so one call
prepares many items; or prepare the next item on a background thread. Output work: hand the
results to a thread and start the next request's GPU work at once, keep results as tensors
(``output_type="pt"``/``"np"``) until they are needed as images. Framework work: the setting
named.

**Known false positives.** Host work that must happen between steps (logging, checkpoint
saving, metrics on the CPU) in the user's own code looks like input work; the frames named
say which it is.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from advisor.derive.timeline import busy_by_device, covered_by, main_device, subtract, union
from advisor.detect.draft import Draft
from advisor.detect.registry import Context, Skip, detector
from advisor.detect.thresholds import register
from advisor.replay.fixes import ShrinkHost
from advisor.trace.model import Trace

from ._frameworks import Cause, possessive, pretty
from ._hostgroups import cause_of, groups, recurring, spread_of
from ._hostwork import classify
from ._per_step import fmt_ms, n_steps
from ._preprocess import allowed_spans, quiet_frames

ID = "host-preprocessing"
TITLE = "Preprocessing on the host inside the step, GPU idle"

register(
    "host_preprocessing.min_pct",
    5.0,
    "report when such host work keeps the GPU idle this % of the median step",
)
register(
    "host_preprocessing.keep",
    0.25,
    "share of the host work that stays on the step's thread once moved to workers",
)

SNIPPET = """\
# prepare inputs in worker processes, overlapping the GPU
loader = DataLoader(items, batch_size=bs, num_workers=4, persistent_workers=True,
                    prefetch_factor=2, pin_memory=True, collate_fn=preprocess_batch)
for batch in loader:
    out = model(batch.to("cuda", non_blocking=True))
# or on the GPU: torchvision.transforms.v2 on device tensors, use_fast=True image processors"""

OUTPUT_SNIPPET = """\
# post-process on a thread while the GPU runs the next request
from concurrent.futures import ThreadPoolExecutor
post = ThreadPoolExecutor(max_workers=1)
for request in requests:
    result = pipe(request, output_type="np")        # tensors/arrays, not images, in the loop
    post.submit(to_images_and_save, result)         # overlaps the next request's GPU work"""

INPUT_REC = (
    "Take the preprocessing out of the step: run it in DataLoader workers (num_workers > 0, "
    "persistent_workers, prefetch_factor) so it overlaps {dev}; or preprocess on the GPU "
    "(torchvision.transforms.v2 on device tensors, a fast image processor with use_fast=True "
    'and device="cuda", GPU video decoding); batch requests so one call prepares many items; '
    "or prepare the next item on a background thread while {dev2}."
)
OUTPUT_REC = (
    "This is post-processing of the step's results, after its last read from the device, not "
    "input preparation (DataLoader workers do not apply): hand the results to a thread or "
    "process and start the next request's GPU work at once, so the conversion overlaps it; "
    'keep results as tensors or arrays (output_type="pt" or "np") until they are needed as '
    "images or text, and convert a batch at a time."
)


@dataclass(frozen=True)
class _Kind:
    """One kind of host work (see the module doc) and the frames counted for it."""

    kind: str  # input | output | framework
    library: str  # the framework, for kind == "framework"
    q: pd.DataFrame


@detector(ID, TITLE, needs=("stack", "steps"))
def detect(trace: Trace, ctx: Context) -> list[Draft]:
    py = trace.python
    if not len(py):
        raise Skip("no python_function events (the legacy Call stack has no frame durations)")
    q = quiet_frames(trace)
    q = q[(q["end_ns"] - q["ts_ns"]).to_numpy() >= ctx.t("host_preprocessing.min_frame_ms") * 1e6]
    q = recurring(trace, q).reset_index(drop=True)
    if not len(q):
        return []
    kinds = classify(trace, q)
    parts = []
    for kind in ("input", "output", "framework"):
        sel = (kinds["kind"] == kind).to_numpy()
        libs = [""] if kind != "framework" else sorted(set(kinds["library"][sel]))
        for lib in libs:
            m = sel & (kinds["library"] == lib).to_numpy() if kind == "framework" else sel
            if m.any():
                parts.append(_Kind(kind, lib, q[m].reset_index(drop=True)))
    return [d for part in parts if (d := _draft(trace, ctx, part)) is not None]


def _draft(trace: Trace, ctx: Context, part: _Kind) -> Draft | None:
    q = part.q
    al_s, al_e = allowed_spans(trace)
    dev = main_device(trace) if trace.has_gpu else None
    if dev is not None:
        busy = busy_by_device(trace)[dev]
        al_s, al_e = subtract(al_s, al_e, busy.starts, busy.ends)
    ts, end = q["ts_ns"].to_numpy(), q["end_ns"].to_numpy()
    idle = covered_by(al_s, al_e, ts, end)  # per frame
    fs, fe = union(ts, end)  # frames of several threads at once count once
    steps = n_steps(trace)
    per_step_ms = float(covered_by(al_s, al_e, fs, fe).sum()) / 1e6 / steps
    step_ms = ctx.step_ms_median
    share = 100.0 * per_step_ms / step_ms if step_ms > 0 else 0.0
    threshold = ctx.t("host_preprocessing.min_pct")
    spread = spread_of(trace, q, idle)
    if share * (1 + spread) < threshold:
        return None
    near = share * (1 - spread) < threshold
    cause = cause_of(trace, q) if part.kind == "framework" else None
    keep = 0.0 if part.kind == "framework" else ctx.t("host_preprocessing.keep")
    low = 0.5
    label = {"input": "preprocessing off the step", "output": "post-processing overlapped"}
    rep = ctx.whatif(
        ShrinkHost(
            ts,
            end,
            q["tid"].to_numpy(),
            keep=keep,
            low=low,
            high=0.0,
            label=label.get(part.kind, "framework work removed"),
        )
    )
    if rep.replayed and dev is not None:
        fields = rep.draft_fields()
        how = rep.assumption
    else:
        fields = {
            "est_savings_ms": round(per_step_ms * (1 - keep), 3),
            "est_savings_range_ms": (round(per_step_ms * 0.5, 3), round(per_step_ms, 3)),
        }
        how = (
            f"Not replayed (no GPU work the replay can place): {1 - keep:g} of the frames' time "
            f"per step ({fmt_ms(per_step_ms)}) is the saving (range: half of it to all of it)."
        )
    words, evidence, locs = groups(trace, ctx, q, idle, steps, step_ms)
    title, summary, rec, snippet = _texts(part, cause, dev is not None, per_step_ms, share, words)
    notes = []
    if near:
        summary += (
            f" This is near the {threshold:g}% threshold: the same work varies by "
            f"{100 * spread:.0f}% in this trace, so a run of it can land on either side "
            "(reported at low severity either way)."
        )
        notes.append(
            f"Near the threshold: {share:.2f}% of the step, varying by {100 * spread:.0f}% "
            "(per-step spread, or across repeated calls of one frame in a single step); "
            f"{threshold:g}% lies inside that range."
        )
    latent = part.kind == "framework" and (cause is None or not cause.removes)
    gpu_words = ", while the main GPU ran nothing." if dev is not None else "."
    return Draft(
        id=ID,
        title=title,
        **fields,
        confidence="medium" if dev is not None and not latent else "low",
        summary=summary,
        recommendation=rec,
        snippet=snippet,
        evidence=evidence,
        locations=locs,
        latent=latent,
        severity="low" if near and not latent else None,
        assumptions=(
            "Counted: the outermost Python frames of at least "
            f"{ctx.t('host_preprocessing.min_frame_ms'):g} ms inside the steps that start no "
            "kernel launch, copy, memset or sync (on a CPU run: no model operator), outside "
            "DataLoader fetches" + gpu_words,
            _whose(part),
            (
                f"Moved to workers or overlapped, {keep:g} of their host time stays on the "
                "step's thread (receiving and collating the batch); range: none to half. "
                if part.kind != "framework"
                else "With the setting changed the framework's work is gone (range: half of "
                "it to all of it); a framework cause whose setting only reduces it claims no "
                "saving. "
            )
            + how,
            *notes,
        ),
        extra={
            "host_ms_per_step": round(per_step_ms, 3),
            "kind": part.kind,
        },
    )


def _whose(part: _Kind) -> str:
    return {
        "input": "Whose work: the user's code or data libraries (decoders, tokenizers, image "
        "processors, NumPy, PIL); torch operators and frameworks' own work are not counted here.",
        "output": "Whose work: data libraries or the user's code after the step's last read of "
        "device results, with no launch or copy after it in the step (output post-processing).",
        "framework": f"Whose work: {possessive(pretty(part.library))} own frames hold most of "
        "the time (its bookkeeping, not the user's data).",
    }[part.kind]


def _texts(
    part: _Kind, cause: Cause | None, gpu: bool, per_step_ms: float, share: float, words: str
) -> tuple[str, str, str, str]:
    """Title, summary, recommendation and snippet of one kind of host work."""
    idle = ", GPU idle" if gpu else ""
    head = f"{fmt_ms(per_step_ms)} per step ({share:.0f}% of the step)"
    if part.kind == "input":
        what = (
            "host work that launches nothing while the GPU idles"
            if gpu
            else "host work outside the model (no model operator runs meanwhile)"
        )
        dev = "the GPU" if gpu else "the model's compute"
        dev2 = "the GPU runs the current one" if gpu else "the model runs the current one"
        return (
            f"Preprocessing on the host inside the step{idle}",
            f"{head} is {what}: {words}.",
            INPUT_REC.format(dev=dev, dev2=dev2),
            SNIPPET,
        )
    if part.kind == "output":
        return (
            f"Output post-processing on the host after the last read{idle}",
            f"{head} is post-processing of the results after the step's last read from the "
            f"device{', while the GPU idles' if gpu else ''}: {words}.",
            OUTPUT_REC,
            OUTPUT_SNIPPET,
        )
    lib = possessive(pretty(part.library) or "a library")
    summary = f"{head} is {lib} own work on the host, not input preprocessing: {words}."
    rec = (
        f"This is {lib} code, not your data pipeline: DataLoader workers or GPU "
        "preprocessing will not move it. Look for the setting of the library's feature "
        "behind the frames named (its hooks, logging or checks)."
    )
    snippet = f"# {lib}: the frames named above are the library's own work"
    if cause is not None:
        summary += f" Known cause: {cause.what}."
        rec = (
            f"This is {lib} code, not your data pipeline: DataLoader workers will not move "
            f"it. The setting: `{cause.setting}`. {cause.advice} (Source: {cause.source}.)"
        )
        snippet = f"{cause.setting}  # {cause.library}"
    return f"{lib} own host work inside the step{idle}", summary, rec, snippet
