"""Fuzzing: mutated real traces either analyze cleanly or fail with the one clean error type.

Mutations: drop keys, change value types, huge numbers, NaN/inf, duplicate, shuffle and truncate
events, cut the file's bytes, gzip it. For every mutant the loader must return a Trace or raise
TraceError (one line), every detector must run without erroring, and the outputs must render.
Bounded in CI (``max_examples`` 40); ``FUZZ_EXAMPLES=2000 pytest tests/test_fuzz.py`` for more.
"""

from __future__ import annotations

import copy
import gzip
import json
import os
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advisor.analysis.pipeline import Options, analyze_trace
from advisor.errors import TraceError
from advisor.output.html import render_html
from advisor.trace import decode, load_bytes, load_trace
from tests.conftest import SHARED
from tests.tracebuilder import TraceBuilder

_OBJECT_COLS = ["input_dims", "input_types", "grid", "block", "call_stack"]
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "40"))
SMALL_REAL = [
    "hta/critical_path/cuda_event_sync/event_sync_trace.json.gz",
    "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "hta/triton_example/triton_example.json.gz",
    "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    "hta/call_stack/backward_thread.json",
    "hta/trace_file_list/inference_rank_1.json.gz",
]
KEYS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "args"]
ARG_KEYS = [
    "External id",
    "correlation",
    "device",
    "stream",
    "Input Dims",
    "Input type",
    "bytes",
    "Python id",
    "Python parent id",
    "Sequence number",
    "grid",
    "block",
    "Bytes",
    "Total Allocated",
    "Device Id",
    "cuda_sync_kind",
    "kind",
    "Call stack",
]
WEIRD = [
    None,
    True,
    -1,
    0,
    2**63,
    2**70,
    -(2**70),
    1e308,
    -1e308,
    float("nan"),
    float("inf"),
    -float("inf"),
    "",
    "x",
    "<script>alert(1)</script>",
    "0x1f",
    "ProfilerStep#99999999999",
    "ProfilerStep#-1",
    "\u202e\u0000",
    [],
    [1, [2, [3]]],
    {},
    {"a": {"b": None}},
    "Memcpy HtoD (Pageable -> Device)",
    "aten::mm",
    "nccl:all_reduce",
    3.5,
]


def _synthetic() -> dict[str, Any]:
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.step(2, 1000, 1000)
    top = b.frame("/home/me/train.py", 42, "train", 0, 2000)
    b.frame("/home/me/model.py", 7, "forward", 10, 500, parent=top)
    for s in (0, 1000):
        op = b.op("aten::mm", s + 10, 300, dims=[[8, 16], [16, 8]], types=["float", "float"])
        b.launch(
            op,
            "cudaLaunchKernel",
            s + 20,
            5,
            kernel="volta_sgemm_128x64_nn",
            gpu_ts=s + 400,
            gpu_dur=200,
        )
        b.launch(
            op,
            "cudaMemcpyAsync",
            s + 40,
            5,
            memcpy=("Memcpy DtoH (Device -> Pageable)", 4),
            gpu_ts=s + 650,
            gpu_dur=5,
        )
        b.sync("cudaStreamSynchronize", s + 60, 600)
        b.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", s + 700, 200)
        b.memory(s + 5, 4096, 1 << 20, 2 << 20)
    return b.to_dict()


def _sources() -> list[dict[str, Any]]:
    out = [_synthetic()]
    for rel in SMALL_REAL:
        p = SHARED / rel
        if p.exists():
            raw = p.read_bytes()
            out.append(json.loads(gzip.decompress(raw) if rel.endswith(".gz") else raw))
    return out


SOURCES = _sources()


