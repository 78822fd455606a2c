"""Causes inside the frameworks people train with (``heuristics/_frameworks.py``): a sync that
runs inside transformers' Trainer or Lightning's logging names the framework frame and the
setting that controls it, with the user's line as context; the table's entries each cite their
source; libraries are told apart by kind.

Built traces: a GPU step whose ``.item()`` runs under a framework frame, a CPU step (the sync a
GPU would have), and the same CPU step in the 2021 Kineto categories (a ``Call stack`` string
instead of Python frames).
"""

from __future__ import annotations

from typing import Any

import pytest

from heuristics._frameworks import CAUSES, DATA, FRAMEWORK, USER, kind_of, known_cause
from tests.detector_helpers import analyze, finding
from tests.tracebuilder import TraceBuilder

DTOH = ("Memcpy DtoH (Device -> Pageable)", 4)
TRAINER = ("transformers/trainer.py", 1660, "_inner_training_loop")
LIGHTNING = ("lightning/pytorch/trainer/connectors/logger_connector/result.py", 470, "metrics")


def gpu_steps(frame: tuple[str, int, str] | None) -> TraceBuilder:
    """3 steps of 1 ms: a kernel, then ``.item()`` waits for it, called from ``frame`` (a
    framework's) under the user's ``train.py:76``."""
    b = TraceBuilder()
    for s in range(3):
        t = s * 1000.0
        b.step(s + 1, t, 1000)
        mm = b.op("aten::mm", t + 10, 20)
        b.launch(mm, "cudaLaunchKernel", t + 12, 5, kernel="k_mm", gpu_ts=t + 20, gpu_dur=400)
        user = b.frame("train.py", 76, "main", t + 38, 400)
        if frame is not None:
            b.frame(*frame, t + 39, 395, user)
        b.op("aten::item", t + 40, 390)
        lsd = b.op("aten::_local_scalar_dense", t + 41, 388)
        b.launch(lsd, "cudaMemcpyAsync", t + 42, 360, memcpy=DTOH, gpu_ts=t + 421, gpu_dur=2)
        b.runtime("cudaStreamSynchronize", t + 403, 24, op=lsd)
        add = b.op("aten::add", t + 700, 20)
        b.launch(add, "cudaLaunchKernel", t + 702, 5, kernel="k_add", gpu_ts=t + 710, gpu_dur=50)
    return b


def cpu_steps(frame: tuple[str, int, str], legacy: bool = False) -> Any:
    """2 CPU steps: ``torch.isnan(loss) or ...`` (an ``is_nonzero``) inside ``frame``, called
    from the user's ``train.py:76``; in the 2021 categories when ``legacy``."""
    b = TraceBuilder(cc=None)
    stack = f"{frame[0]}({frame[1]}): {frame[2]};train.py(76): main"
    for s in range(2):
        t = s * 1000.0
        b.step(s + 1, t, 1000)
        if not legacy:
            user = b.frame("train.py", 76, "main", t + 5, 900)
            b.frame(*frame, t + 6, 800, user)
        extra = {"Call stack": stack} if legacy else {}
        b.op("aten::isnan", t + 10, 10, **extra)
        b.op("aten::is_nonzero", t + 30, 10, **extra)
        b.op("aten::item", t + 31, 8, **extra)
        b.op("aten::_local_scalar_dense", t + 32, 6, **extra)
    if legacy:
        for ev in b.events:
            if ev["cat"] in ("cpu_op", "user_annotation"):
                ev["cat"] = "Operator"
    return b.load()


def test_a_sync_inside_the_trainer_names_its_frame_and_setting() -> None:
    f = finding(analyze(gpu_steps(TRAINER).load(), "sync-point"), "sync-point")
    assert f is not None
    assert "_inner_training_loop (transformers/trainer.py:1660)" in f.summary
    assert "logging_nan_inf_filter=False" in f.recommendation
    assert f.locations[0].file == "train.py" and f.locations[0].line == 76  # the context
    # the same sync in the user's own code: no framework named
    f = finding(analyze(gpu_steps(None).load(), "sync-point"), "sync-point")
    assert f is not None and "Inside the framework" not in f.summary


@pytest.mark.parametrize("legacy", [False, True], ids=["current", "2021"])
def test_a_cpu_run_names_the_framework_setting_too(legacy: bool) -> None:
    f = finding(analyze(cpu_steps(TRAINER, legacy), "sync-point"), "sync-point")
    assert f is not None and f.severity == "info"
    assert "logging_nan_inf_filter=False" in f.recommendation
    assert "Hugging Face transformers (Trainer)" in f.summary
    f = finding(analyze(cpu_steps(LIGHTNING, legacy), "sync-point"), "sync-point")
    assert f is not None
    assert "prog_bar=False" in f.recommendation and "self.log" in f.summary


def test_every_known_cause_cites_its_source_and_setting() -> None:
    for c in CAUSES:
        assert c.library and c.setting and c.what and c.advice
        assert "/" in c.source and ".py" in c.source  # the library's file
    assert known_cause(*TRAINER[::2]) is not None
    assert known_cause("transformers/trainer.py", "save_model") is None
    assert known_cause("train.py", "main") is None


def test_libraries_are_told_apart_by_kind() -> None:
    assert kind_of("transformers/trainer.py", "x", False) == FRAMEWORK
    assert kind_of("transformers/models/vit/image_processing_vit.py", "x", False) == DATA
    assert kind_of("diffusers/image_processor.py", "x", False) == DATA
    assert kind_of("PIL/Image.py", "x", False) == DATA
    assert kind_of("", "<built-in method tobytes of numpy.ndarray object at 0x1>", False) == DATA
    assert kind_of("/home/me/train.py", "x", True) == USER
    # torch's own Python and the standard library count for their caller
    assert kind_of("torch/nn/modules/module.py", "modules", False) is None
    assert kind_of("contextlib.py", "__enter__", False) is None
    # an older trace's absolute site-packages path
    assert kind_of(
        "/usr/lib/python3/site-packages/lightning/pytorch/core/module.py", "", False
    ) == (FRAMEWORK)
