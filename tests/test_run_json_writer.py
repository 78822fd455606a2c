"""run.json as ``advisor profile`` writes it: ``record.dump`` of the :class:`RunInfo` record that
``advisor/profile/runinfo.py`` builds, byte for byte the file the dict-building code wrote before
the record (``tests/run_json/*.run.json``, written by that code for these same inputs): a full
run (evaluation window, rows with and without the user's frame, torch.compile, torchrun,
``advisor try``, forks), a run whose set-up facts failed (sections written empty or as their
error alone), one that captured nothing, and the run.json written before the script starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from advisor import __version__, record, runinfo
from advisor.output.outfiles import write_json
from advisor.profile.capture import Capture, SessionConfig
from advisor.profile.context import SetUp
from advisor.profile.execute import Outcome, Target
from advisor.profile.runinfo import build_run_json, unfinished_run_json
from advisor.runcapture import (
    CaptureLimit,
    Distributed,
    Eval,
    Forks,
    Try,
    Versions,
    WaitFacts,
)
from advisor.runinfo import (
    Allocator,
    Autocast,
    Backends,
    Compile,
    CompileCounters,
    CompiledFrame,
    ConvBn,
    DataLoader,
    Device,
    EmptyCache,
    EvalWithGrad,
    Forward,
    GraphBreak,
    Host,
    Memory,
    Modules,
    Optimizer,
    Recompile,
    Site,
    ZeroGrad,
)

BEFORE = Path(__file__).resolve().parent / "run_json"
SITE = Site(file="/w/train.py", line=12, function="main")
TARGET = Target("script", "/w/train.py", ("--epochs", "1"))
VERSIONS = Versions(torch="2.5.1", python="3.11.7", platform="Linux")
CPU = Device(
    type="cpu",
    count=16,
    name="Xeon",
    total_memory_bytes=1 << 36,
    cuda_available=False,
)
GPU = Device(
    type="cuda",
    index=0,
    count=8,
    name="NVIDIA H100",
    compute_capability="9.0",
    total_memory_bytes=80 << 30,
    multi_processor_count=132,
)
HOST = Host(cpu_count=8, cpu_count_total=16, cpu_model="Xeon", memory_bytes=1 << 36)
BACKENDS = Backends(
    cudnn_benchmark=False,
    cudnn_allow_tf32=True,
    cudnn_deterministic=False,
    matmul_allow_tf32=False,
    matmul_allow_fp16_reduced_precision_reduction=True,
    float32_matmul_precision="highest",
    deterministic=False,
    detect_anomaly=False,
    cuda_launch_blocking=False,
)
COMMON: dict[str, Any] = dict(versions=VERSIONS, host=HOST, cwd="/w", trace_name="trace.json.gz")


def _full() -> Any:
    cap = Capture(
        scope="window",
        trace_written=True,
        steps_seen=40,
        step_source="optimizer",
        eval=Eval(
            scope="window",
            trace_written=True,
            missing=None,
            module="Net",
            steps_seen=3,
            activities=("cpu", "cuda"),
            steps=(1, 3),
            call_sites=17,
            call_sites_error=None,
            trace="trace.eval.json.gz",
            wait=WaitFacts(steps=4, seconds=1.5, budget_s=12.25, by_steps=True, step_s=0.05),
        ),
        window_steps=[6, 10],
        activities=["cpu", "cuda"],
        stopped_after_window=True,
        capture_limits=[CaptureLimit(what="cut", effect="fewer steps")],
        memory=Memory(peak_allocated_bytes=1000, peak_reserved_bytes=2000),
        backends=BACKENDS,
        timings_s={"window": 1.25, "export": 0.5},
        call_sites=120,
    )
    at = dict(file=SITE.file, line=SITE.line, function=SITE.function)
    setup = SetUp(
        dataloaders=(
            DataLoader(
                num_workers=2,
                pin_memory=True,
                batch_size=32,
                persistent_workers=False,
                prefetch_factor=2,
                drop_last=False,
                dataset_len=640,
                dataset_class="TensorDataset",
                phase="train",
                file="/w/train.py",
                line=20,
            ),
        ),
        optimizers=(
            Optimizer(
                cls="AdamW",
                module="torch.optim.adamw",
                fused=False,
                param_tensors=4,
                param_groups=1,
                param_elements=100,
                param_dtypes={"float32": 100},
                file="/w/train.py",
                line=22,
            ),
        ),
        zero_grad=(
            ZeroGrad(owner="Optimizer", set_to_none=True, **at),
            ZeroGrad(owner="Module", set_to_none=False),
        ),
        allocator=Allocator(
            empty_cache=(EmptyCache(calls=3, **at), EmptyCache(calls=1)), caching_disabled=False
        ),
        forward=Forward(
            autocast=(Autocast(device_type="cuda", dtype="bfloat16"),),
            autocast_dtypes=("bfloat16",),
            eval_with_grad=(EvalWithGrad(module="Net", **at), EvalWithGrad(module="Head")),
        ),
        modules=Modules(
            conv_bias_before_bn=(ConvBn(conv="Net.c1", bn="Net.b1"),),
            param_dtypes={"float32": 100},
            channels_last=False,
            data_parallel=True,
            data_parallel_sites=(SITE,),
            distributed_data_parallel=False,
            fully_sharded_data_parallel=False,
            compiled=True,
            compile_sites=(SITE,),
            modules_seen=5,
            roots=("Net",),
        ),
        compile=Compile(
            graph_breaks=(
                GraphBreak(
                    file="/w/train.py",
                    line=30,
                    function="forward",
                    kind="Data-dependent branching",
                    reason="generic_jump",
                    count=2,
                    compile_ids=("0/0",),
                ),
            ),
            frames=(
                CompiledFrame(
                    compile_id="0/0",
                    function="forward",
                    file="/w/train.py",
                    line=25,
                    resume=False,
                    graph_ops=4,
                    compile_s=0.5,
                    graph_breaks=1,
                ),
            ),
            recompiles=(
                Recompile(
                    compile_id="0/1",
                    function="forward",
                    file="/w/train.py",
                    line=25,
                    reason="size mismatch",
                    compile_s=0.25,
                ),
            ),
            counters=CompileCounters(
                graph_break=1,
                unimplemented=0,
                frames={"total": 2, "ok": 2},
                stats={"unique_graphs": 2},
            ),
        ),
        trial=Try(
            fixes=("amp",),
            applied=("amp",),
            seed=0,
            losses=(1.5, None),
            outputs=(2.0,),
            notes={"amp": ("autocast on",)},
            counts={"amp": {"forwards": 3}},
        ),
        forks=Forks(total=2, while_recording=1),
    )
    return build_run_json(
        target=TARGET,
        outcome=Outcome("window-captured", 0),
        cap=cap,
        cfg=SessionConfig(),
        setup=setup,
        device=GPU,
        started_at="2026-01-01T00:00:00+00:00",
        ended_at="2026-01-01T00:01:00+00:00",
        duration_s=60.1234,
        distributed=Distributed(rank=1, world_size=2, local_rank=1, run_id="x"),
        **COMMON,
    )


def _failed() -> Any:
    """An exception before the window; the module facts and dynamo's metrics failed."""
    cap = Capture(
        scope="pre-window",
        trace_written=True,
        steps_seen=2,
        step_source="forward",
        step_module="Net",
        eval=Eval(export_error="OSError: disk full"),
        window_steps=[1, 2],
    )
    setup = SetUp(modules=Modules(error="RuntimeError: x"), compile=Compile(error="ImportError: y"))
    return build_run_json(
        target=Target("module", "pkg.train", ()),
        outcome=Outcome("exception", 1, "ValueError: bad"),
        cap=cap,
        cfg=SessionConfig(phases=("train",)),
        setup=setup,
        device=CPU,
        started_at="s",
        ended_at="e",
        duration_s=1.0,
        **COMMON,
    )


