"""A tiny builder of Kineto-format traces for unit tests.

Times are given in microseconds (floats), as in the files torch.profiler writes::

    b = TraceBuilder(cc=(8, 0))
    b.step(1, 0, 1000)
    op = b.op("aten::mm", 10, 50, dims=[[64, 30], [30, 64]], types=["float", "float"])
    b.launch(op, "cudaLaunchKernel", 20, 5, kernel="volta_sgemm_128x64_nn", gpu_ts=30, gpu_dur=40)
    trace = b.load()
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from advisor.trace import Trace, load_bytes, load_trace

PID = 1000
TID = 1000


class TraceBuilder:
    def __init__(
        self,
        cc: tuple[int, int] | None = (8, 0),
        gpu_name: str = "NVIDIA A100-SXM4-80GB",
        total_mem: int = 80 * 1024**3,
        rank: int | None = None,
        world_size: int | None = None,
        base_ts: float = 1_000_000.0,
    ) -> None:
        self.events: list[dict[str, Any]] = []
        self.header: dict[str, Any] = {"schemaVersion": 1}
        if cc is not None:
            self.header["deviceProperties"] = [
                {
                    "id": 0,
                    "name": gpu_name,
                    "totalGlobalMem": total_mem,
                    "computeMajor": cc[0],
                    "computeMinor": cc[1],
                    "numSms": 108,
                }
            ]
        else:
            self.header["deviceProperties"] = []
        if rank is not None:
            self.header["distributedInfo"] = {
                "backend": "nccl",
                "rank": rank,
                "world_size": world_size or 1,
            }
        self.base = base_ts
        self._ext = 0
        self._corr = 0
        self._pyid = 0

    # ---- raw events -------------------------------------------------------------
    def _x(
        self, cat: str, name: str, ts: float, dur: float, pid: Any, tid: Any, args: dict[str, Any]
    ) -> dict[str, Any]:
        ev = {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": pid,
            "tid": tid,
            "ts": self.base + ts,
            "dur": dur,
            "args": args,
        }
        self.events.append(ev)
        return ev

    def next_ext(self) -> int:
        self._ext += 1
        return self._ext

    def step(self, n: int, ts: float, dur: float, tid: int = TID) -> dict[str, Any]:
        return self._x(
            "user_annotation",
            f"ProfilerStep#{n}",
            ts,
            dur,
            PID,
            tid,
            {"External id": self.next_ext()},
        )

    def annotation(
        self, name: str, ts: float, dur: float, tid: int = TID, gpu: bool = False
    ) -> dict[str, Any]:
        cat = "gpu_user_annotation" if gpu else "user_annotation"
        return self._x(
            cat,
            name,
            ts,
            dur,
            0 if gpu else PID,
            7 if gpu else tid,
            {"External id": self.next_ext()},
        )

    def op(
        self,
        name: str,
        ts: float,
        dur: float,
        tid: int = TID,
        dims: list[Any] | None = None,
        types: list[Any] | None = None,
        seq: int | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        args: dict[str, Any] = {"External id": self.next_ext()}
        if dims is not None:
            args["Input Dims"] = dims
        if types is not None:
            args["Input type"] = types
        if seq is not None:
            args["Sequence number"] = seq
        args.update(extra)
        return self._x("cpu_op", name, ts, dur, PID, tid, args)

    def runtime(
        self,
        name: str,
        ts: float,
        dur: float,
        op: dict[str, Any] | None = None,
        tid: int = TID,
        corr: int | None = None,
    ) -> dict[str, Any]:
        if corr is None:
            self._corr += 1
            corr = self._corr
        ext = op["args"]["External id"] if op is not None else 0
        return self._x(
            "cuda_runtime",
            name,
            ts,
            dur,
            PID,
            tid,
            {"External id": ext, "correlation": corr, "cbid": 1},
        )

    def kernel(
        self,
        name: str,
        ts: float,
        dur: float,
        corr: int = 0,
        ext: int = 0,
        device: int = 0,
        stream: int = 7,
        grid: list[int] | None = None,
        block: list[int] | None = None,
    ) -> dict[str, Any]:
        args = {
            "External id": ext,
            "device": device,
            "stream": stream,
            "correlation": corr,
            "grid": grid or [1, 1, 1],
            "block": block or [128, 1, 1],
        }
        return self._x("kernel", name, ts, dur, device, stream, args)

    def memcpy(
        self,
        name: str,
        ts: float,
        dur: float,
        nbytes: int,
        corr: int = 0,
        ext: int = 0,
        device: int = 0,
        stream: int = 7,
    ) -> dict[str, Any]:
        cat = "gpu_memset" if name.startswith("Memset") else "gpu_memcpy"
        return self._x(
            cat,
            name,
            ts,
            dur,
            device,
            stream,
            {
                "External id": ext,
                "device": device,
                "stream": stream,
                "correlation": corr,
                "bytes": nbytes,
            },
        )

    def sync(
        self,
        name: str,
        ts: float,
        dur: float,
        kind: str = "stream",
        device: int = 0,
        stream: int = 7,
        corr: int = 0,
    ) -> dict[str, Any]:
        return self._x(
            "cuda_sync",
            name,
            ts,
            dur,
            device,
            stream,
            {"cuda_sync_kind": kind, "device": device, "stream": stream, "correlation": corr},
        )

    def frame(
        self,
        file: str,
        line: int,
        func: str,
        ts: float,
        dur: float,
        parent: dict[str, Any] | None = None,
        tid: int = TID,
    ) -> dict[str, Any]:
        self._pyid += 1
        args = {
            "Python id": self._pyid,
            "Python parent id": parent["args"]["Python id"] if parent else 0,
            "Python thread": 0,
        }
        return self._x("python_function", f"{file}({line}): {func}", ts, dur, PID, tid, args)

    def memory(
        self,
        ts: float,
        nbytes: int,
        total_allocated: int,
        total_reserved: int,
        device_type: int = 1,
        device_id: int = 0,
    ) -> dict[str, Any]:
        ev = {
            "ph": "i",
            "s": "t",
            "cat": "cpu_instant_event",
            "name": "[memory]",
            "pid": PID,
            "tid": TID,
            "ts": self.base + ts,
            "args": {
                "Bytes": nbytes,
                "Total Allocated": total_allocated,
                "Total Reserved": total_reserved,
                "Device Type": device_type,
                "Device Id": device_id,
                "Addr": 1,
            },
        }
        self.events.append(ev)
        return ev

    # ---- composite helpers -------------------------------------------------------
    def launch(
        self,
        op: dict[str, Any] | None,
        rt_name: str,
        ts: float,
        dur: float,
        kernel: str | None = None,
        gpu_ts: float | None = None,
        gpu_dur: float = 0.0,
        memcpy: tuple[str, int] | None = None,
        **kw: Any,
    ) -> tuple[dict, dict]:
        """A runtime call and the GPU work it launched (a kernel, or memcpy=(name, bytes))."""
        rt = self.runtime(rt_name, ts, dur, op)
        corr = rt["args"]["correlation"]
        ext = rt["args"]["External id"]
        start = gpu_ts if gpu_ts is not None else ts + dur
        if memcpy is not None:
            gpu = self.memcpy(memcpy[0], start, gpu_dur, memcpy[1], corr=corr, ext=ext)
        else:
            gpu = self.kernel(kernel or "void kernel()", start, gpu_dur, corr=corr, ext=ext, **kw)
        return rt, gpu

    # ---- output --------------------------------------------------------------------
    def to_dict(self, kineto_2021: bool = False) -> dict[str, Any]:
        """The trace; ``kineto_2021``: in the categories torch.profiler wrote in 2021 (see
        :func:`as_kineto_2021`)."""
        events = as_kineto_2021(self.events) if kineto_2021 else list(self.events)
        return {**self.header, "traceEvents": events}

    def write(self, path: Path, gz: bool | None = None) -> Path:
        data = json.dumps(self.to_dict()).encode()
        if gz if gz is not None else str(path).endswith(".gz"):
            data = gzip.compress(data)
        Path(path).write_bytes(data)
        return Path(path)

    def load(self, kineto_2021: bool = False) -> Trace:
        """Build the Trace in memory (no file) through the same code path as a real load;
        ``kineto_2021``: from the 2021 categories (:func:`as_kineto_2021`)."""
        return load_bytes(json.dumps(self.to_dict(kineto_2021)).encode(), "<builder>")

    def load_file(self, tmp_path: Path) -> Trace:
        return load_trace(self.write(tmp_path / "trace.json"))


# the categories torch.profiler (Kineto) wrote in 2021, by today's name: steps and ranges were
# operators, and there were no cuda_sync, python_function or gpu_user_annotation events
KINETO_2021 = {
    "cpu_op": "Operator",
    "user_annotation": "Operator",
    "cuda_runtime": "Runtime",
    "kernel": "Kernel",
    "gpu_memcpy": "Memcpy",
    "gpu_memset": "Memset",
}


def as_kineto_2021(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``events`` as a 2021 Kineto trace wrote them (``resnet50_num_workers_*`` in the shared
    traces): categories ``Operator``, ``Runtime``, ``Kernel``, ``Memcpy``, ``Memset``; runtime
    calls and GPU work carry ``external id`` (lower case); thread ids are strings; events of
    newer categories are left out."""
    out = []
    for ev in events:
        cat = KINETO_2021.get(str(ev.get("cat")))
        if cat is None:
            if ev.get("ph") == "X":
                continue  # cuda_sync, python_function, gpu_user_annotation: not written then
            out.append(dict(ev))
            continue
        args = dict(ev.get("args") or {})
        if cat in ("Runtime", "Kernel", "Memcpy", "Memset") and "External id" in args:
            args["external id"] = args.pop("External id")
        out.append({**ev, "cat": cat, "tid": str(ev["tid"]), "args": args})
    return out
