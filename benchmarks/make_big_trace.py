"""Build a big trace by replicating the steps of a real one, keeping ids and correlations valid.

Copy k of every timed event is shifted by k trace spans; ``ProfilerStep#N`` becomes
``ProfilerStep#(N + k * steps)``; correlation, External id, Python id/parent id, Ev Idx, Record
function id, Sequence number and flow ids are offset by k times (the largest id + 1), so launches,
kernels, flows and python frames still pair up within each copy and never across copies.
Metadata events (``ph: M``) are written once. The output is plain JSON (or gzip for ``.gz``),
one event per line, written as a stream.

    python benchmarks/make_big_trace.py OUT.json [--source TRACE] [--size-mb 1024]
"""

from __future__ import annotations

import argparse
import gzip
import re
import sys
import zlib
from pathlib import Path
from typing import Any, BinaryIO

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import DEFAULT_TRACE  # noqa: E402

ID_ARGS = (
    "correlation",
    "External id",
    "external id",
    "Python id",
    "Python parent id",
    "Ev Idx",
    "Record function id",
    "Sequence number",
)
_STEP = re.compile(r"^ProfilerStep#(\d+)$")


def _load(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = zlib.decompress(data, wbits=31)
    doc = orjson.loads(data)
    return doc if isinstance(doc, dict) else {"traceEvents": doc}


def build(source: Path, out: Path, size_bytes: int) -> tuple[int, int]:
    """Write the big trace; returns (copies, bytes of JSON written)."""
    doc = _load(source)
    events = [e for e in doc.pop("traceEvents") if isinstance(e, dict)]
    meta = [e for e in events if e.get("ph") == "M"]
    timed = [e for e in events if e.get("ph") != "M" and isinstance(e.get("ts"), int | float)]
    t0 = min(e["ts"] for e in timed)
    t1 = max(e["ts"] + (e.get("dur") or 0) for e in timed)
    span = (t1 - t0) * 1.01 + 1000
    span = int(span) if all(isinstance(e["ts"], int) for e in timed) else span
    id_max = 0
    steps = [int(m.group(1)) for e in timed if (m := _STEP.match(str(e.get("name", ""))))]
    step_count = (max(steps) - min(steps) + 1) if steps else 0
    plan = []  # (event, args, base values) reused for every copy
    for e in timed:
        args = e.get("args") if isinstance(e.get("args"), dict) else None
        ids = {k: args[k] for k in ID_ARGS if args and isinstance(args.get(k), int)}
        if isinstance(e.get("id"), int):
            ids["id"] = e["id"]
        id_max = max([id_max, *ids.values()])
        m = _STEP.match(str(e.get("name", "")))
        plan.append((e, args, e["ts"], ids, int(m.group(1)) if m else None))
    off = id_max + 1
    head = {k: v for k, v in doc.items() if k not in ("traceName", "displayTimeUnit")}
    tail = {k: v for k, v in doc.items() if k in ("traceName", "displayTimeUnit")}
    written = 0
    copies = 0
    with _open(out) as fh:

        def put(b: bytes) -> None:
            nonlocal written
            fh.write(b)
            written += len(b)

        put(orjson.dumps(head)[:-1] + (b',\n"traceEvents": [\n' if head else b'"traceEvents": [\n'))
        put(b",\n".join(orjson.dumps(e) for e in meta))
        first = not meta
        while written < size_bytes:
            k = copies
            parts = []
            for e, args, ts, ids, step in plan:
                e["ts"] = ts + k * span
                for key, v in ids.items():
                    if key == "id":
                        e["id"] = v + k * off
                    elif v >= 0:
                        args[key] = v + k * off  # type: ignore[index]
                if step is not None:
                    e["name"] = f"ProfilerStep#{step + k * step_count}"
                parts.append(orjson.dumps(e))
            put((b"" if first else b",\n") + b",\n".join(parts))
            first = False
            copies += 1
        put(b"\n]" + (b",\n" + orjson.dumps(tail)[1:] if tail else b"}") + b"\n")
    return copies, written


class _open:
    """A plain file, or a gzip stream (level 1) for names ending in .gz."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fh: BinaryIO | None = None

    def __enter__(self) -> BinaryIO:
        if self.path.name.endswith(".gz"):
            self.fh = gzip.open(self.path, "wb", compresslevel=1)  # type: ignore[assignment]
        else:
            self.fh = open(self.path, "wb")  # noqa: SIM115
        assert self.fh is not None
        return self.fh

    def __exit__(self, *exc: object) -> None:
        assert self.fh is not None
        self.fh.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--source", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--size-mb", type=float, default=1024, help="JSON size to reach (MiB)")
    args = ap.parse_args(argv)
    copies, n = build(args.source, args.out, int(args.size_mb * (1 << 20)))
    print(f"{args.out}: {copies} copies of {args.source.name}, {n / 1e6:.0f} MB of JSON")
    return 0


if __name__ == "__main__":
    sys.exit(main())
