"""Name the faults that end a run early for reasons users can act on, and say what to do.

:func:`classify` looks at the script's uncaught exception (and what it was raised from or
during) and returns an ``end_reason`` for run.json: ``out-of-memory`` (CPU ``MemoryError``,
``torch.OutOfMemoryError`` and the allocators' "out of memory" errors), ``dataloader-worker-died``
(a DataLoader worker process went away: torch's "DataLoader worker (pid N) exited unexpectedly"
/ "is killed by signal", or the broken pipe a worker leaves when it dies with a batch in
flight), else ``exception``. Never imports torch: exceptions are recognised by class name and
message.
"""

from __future__ import annotations

import re
from types import TracebackType

OUT_OF_MEMORY = "out-of-memory"
WORKER_DIED = "dataloader-worker-died"

_OOM_TYPES = ("OutOfMemoryError",)  # torch.OutOfMemoryError (= torch.cuda.OutOfMemoryError)
_OOM_TEXT = re.compile(
    r"\bout of memory\b|can't allocate memory|CUBLAS_STATUS_ALLOC_FAILED|"
    r"CUDNN_STATUS_ALLOC_FAILED|Cannot allocate memory",
    re.IGNORECASE,
)
_WORKER_TEXT = re.compile(
    r"DataLoader worker \(pids?(\(s\))? [^)]*\) (exited unexpectedly|is killed)"
)
_REPORTED_FROM_WORKER = "in DataLoader worker process"  # the worker's own error, re-raised
_LOADER_FILES = ("torch/utils/data/", "torch/multiprocessing/", "multiprocessing/")
_MAX_CHAIN = 8


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc``, then what it was raised from or while handling (bounded; no cycles)."""
    out: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and len(out) < _MAX_CHAIN and all(cur is not e for e in out):
        out.append(cur)
        cur = cur.__cause__ or cur.__context__
    return out


def _frames(tb: TracebackType | None) -> list[str]:
    files = []
    while tb is not None:
        files.append(tb.tb_frame.f_code.co_filename.replace("\\", "/"))
        tb = tb.tb_next
    return files


def _is_oom(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    if any(c.__name__ in _OOM_TYPES for c in type(exc).__mro__):
        return True
    return isinstance(exc, RuntimeError) and bool(_OOM_TEXT.search(str(exc)))


def _is_worker_death(exc: BaseException) -> bool:
    text = str(exc)
    if _REPORTED_FROM_WORKER in text:
        return False  # the Dataset's own error, raised in a worker and re-raised here
    if isinstance(exc, RuntimeError) and _WORKER_TEXT.search(text):
        return True
    # a worker that dies while a batch is on its way leaves the main process a broken
    # connection inside the DataLoader's queue (torch's own message may never come)
    if isinstance(exc, (ConnectionError, EOFError)):
        frames = _frames(exc.__traceback__)
        in_loader = any("torch/utils/data/" in f for f in frames)
        return in_loader and any(m in f for f in frames[-3:] for m in _LOADER_FILES)
    return False


def classify(exc: BaseException) -> str:
    """The end_reason for a run that ended with the uncaught ``exc``."""
    for e in _chain(exc):
        if _is_worker_death(e):
            return WORKER_DIED
        if _is_oom(e):
            return OUT_OF_MEMORY
    return "exception"


def _is_cuda_oom(error: str) -> bool:
    return any(k in error for k in ("OutOfMemoryError", "CUDA out of memory", "HIP out of memory"))


def remedy(end_reason: str, error: str | None) -> str | None:
    """One sentence of advice for a run that ended with ``end_reason`` (None: no advice)."""
    if end_reason == OUT_OF_MEMORY:
        if _is_cuda_oom(error or ""):
            return (
                "To leave memory headroom: lower the batch size (keep the effective batch with "
                "gradient accumulation), train in bf16/fp16 with torch.autocast, use activation "
                "checkpointing for deep models, and when the error shows much memory reserved "
                "but unallocated, set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True. "
                "Profile with a smaller batch to get a report."
            )
        return (
            "To leave memory headroom: lower the batch size, use fewer DataLoader workers (each "
            "holds prefetch_factor batches and its own copy of the dataset's Python objects), "
            "and do not keep tensors that hold the autograd graph across steps (accumulate "
            "loss.item(), not loss). Profile with a smaller batch to get a report."
        )
    if end_reason == WORKER_DIED:
        return (
            "A DataLoader worker that is 'killed by signal: Killed' was usually stopped by the "
            "kernel's out-of-memory killer: lower num_workers, prefetch_factor or the batch "
            "size. A bus error points to a too small /dev/shm (Docker: --shm-size or "
            "--ipc=host). Rerun with num_workers=0 to see the worker's own error."
        )
    return None
