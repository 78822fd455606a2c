"""The exact line of each call the user's code makes, written into the exported trace.

torch's Python tracer names a frame that was already running when tracing began by the line it
stood on at that moment, and every later frame by its ``def`` line: the exported trace alone
cannot tell which line of a training loop called ``.item()``. The live profiler can: after the
window, ``kineto_results.experimental_event_tree()`` holds each Python call (``PyCall``, and
``PyCCall`` for builtins such as ``Tensor.item``) with the caller's file, line and function at
the moment of the call. :func:`collect` keeps those made from the user's own files, keyed by
the event's start (ns) and name, and :func:`annotate` writes each as ``args["call_site"]``
(``"file(line): function"``, the format of a frame's name) on the matching ``python_function``
event of the exported trace (start = ``baseTimeNanoseconds`` + ``ts`` in µs x 1000; the events'
ids differ between the two). :mod:`advisor.derive.locate` then names the running line of each frame.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from advisor.jsontext import compact
from advisor.trace.links import is_user_file

Sites = dict[tuple[int, str], str]

# a larger exported trace keeps its frames' own lines: decoding it whole would cost more
# memory and time than the window itself
MAX_TRACE_BYTES = 768 << 20


def collect(prof: Any) -> Sites:
    """Call sites of Python calls made from the user's files, from a stopped profiler."""
    from torch._C._profiler import _EventType

    py_tags = (_EventType.PyCall, _EventType.PyCCall)
    out: Sites = {}
    results = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    if results is None:
        return out
    todo = list(results.experimental_event_tree())
    while todo:
        e = todo.pop()
        todo.extend(e.children)
        if e.tag not in py_tags:
            continue
        caller = e.extra_fields.caller
        file = str(caller.file_name)
        if is_user_file(file):
            out[(int(e.start_time_ns), str(e.name))] = (
                f"{file}({int(caller.line_number)}): {caller.function_name}"
            )
    return out


def annotate(trace_json: Path, sites: Sites) -> int:
    """Add ``call_site`` to the python_function events of an exported (uncompressed) trace in
    place; returns how many events got one. The file is left as it was when it is too large or
    not the JSON torch writes."""
    if not sites or os.path.getsize(trace_json) > MAX_TRACE_BYTES:
        return 0
    # the decoded events are many small dicts: without the cyclic collector (none of them can
    # form a cycle) decoding is about 4x faster, more so in a process holding a model
    was_on = gc.isenabled()
    gc.disable()
    try:
        return _annotate(trace_json, sites)
    finally:
        if was_on:
            gc.enable()


def _annotate(trace_json: Path, sites: Sites) -> int:
    data = msgspec.json.decode(trace_json.read_bytes())
    base = data.get("baseTimeNanoseconds") if isinstance(data, dict) else None
    events = data.get("traceEvents") if isinstance(data, dict) else None
    if not isinstance(base, int) or not isinstance(events, list):
        return 0
    n = 0
    for ev in events:
        if not isinstance(ev, dict) or ev.get("cat") != "python_function":
            continue
        ts, name = ev.get("ts"), ev.get("name")
        if not isinstance(ts, (int, float)) or not isinstance(name, str):
            continue
        start = base + round(ts * 1000)
        site = sites.get((start, name))
        for d in (-1, 1, -2, 2):  # ts is printed in µs with 3 decimals: allow its rounding
            if site is not None:
                break
            site = sites.get((start + d, name))
        if site is None:
            continue
        args = ev.get("args")
        if not isinstance(args, dict):
            args = ev["args"] = {}
        args["call_site"] = site
        n += 1
    if n:
        trace_json.write_bytes(compact(data))
    return n


def amender(
    prof: Any, put: Callable[[int | None, str | None], None], timed: Callable[[float], None]
) -> Callable[[Path], None] | None:
    """For :func:`advisor.profile.capture.export_trace`: the call sites of stopped ``prof``,
    written into its exported JSON; ``put(count, error)`` receives the outcome and
    ``timed(t0)`` each part's start. Never raises: a failure keeps the frames' own lines."""
    t0 = time.perf_counter()
    was_on = gc.isenabled()
    gc.disable()  # the event tree is many small objects, none in a cycle (see annotate)
    try:
        sites = collect(prof)
    except Exception as err:  # noqa: BLE001
        put(None, f"{type(err).__name__}: {err}")
        return None
    finally:
        if was_on:
            gc.enable()
        timed(t0)

    def amend(trace_json: Path) -> None:
        t1 = time.perf_counter()
        try:
            put(annotate(trace_json, sites), None)
        except Exception as err:  # noqa: BLE001
            put(None, f"{type(err).__name__}: {err}")
        timed(t1)

    return amend