@st.composite
def mutants(draw: st.DrawFn) -> tuple[bytes, bool]:
    doc = copy.deepcopy(SOURCES[draw(st.integers(0, len(SOURCES) - 1))])
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    for _ in range(draw(st.integers(1, 6))):
        if not events:
            break
        i = draw(st.integers(0, len(events) - 1))
        ev = events[i]
        op = draw(
            st.sampled_from(
                ["drop", "retype", "arg", "dup", "shuffle", "truncate", "replace", "huge"]
            )
        )
        if op == "drop" and isinstance(ev, dict) and ev:
            ev.pop(draw(st.sampled_from(sorted(ev))), None)
        elif op == "retype" and isinstance(ev, dict):
            ev[draw(st.sampled_from(KEYS))] = copy.deepcopy(draw(st.sampled_from(WEIRD)))
        elif op == "arg" and isinstance(ev, dict):
            args = ev.setdefault("args", {})
            if isinstance(args, dict):
                args[draw(st.sampled_from(ARG_KEYS))] = copy.deepcopy(draw(st.sampled_from(WEIRD)))
        elif op == "dup":
            events[i:i] = [copy.deepcopy(ev)] * draw(st.integers(1, 3))
        elif op == "shuffle":
            draw(st.randoms(use_true_random=False)).shuffle(events)
        elif op == "truncate":
            del events[draw(st.integers(0, len(events))) :]
        elif op == "replace":
            events[i] = copy.deepcopy(draw(st.sampled_from(WEIRD)))
        elif op == "huge" and isinstance(ev, dict):
            ev[draw(st.sampled_from(["ts", "dur", "pid", "tid"]))] = draw(
                st.sampled_from([2**64, -(2**64), 1e300, 9.9e15, -9.9e15, 1e-300])
            )
    data = json.dumps(doc, allow_nan=True).encode()
    if draw(st.booleans()) and draw(st.integers(0, 9)) == 0:
        data = data[: draw(st.integers(0, len(data)))]  # cut the file itself
    return data, draw(st.booleans())


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=EXAMPLES <= 40,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(mutants())
def test_mutated_traces_load_analyze_and_render_or_fail_cleanly(
    tmp_path_factory: pytest.TempPathFactory, mutant: tuple[bytes, bool]
) -> None:
    data, gz = mutant
    path = tmp_path_factory.mktemp("fuzz") / ("t.json.gz" if gz else "t.json")
    path.write_bytes(gzip.compress(data, 1) if gz else data)
    try:
        trace = load_trace(path)
    except TraceError as err:
        assert "\n" not in str(err) and str(path) in str(err)
        with mock.patch.object(decode, "CHUNK_BYTES", 97), pytest.raises(TraceError):
            load_trace(path)  # tiny chunks: the streaming cuts fail the same way
        return
    with mock.patch.object(decode, "CHUNK_BYTES", 97):
        small = load_trace(path)  # tiny chunks: the streaming cuts give the same tables
    for name in ("cpu_ops", "kernels", "runtime", "memcpy", "memory", "steps"):
        a, b = getattr(trace, name), getattr(small, name)
        assert a.drop(columns=_OBJECT_COLS, errors="ignore").equals(
            b.drop(columns=_OBJECT_COLS, errors="ignore")
        ), name
    assert trace.meta.skipped_events == small.meta.skipped_events
    report = analyze_trace(trace, None, Options(debug=True))
    assert not report.errored, [(e.id, e.error) for e in report.errored]
    json.loads(report.to_json())
    html = render_html(report)
    assert "<script>alert(1)</script>" not in html


def test_in_memory_and_file_loads_agree(tmp_path: Path) -> None:
    data = json.dumps(_synthetic()).encode()
    p = tmp_path / "t.json"
    p.write_bytes(data)
    a, b = load_bytes(data), load_trace(p)
    assert a.cpu_ops.drop(columns=["input_dims", "input_types"]).equals(
        b.cpu_ops.drop(columns=["input_dims", "input_types"])
    )
    assert a.kernels.drop(columns=["grid", "block"]).equals(
        b.kernels.drop(columns=["grid", "block"])
    )
