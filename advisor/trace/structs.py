"""The typed structs msgspec decodes trace events into: only the keys the tables need.

Shapes and other nested values stay raw JSON (``msgspec.Raw``) until the column builder decodes
each distinct value once. ``gc=False``: the structs hold no reference cycles, so the garbage
collector never needs to walk them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import msgspec

NAN = math.nan
NULL = msgspec.Raw(b"null")  # default of the raw (undecoded) fields


class Args(msgspec.Struct, frozen=True, gc=False):
    """The ``args`` keys the tables use. Shapes and lists stay raw JSON (decoded once per value)."""

    external_id: int = msgspec.field(name="External id", default=-1)
    external_id_legacy: int = msgspec.field(name="external id", default=-1)
    correlation: int = -1
    device: int = -1
    stream: int | str = -1
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default=NULL)
    input_dims_legacy: msgspec.Raw = msgspec.field(name="Input dims", default=NULL)
    input_type: msgspec.Raw = msgspec.field(name="Input type", default=NULL)
    nbytes: float = msgspec.field(name="bytes", default=NAN)
    kind: msgspec.Raw = NULL
    python_id: int = msgspec.field(name="Python id", default=-1)
    python_parent_id: int = msgspec.field(name="Python parent id", default=-1)
    call_stack: str | None = msgspec.field(name="Call stack", default=None)
    call_site: str | None = None  # written by ``advisor profile`` on python_function events
    seq: int = msgspec.field(name="Sequence number", default=-1)
    fwd_tid: int = msgspec.field(name="Fwd thread id", default=-1)
    grid: msgspec.Raw = NULL
    block: msgspec.Raw = NULL
    mem_bytes: float = msgspec.field(name="Bytes", default=NAN)
    total_allocated: float = msgspec.field(name="Total Allocated", default=NAN)
    total_reserved: float = msgspec.field(name="Total Reserved", default=NAN)
    device_type: int = msgspec.field(name="Device Type", default=-1)
    device_id: int = msgspec.field(name="Device Id", default=-1)
    sync_kind: str | None = msgspec.field(name="cuda_sync_kind", default=None)
    # several ranks in one file (TraceLens' trace fusion): each event's rank, and a process's
    # name in its ``process_name`` metadata event ("RANK 3 - GPU")
    rank: int | str = -1
    label: msgspec.Raw = msgspec.field(name="name", default=NULL)
    # a collective's metadata (record_param_comms ops; NCCL kernels since about torch 2.3)
    # (any JSON type: a tracer that writes another type for these loses nothing else)
    coll_name: Any = msgspec.field(name="Collective name", default=None)
    in_nelems: Any = msgspec.field(name="In msg nelems", default=None)
    out_nelems: Any = msgspec.field(name="Out msg nelems", default=None)
    group_size: Any = msgspec.field(name="Group size", default=None)
    dtype: Any = None


EMPTY_ARGS = Args()


class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str | None = None
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float = NAN
    dur: float = NAN
    args: Args = EMPTY_ARGS
    id: int | str | None = None  # flow events ("s"/"f"): the flow's id


class TraceFile(msgspec.Struct, gc=False):
    traceEvents: list[Event] | None = None  # noqa: N815 (the file's own key)
    deviceProperties: Any = None  # noqa: N815
    computeProperties: Any = None  # noqa: N815
    distributedInfo: Any = None  # noqa: N815
    baseTimeNanoseconds: Any = None  # noqa: N815
    schemaVersion: Any = None  # noqa: N815
    displayTimeUnit: Any = None  # noqa: N815
    record_shapes: Any = None
    cuda_runtime_version: Any = None
    cuda_driver_version: Any = None
    trace_id: Any = None


HEADER_KEYS = tuple(k for k in TraceFile.__struct_fields__ if k != "traceEvents")
_DECODE_FILE = msgspec.json.Decoder(TraceFile)
_DECODE_EVENTS = msgspec.json.Decoder(list[Event])
_DECODE_EVENT = msgspec.json.Decoder(Event)
_DECODE_ARGS = msgspec.json.Decoder(Args)
_DECODE_ANY = msgspec.json.Decoder()
_ENCODE = msgspec.json.Encoder()

Sink = Callable[[list[Event], int], None]  # (events, events dropped while decoding them)
