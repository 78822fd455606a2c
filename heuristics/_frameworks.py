"""Whose code a Python frame is, and the known causes inside the frameworks people train with.

**Libraries by kind.** A frame's library is the first component of its file as torch writes
library frames (``transformers/trainer.py`` -> ``transformers``); a builtin's is the type its
name is bound to (``<built-in method tobytes of numpy.ndarray ...>`` -> ``numpy``). Each library
is of one kind:

- *data*: the libraries that read, decode and prepare inputs (array and image libraries,
  decoders, tokenizers, audio and video I/O), and in any package the modules that are an
  image, video or audio processor, a feature extractor or a tokenizer (by their file names:
  ``image_processing_*.py``, ``tokenization_*.py``, ``image_processor.py``...);
- *torch*: torch's operators (the profiler's CPU ops, read by the caller of this module);
  torch's own Python frames (walking a module tree, dispatching hooks) and tensor builtins
  count for whoever called them;
- *framework*: the frameworks people train and serve with (``transformers``' Trainer,
  Lightning, accelerate, diffusers' pipelines and hooks, DeepSpeed, vLLM...: a list of
  package names): code that runs around the user's model, which the user calls but did not
  write; another package takes its caller's kind;
- *user*: the user's own files; the standard library belongs to whoever called it.

**Known framework causes** (:data:`CAUSES`): work a framework does on the user's behalf that
shows in a trace, each with where it lives (the library's file and function, as its source
has it) and the setting that controls it. A finding whose evidence runs inside one of them
names that frame and the setting, with the user's line as context: the user's line alone
(``trainer.train()``) is true and useless.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from advisor.derive.locate import Locator

DATA, TORCH, FRAMEWORK, USER = "data", "torch", "framework", "user"

_DATA_TOPS = frozenset(
    "numpy PIL cv2 av decord torchvision torchaudio torchcodec librosa soundfile imageio "
    "skimage albumentations tokenizers sentencepiece tiktoken pyarrow h5py scipy simplejpeg "
    "turbojpeg nvidia pydub wave".split()
)
# modules that prepare inputs (or outputs) in any package: processors, tokenizers, decoders
_DATA_FILE_RE = re.compile(
    r"(^|/)(image|video|audio)_process(ing|or)\w*\.py$|(^|/)processing_\w+\.py$"
    r"|(^|/)feature_extraction\w*\.py$|(^|/)tokenization\w*\.py$|(^|/)(io|transforms)/"
)
_TORCH_TOPS = frozenset({"torch", "functorch"})
# the frameworks people train and serve with: code that runs around the user's model
_FRAMEWORK_TOPS = frozenset(
    "transformers diffusers accelerate lightning pytorch_lightning lightning_fabric "
    "lightning_utilities deepspeed fairscale peft torchmetrics timm vllm sglang megatron "
    "torchtune trl optimum ray mmengine mmcv detectron2 ultralytics hydra omegaconf wandb "
    "tensorboard tqdm rich torchrec fbgemm_gpu apex xformers flash_attn huggingface_hub "
    "safetensors datasets evaluate".split()
)
# where torch (or its autograd machinery) writes frames of its own that are not library files
_STDLIB_TOPS = frozenset(
    "typing contextlib threading runpy functools abc enum dataclasses copy copyreg inspect "
    "importlib collections weakref multiprocessing concurrent queue selectors socket asyncio "
    "json posixpath genericpath ntpath os random re warnings traceback logging tempfile shutil "
    "pathlib codecs encodings pickle subprocess signal argparse linecache tokenize ast types "
    "operator itertools heapq bisect numbers string textwrap pprint reprlib dis opcode io "
    "_weakrefset _collections_abc".split()
)
_BUILTIN_OWNER_RE = re.compile(r"^<built-in (?:method|function) \w+(?: of ([\w.]+))?")
_TORCH_OWNERS = ("Tensor", "torch.", "torch._C")  # builtins bound to torch types


def library_of(file: str, name: str = "") -> str:
    """The top-level package of a library frame (``""`` for a user's file or a builtin whose
    owner is not named)."""
    if not file:
        m = _BUILTIN_OWNER_RE.match(name)
        owner = (m.group(1) or "") if m else ""
        if owner.startswith(_TORCH_OWNERS):
            return "torch"
        return owner.split(".", 1)[0] if "." in owner else ""
    f = file.replace("\\", "/")
    for marker in ("site-packages/", "dist-packages/"):  # older traces: absolute paths
        if marker in f:
            return f.rsplit(marker, 1)[1].split("/", 1)[0].removesuffix(".py")
    if f.startswith(("/", "<")) or (len(f) > 1 and f[1] == ":"):
        return ""  # absolute: the user's own file (torch writes libraries relative)
    return f.split("/", 1)[0].removesuffix(".py")


def kind_of(file: str, name: str, is_user: bool) -> str | None:
    """The kind of a frame (module doc); None for the standard library and builtins whose
    owner says nothing (they take their caller's kind)."""
    if is_user:
        return USER
    lib = library_of(file, name)
    if not lib or lib in _STDLIB_TOPS:
        return None
    if lib in _DATA_TOPS or _DATA_FILE_RE.search(file.replace("\\", "/")):
        return DATA
    if lib in _TORCH_TOPS:
        return None  # torch's Python (module walks, hook dispatch) is its caller's work
    return FRAMEWORK if lib in _FRAMEWORK_TOPS else None


_PRETTY = {
    "transformers": "Hugging Face transformers",
    "accelerate": "Hugging Face accelerate",
    "diffusers": "Hugging Face diffusers",
    "lightning": "Lightning",
    "pytorch_lightning": "Lightning",
    "lightning_fabric": "Lightning",
    "lightning_utilities": "Lightning",
}


def pretty(lib: str) -> str:
    """A library's name as its users know it."""
    return _PRETTY.get(lib, lib)


def possessive(name: str) -> str:
    """``Lightning`` -> ``Lightning's``; ``Hugging Face diffusers`` -> ``... diffusers'``."""
    return f"{name}'" if name.endswith("s") else f"{name}'s"


@dataclass(frozen=True)
class Cause:
    """A known framework cause: where it lives, what it is, the setting that controls it."""

    library: str  # as users know it
    file_re: str  # the library's file (regex on the frame's file)
    function_re: str  # its function (regex on the frame's function)
    what: str  # what the framework does there
    setting: str  # the knob (or the user's call that triggers it), as code
    advice: str  # one sentence: what the setting does and its cost
    source: str  # where the behaviour is written (library file and function)
    removes: bool = False  # the setting removes the work (a saving may be claimed)


CAUSES: tuple[Cause, ...] = (
    Cause(
        "Hugging Face transformers (Trainer)",
        r"(^|/)transformers/trainer\.py$",
        r"^_inner_training_loop$|^training_step$",
        "the Trainer checks every step's loss for NaN/Inf (`torch.isnan(loss) or "
        "torch.isinf(loss)`: a read of the loss back to the host)",
        "TrainingArguments(..., logging_nan_inf_filter=False)",
        "With the filter off the Trainer logs the loss as it is (a NaN/Inf step is logged, not "
        "replaced); gradients and training are unchanged.",
        "transformers/trainer.py, Trainer._inner_training_loop (logging_nan_inf_filter)",
        removes=True,
    ),
    Cause(
        "Hugging Face transformers (attention masks)",
        r"(^|/)transformers/(masking_utils|modeling_attn_mask_utils)\.py$",
        r".",
        "the model checks whether the attention mask can be skipped (a read of the mask back "
        "to the host on every forward)",
        "attention_mask=None for batches without padding",
        "Without a mask there is nothing to check; with padding the check stays (it decides "
        "whether a fused attention kernel can run).",
        "transformers/masking_utils.py (the mask-skipping checks of the SDPA path)",
    ),
    Cause(
        "Lightning (self.log)",
        r"(^|/)lightning/pytorch/trainer/connectors/logger_connector/|"
        r"(^|/)pytorch_lightning/trainer/connectors/logger_connector/",
        r".",
        "values logged with `self.log(..., prog_bar=True)` are turned into Python numbers for "
        "the progress bar on every step (`convert_tensors_to_scalars`: a read back to the host "
        "per value)",
        "self.log(name, value, prog_bar=False)",
        "Keep prog_bar=True for the one or two values you watch; the others still reach the "
        "logger every log_every_n_steps.",
        "lightning/pytorch/trainer/connectors/logger_connector/result.py, "
        "_ResultCollection.metrics (prog_bar)",
        removes=True,
    ),
    Cause(
        "Lightning (self.log)",
        r"(^|/)(lightning/pytorch|pytorch_lightning)/core/module\.py$",
        r"^log$|^log_dict$",
        "each `self.log(...)` call runs Lightning's logging bookkeeping on the host (the value "
        "checked, converted to a tensor and stored in its result collection)",
        "fewer self.log(...) calls per step (log what you need every step; the rest on_epoch "
        "or every N steps)",
        "The cost is per call and per value, whatever the value.",
        "lightning/pytorch/core/module.py, LightningModule.log",
    ),
    Cause(
        "Hugging Face diffusers (hooks)",
        r"(^|/)diffusers/(hooks/|models/cache_utils\.py$|pipelines/pipeline_utils\.py$)",
        r".",
        "the pipeline walks every module of its components for its hooks (offloading, caching) "
        "on each `_execution_device` read, `cache_context` and `maybe_free_model_hooks`",
        "pipe.to(device) without offloading when the model fits, and fewer pipeline calls "
        "(several prompts per call)",
        "The walk costs Python time per module and per call, with or without offloading "
        "enabled; larger batches spread it over more images.",
        "diffusers/hooks/group_offloading.py, _get_top_level_group_offload_hook; "
        "diffusers/hooks/hooks.py, HookRegistry._set_context / reset_stateful_hooks",
    ),
)
_COMPILED = tuple((c, re.compile(c.file_re), re.compile(c.function_re)) for c in CAUSES)


def known_cause(file: str, function: str) -> Cause | None:
    """The known framework cause a library frame belongs to, if any."""
    f = file.replace("\\", "/")
    for cause, file_re, fn_re in _COMPILED:
        if file_re.search(f) and fn_re.search(function):
            return cause
    return None


@dataclass(frozen=True)
class FrameworkNote:
    """What a finding says of the known framework causes its evidence runs inside."""

    sentence: str  # for the summary: the framework frame and what it does
    advice: str  # for the recommendation: the setting
    evidence: tuple[tuple[str, int], ...]  # (the framework frame, how many)


def framework_note(locator: Locator, op_rows: Iterable[int]) -> FrameworkNote | None:
    """The known framework causes (:data:`CAUSES`) whose frames enclose the ops ``op_rows``
    (cpu_ops rows), the most frequent first; None when none does."""
    seen: dict[Cause, dict[str, int]] = {}
    for row in op_rows:
        for file, line, func, _how in locator.frames_for_op(int(row)):
            cause = known_cause(file, func)
            if cause is not None:
                where = seen.setdefault(cause, {})
                key = f"{func} ({file}:{line})"
                where[key] = where.get(key, 0) + 1
                break
    if not seen:
        return None
    order = sorted(seen, key=lambda c: -sum(seen[c].values()))
    parts, advice, evidence = [], [], []
    for cause in order[:2]:
        frame, n = max(seen[cause].items(), key=lambda kv: kv[1])
        parts.append(f"in {cause.library}, at {frame}: {cause.what}")
        advice.append(f"{cause.library}: `{cause.setting}`. {cause.advice}")
        evidence += [(f, k) for f, k in seen[cause].items()]
    return FrameworkNote(
        "Inside the framework: " + "; ".join(parts) + ".",
        "The setting that controls it, " + " ".join(advice),
        tuple(evidence[:4]),
    )