def _empty() -> Any:
    """Nothing captured, no set-up facts at all."""
    return build_run_json(
        target=TARGET,
        outcome=Outcome("exception", 1, "ImportError: z"),
        cap=Capture(scope="whole-run"),
        cfg=SessionConfig(),
        setup=SetUp(),
        device=CPU,
        started_at="s",
        ended_at="e",
        duration_s=0.5,
        **COMMON,
    )


CASES = {
    "full": _full,
    "failed": _failed,
    "empty": _empty,
    "started": lambda: unfinished_run_json(TARGET, "/w", "s", "trace.json.gz"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_record_writes_the_bytes_the_dict_wrote(name: str, tmp_path: Path) -> None:
    run = CASES[name]()
    doc = record.dump(run)
    doc["pid"] = 0
    write_json(tmp_path / "run.json", doc)
    before = (BEFORE / f"{name}.run.json").read_text(encoding="utf-8")
    before = before.replace('"advisor_version": "0.1.0"', f'"advisor_version": "{__version__}"')
    assert (tmp_path / "run.json").read_text(encoding="utf-8") == before


@pytest.mark.parametrize("name", sorted(CASES))
def test_what_is_written_reads_back_as_the_record(name: str) -> None:
    run = CASES[name]()
    if name == "started":
        back = runinfo.read(record.dump(run))
        assert back is not None and back.end_reason == "process-died" and back.trace == run.trace
        return
    assert runinfo.read(record.dump(run)) == run
