"""Derived columns: op nesting, launch/op links, GPU steps, memcpy kinds, python frames.

Everything here is vectorized with numpy or runs once per distinct name (category), never once
per row in Python, except the nesting fallback for threads whose ops overlap without nesting.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from advisor.arrays import intersect_ints, unique_ints

_MEMCPY_RE = re.compile(r"^Mem(?:cpy|set)\s*(\w+)?\s*(?:\((\w+)(?:\s*->\s*(\w+))?\))?")
_FRAME_RE = re.compile(r"^(.*)\((\d+)\): (.*)$")
_NON_USER_PARTS = (
    "/torch/",
    "site-packages",
    "dist-packages",
    "/lib/python3",
    "/advisor/profile",
    "/advisor/runner",  # where advisor.profile lived in traces recorded before this layout
    "<frozen",
    "<string>",
    "/usr/lib/python",
)
# top-level packages whose frames are never the user's own code
_LIBRARY_TOPS = frozenset(
    "torch torchvision torchaudio torchtext triton advisor numpy pandas scipy sklearn PIL tqdm "
    "transformers accelerate datasets huggingface_hub safetensors tokenizers lightning "
    "pytorch_lightning lightning_fabric deepspeed fairscale apex timm einops torchmetrics "
    "typer click rich jinja2 google absl tensorboard fsspec filelock sympy networkx torchrec "
    "torchdata functorch cv2 diffusers peft fbgemm_gpu typing_extensions hydra omegaconf wandb "
    "setuptools pkg_resources _pytest pytest lightning_utilities torchcodec sentencepiece "
    "tiktoken av decord librosa soundfile imageio skimage albumentations pyarrow h5py xformers "
    "flash_attn vllm sglang megatron torchtune ray open_clip mmcv mmengine detectron2 "
    "ultralytics monai kornia bitsandbytes optimum trl evaluate".split()
)
# standard-library modules seen in profiler stacks. Not all of sys.stdlib_module_names: a user's
# own script is written relative to its folder too ("train.py"), and may be called test.py,
# trace.py or profile.py.
_STDLIB_IN_STACKS = frozenset(
    "typing contextlib threading runpy functools abc enum dataclasses copy copyreg inspect "
    "importlib collections weakref multiprocessing concurrent queue selectors socket asyncio "
    "json posixpath genericpath ntpath os random re warnings traceback logging tempfile shutil "
    "pathlib codecs encodings pickle subprocess signal argparse linecache tokenize ast types "
    "operator itertools heapq bisect numbers string textwrap pprint reprlib dis opcode".split()
)
# console-script launchers (frames of /path/to/bin/advisor etc.)
_LAUNCHERS = frozenset({"advisor", "torchrun", "torch-advisor", "python", "python3"})


def assign_steps(ts: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    """The step whose [start, end) holds each time, -1 outside every step."""
    starts = steps["ts_ns"].to_numpy()
    ends = steps["end_ns"].to_numpy()
    nums = steps["step"].to_numpy()
    if not len(starts) or not len(ts):
        return np.full(len(ts), -1, dtype=np.int64)
    idx = np.searchsorted(starts, ts, side="right") - 1
    ok = (idx >= 0) & (ts < ends[np.clip(idx, 0, None)])
    return np.where(ok, nums[np.clip(idx, 0, None)], -1).astype(np.int64)


def nest_ops(tid: np.ndarray, ts: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(depth, parent row) of each op within its thread: the stack of ops open at its start.

    With ops sorted by (thread, start, longest first) and properly nested, the depth of op i is
    the number of earlier ops of its thread still open at its start, and its parent is the last
    earlier op of its thread one level up: both come from sorts and binary searches. Every parent
    is then checked to contain its child; a thread that fails the check (ops that overlap without
    nesting) is redone with the explicit stack, which is what defines the answer.
    """
    n = len(ts)
    depth = np.zeros(n, dtype=np.int64)
    parent = np.full(n, -1, dtype=np.int64)
    if not n:
        return depth, parent
    order = np.lexsort((ts - end, ts, tid))  # thread, start, longest first
    t, s, e = tid[order], ts[order], end[order]
    gpos = np.arange(n, dtype=np.int64)
    cut = np.flatnonzero(t[1:] != t[:-1]) + 1
    starts = np.concatenate([[0], cut])
    stops = np.concatenate([cut, [n]])
    first = np.repeat(starts, stops - starts)  # position where my thread starts
    # my thread's ops that have ended by my start (ends sorted per thread)
    ended = np.empty(n, dtype=np.int64)
    for a, b in zip(starts.tolist(), stops.tolist(), strict=True):
        ended[a:b] = np.searchsorted(np.sort(e[a:b]), s[a:b], side="right")
    # ...less the zero-length ops that start with me and sort at or after me
    zero = e == s
    new = np.ones(n, dtype=bool)
    new[1:] = (t[1:] != t[:-1]) | (s[1:] != s[:-1])
    g0 = np.flatnonzero(new)
    g1 = np.append(g0[1:], n)
    gid = np.cumsum(new) - 1
    del new
    cz = np.concatenate([[0], np.cumsum(zero)])
    ended -= np.where(zero, g1[gid] - gpos, cz[g1[gid]] - cz[g0[gid]])
    del gid, cz, g0, g1, zero
    d = gpos - first - ended
    del ended
    bad = d < 0
    np.maximum(d, 0, out=d)
    par = np.full(n, -1, dtype=np.int64)
    q = np.flatnonzero(d > 0)
    if len(q):
        keys = d * n + gpos
        keys.sort()
        hit = np.searchsorted(keys, (d[q] - 1) * n + q, side="left") - 1
        cand = keys[np.clip(hit, 0, None)]
        del keys
        p = cand % n
        ok = (hit >= 0) & (cand // n == d[q] - 1) & (p >= first[q])
        del cand, hit
        p = np.where(ok, p, 0)
        ok &= (s[p] <= s[q]) & (e[p] > s[q]) & (e[p] >= e[q])
        bad[q[~ok]] = True
        par[q] = np.where(ok, p, -1)
    if bad.any():
        for a, b in zip(starts.tolist(), stops.tolist(), strict=True):
            if bad[a:b].any():
                rows = gpos[a:b]
                d[a:b], par[a:b] = _stack_nest(s[a:b], e[a:b], rows)
    depth[order] = d
    parent[order] = np.where(par >= 0, order[np.clip(par, 0, None)], -1)
    return depth, parent


def _stack_nest(s: np.ndarray, e: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The explicit stack on one thread (positions in ``rows`` order)."""
    depth = [0] * len(rows)
    parent = [-1] * len(rows)
    stack: list[int] = []
    ends: list[int] = []
    pos = rows.tolist()
    for i, (start, stop) in enumerate(zip(s.tolist(), e.tolist(), strict=True)):
        while ends and ends[-1] <= start:
            stack.pop()
            ends.pop()
        if stack:
            parent[i] = stack[-1]
            depth[i] = len(stack)
        stack.append(pos[i])
        ends.append(stop)
    return np.array(depth, dtype=np.int64), np.array(parent, dtype=np.int64)


def op_index(rt: pd.DataFrame, ops: pd.DataFrame, depth: np.ndarray) -> np.ndarray:
    """Row in cpu_ops of the op that issued each runtime call.

    Matched by External id when the matched op is on the same thread and encloses the call in
    time (the innermost op wins when an id repeats); otherwise (some 2.0-era traces set a
    runtime call's External id to its correlation id, which may collide with an unrelated op's
    id) the innermost op on the same thread whose time range encloses the call.
    """
    out = np.full(len(rt), -1, dtype=np.int64)
    if not len(rt) or not len(ops):
        return out
    ops_ext = ops["external_id"].to_numpy()
    valid = np.flatnonzero(ops_ext >= 0)
    if len(valid):
        # sort by (id, depth) and take the last (deepest) of each id
        o = valid[np.lexsort((depth[valid], ops_ext[valid]))]
        ids = ops_ext[o]
        last = np.ones(len(o), dtype=bool)
        last[:-1] = ids[1:] != ids[:-1]
        out = _lookup(ids[last], o[last], rt["external_id"].to_numpy())
    ok = out >= 0
    if ok.any():
        ok &= _encloses(ops, rt, np.clip(out, 0, None))
    if not ok.all():
        out = np.where(ok, out, _enclosing_op(rt, ops))
    return out


_ENCLOSE_TOL_NS = 1000  # clock rounding between op and runtime events


def _encloses(ops: pd.DataFrame, rt: pd.DataFrame, cand: np.ndarray) -> np.ndarray:
    """Whether cpu_ops rows ``cand`` are on each runtime call's thread and enclose it in time."""
    tol = _ENCLOSE_TOL_NS
    return (
        (ops["tid"].to_numpy()[cand] == rt["tid"].to_numpy())
        & (ops["pid"].to_numpy()[cand] == rt["pid"].to_numpy())
        & (ops["ts_ns"].to_numpy()[cand] <= rt["ts_ns"].to_numpy() + tol)
        & (ops["end_ns"].to_numpy()[cand] + tol >= rt["end_ns"].to_numpy())
    )


def _enclosing_op(rt: pd.DataFrame, ops: pd.DataFrame) -> np.ndarray:
    """The innermost cpu_ops row on the same thread whose range encloses each runtime call."""
    out = np.full(len(rt), -1, dtype=np.int64)
    parent = ops["parent_idx"].to_numpy()
    o_key = ops["pid"].to_numpy(), ops["tid"].to_numpy()
    r_key = rt["pid"].to_numpy(), rt["tid"].to_numpy()
    o_ts = ops["ts_ns"].to_numpy()
    o_end = ops["end_ns"].to_numpy()
    r_ts = rt["ts_ns"].to_numpy()
    r_end = rt["end_ns"].to_numpy()
    tol = _ENCLOSE_TOL_NS
    o_groups = pd.Series(np.arange(len(ops))).groupby(list(o_key), sort=False).indices
    r_groups = pd.Series(np.arange(len(rt))).groupby(list(r_key), sort=False).indices
    for key, r_rows in r_groups.items():
        o_rows = o_groups.get(key)
        if o_rows is None:
            continue
        # ops sorted by start, longest first on ties: the last op starting at or before a
        # call is the innermost candidate; its ancestors include the op enclosing the call
        order = o_rows[np.lexsort((-(o_end[o_rows] - o_ts[o_rows]), o_ts[o_rows]))]
        pos = np.searchsorted(o_ts[order], r_ts[r_rows] + tol, side="right") - 1
        cand = np.where(pos >= 0, order[np.clip(pos, 0, None)], -1)
        for _ in range(256):
            bad = (cand >= 0) & (o_end[np.clip(cand, 0, None)] + tol < r_end[r_rows])
            if not bad.any():
                break
            cand = np.where(bad, parent[np.clip(cand, 0, None)], cand)
        out[r_rows] = cand
    return out


def launch_index(gpu_corr: np.ndarray, rt_corr: np.ndarray) -> np.ndarray:
    """Row in runtime of the call that launched each kernel/copy (first call per correlation)."""
    valid = np.flatnonzero(rt_corr >= 0)
    if not len(gpu_corr) or not len(valid):
        return np.full(len(gpu_corr), -1, dtype=np.int64)
    o = valid[np.argsort(rt_corr[valid], kind="stable")]
    ids = rt_corr[o]
    first = np.ones(len(o), dtype=bool)
    first[1:] = ids[1:] != ids[:-1]
    return _lookup(ids[first], o[first], gpu_corr)


_FLOW_TOL_NS = 1000  # a flow's end sits at its slice's start; clocks round to 1 us


def flow_launches(
    flows: dict[str, np.ndarray],
    rt: pd.DataFrame,
    gpu_ts: np.ndarray,
    gpu_end: np.ndarray,
    gpu_dev: np.ndarray,
) -> np.ndarray:
    """Row in runtime of the call that launched each GPU activity, through flow events: one end
    of a flow inside a runtime call (same pid and tid, within its time range), another inside
    the GPU activity (its device is the end's pid). Kineto writes ``ac2g`` flows this way (start
    on the call, finish with ``bp: "e"`` on the kernel); which end is which, and the category,
    do not matter. -1 where no flow joins the two."""
    out = np.full(len(gpu_ts), -1, dtype=np.int64)
    n = len(flows.get("ts", ()))
    if not n or not len(rt) or not len(gpu_ts):
        return out
    ts, fid = flows["ts"], flows["fid"]
    on_rt = _enclosing(
        (rt["pid"].to_numpy(), rt["tid"].to_numpy()),
        rt["ts_ns"].to_numpy(),
        rt["end_ns"].to_numpy(),
        (flows["pid"], flows["tid"]),
        ts,
    )
    on_gpu = _enclosing((gpu_dev,), gpu_ts, gpu_end, (flows["pid"],), ts)
    src = np.flatnonzero((on_rt >= 0) & (fid >= 0))
    if not len(src):
        return out
    # the call each flow id starts from (the first when an id repeats)
    order = src[np.argsort(fid[src], kind="stable")]
    ids = fid[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = ids[1:] != ids[:-1]
    dst = np.flatnonzero((on_gpu >= 0) & (on_rt < 0))
    call = _lookup(ids[first], on_rt[order[first]], fid[dst])
    hit = call >= 0
    out[on_gpu[dst[hit]]] = call[hit]
    return out


def _enclosing(
    row_keys: tuple[np.ndarray, ...],
    starts: np.ndarray,
    ends: np.ndarray,
    q_keys: tuple[np.ndarray, ...],
    q_ts: np.ndarray,
) -> np.ndarray:
    """For each query: the row with the same keys whose [start, end] holds its time (the latest
    such start, with ``_FLOW_TOL_NS`` of slack), else -1."""
    out = np.full(len(q_ts), -1, dtype=np.int64)
    if not len(starts) or not len(q_ts):
        return out
    both = np.concatenate([np.stack(row_keys, 1), np.stack(q_keys, 1)])
    _, code = np.unique(both, axis=0, return_inverse=True)
    code = code.reshape(-1)
    rc, qc = code[: len(starts)], code[len(starts) :]
    order = np.lexsort((starts, rc))
    rc_s, st_s = rc[order], starts[order]
    for k in intersect_ints(unique_ints(qc), rc_s).tolist():
        lo, hi = np.searchsorted(rc_s, k, "left"), np.searchsorted(rc_s, k, "right")
        qi = np.flatnonzero(qc == k)
        pos = np.searchsorted(st_s[lo:hi], q_ts[qi] + _FLOW_TOL_NS, side="right") - 1
        cand = order[lo + np.clip(pos, 0, None)]
        ok = (pos >= 0) & (ends[cand] + _FLOW_TOL_NS >= q_ts[qi])
        out[qi[ok]] = cand[ok]
    return out


def external_launches(
    gpu_ext: np.ndarray,
    gpu_ts: np.ndarray,
    gpu_copy: np.ndarray,
    rt: pd.DataFrame,
    taken: np.ndarray,
) -> np.ndarray:
    """Row in runtime of the call that launched each GPU activity, through the ``External id``
    both carry, for traces with neither correlation ids nor flows: per id, the GPU activities
    and the calls that queue that kind of work (launch calls for kernels, memcpy/memset calls
    for copies; none already linked, ``taken``) are paired in time order, a call never after
    its activity. -1 where none pairs."""
    out = np.full(len(gpu_ext), -1, dtype=np.int64)
    if not len(rt) or not len(gpu_ext) or not (gpu_ext >= 0).any():
        return out
    names = rt["name"].array
    cats = [str(c) for c in names.categories]
    launch = _per_code(np.array(["Launch" in c for c in cats], dtype=bool), names.codes, False)
    copy = _per_code(
        np.array([("Memcpy" in c or "Memset" in c) for c in cats], dtype=bool), names.codes, False
    )
    rt_ext, rt_ts = rt["external_id"].to_numpy(), rt["ts_ns"].to_numpy()
    for is_copy, kind in ((False, launch), (True, copy)):
        calls = np.flatnonzero(kind & ~taken & (rt_ext >= 0))
        acts = np.flatnonzero((gpu_ext >= 0) & (gpu_copy == is_copy))
        if not len(calls) or not len(acts):
            continue
        calls = calls[np.lexsort((rt_ts[calls], rt_ext[calls]))]
        acts = acts[np.lexsort((gpu_ts[acts], gpu_ext[acts]))]
        # the k-th activity of an id pairs with the k-th call of that id
        c_rank = _rank_within(rt_ext[calls])
        a_rank = _rank_within(gpu_ext[acts])
        c_key = np.stack([rt_ext[calls], c_rank], 1)
        a_key = np.stack([gpu_ext[acts], a_rank], 1)
        _, code = np.unique(np.concatenate([c_key, a_key]), axis=0, return_inverse=True)
        code = code.reshape(-1)
        c_code, a_code = code[: len(calls)], code[len(calls) :]
        call = _lookup(np.sort(c_code), calls[np.argsort(c_code)], a_code)
        ok = (call >= 0) & (rt_ts[np.clip(call, 0, None)] <= gpu_ts[acts] + _FLOW_TOL_NS)
        out[acts[ok]] = call[ok]
    return out


def _rank_within(sorted_ids: np.ndarray) -> np.ndarray:
    """0, 1, 2... within each run of equal ids (the ids sorted)."""
    n = len(sorted_ids)
    start = np.ones(n, dtype=bool)
    start[1:] = sorted_ids[1:] != sorted_ids[:-1]
    first = np.maximum.accumulate(np.where(start, np.arange(n), 0))
    return np.arange(n) - first


def _lookup(keys: np.ndarray, values: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """values[k] where keys[k] == query (keys sorted, unique), else -1."""
    i = np.clip(np.searchsorted(keys, queries), 0, len(keys) - 1)
    hit = (keys[i] == queries) & (queries >= 0)
    return np.where(hit, values[i], -1).astype(np.int64)


def gpu_steps(
    gpu_ts: np.ndarray, launch: np.ndarray, rt_steps: np.ndarray, steps: pd.DataFrame
) -> np.ndarray:
    """GPU work belongs to the step that launched it; unmatched work goes by its own time."""
    by_time = assign_steps(gpu_ts, steps)
    if not len(rt_steps):
        return by_time
    launched = np.where(launch >= 0, rt_steps[np.clip(launch, 0, None)], -1)
    return np.where(launched >= 0, launched, by_time).astype(np.int64)


def _per_code(per_cat: np.ndarray, codes: np.ndarray, missing: object) -> np.ndarray:
    if not len(codes):
        return per_cat[:0]
    ext = np.concatenate([per_cat, np.array([missing], dtype=per_cat.dtype)])
    return ext[codes]  # code -1 picks the trailing "missing" value


def memcpy_kinds(names: pd.Categorical, argkind: np.ndarray) -> dict[str, pd.Categorical]:
    """kind (HtoD, DtoH, ..., Memset), src and dst memory kinds from the copy's name."""
    info = []
    for n in names.categories:
        n = str(n)
        m = _MEMCPY_RE.match(n)
        if n.startswith("Memset"):
            info.append(("Memset", "", (m.group(2) or "") if m else ""))
        elif m:
            info.append((m.group(1) or "", m.group(2) or "", m.group(3) or ""))
        else:
            info.append(("", "", ""))
    out = {}
    for j, col in enumerate(("kind", "src", "dst")):
        per = np.empty(len(info), dtype=object)
        per[:] = [x[j] for x in info]
        vals = _per_code(per, names.codes, "")
        if col == "kind" and len(vals):
            missing = (vals == "") & np.array([isinstance(v, str) for v in argkind], dtype=bool)
            vals[missing] = argkind[missing]
        out[col] = pd.Categorical(vals)
    return out


def is_user_file(file: str) -> bool:
    """A source file the user wrote (not torch, the standard library or site-packages)."""
    if not file or file.startswith("<"):
        return False
    f = file.replace("\\", "/")
    # torch >= 2.x writes library frames relative to their sys.path entry: "torch/nn/conv.py",
    # "typing.py"; the first component then names a library or standard-library module
    if not f.startswith("/") and not (len(f) > 1 and f[1] == ":"):
        first = f.split("/", 1)[0].removesuffix(".py")
        if first in _LIBRARY_TOPS or first in _STDLIB_IN_STACKS:
            return False
    if f.rsplit("/", 1)[-1] in _LAUNCHERS:
        return False
    return not any(part in f for part in _NON_USER_PARTS)


def parse_frame(name: str) -> tuple[str, int, str] | None:
    """``"train.py(42): step"`` -> ``("train.py", 42, "step")``."""
    m = _FRAME_RE.match(name)
    if not m:
        return None
    return m.group(1), int(m.group(2)), m.group(3)


def call_sites(values: np.ndarray) -> dict[str, np.ndarray]:
    """call_file, call_line of each python_function row from its ``call_site`` arg (the caller's
    ``"file(line): function"`` at the moment of the call, which ``advisor profile`` writes for
    calls made from the user's files); "" and -1 where absent or unreadable."""
    codes, uniq = pd.factorize(pd.Series(values, dtype=object), use_na_sentinel=True)
    files = np.empty(len(uniq), dtype=object)
    lines = np.full(len(uniq), -1, dtype=np.int64)
    files[:] = ""
    for i, v in enumerate(uniq):
        fr = parse_frame(v) if isinstance(v, str) else None
        if fr is not None and 0 < fr[1] < 1 << 62:
            files[i], lines[i] = fr[0], fr[1]
    return {"call_file": _per_code(files, codes, ""), "call_line": _per_code(lines, codes, -1)}


def python_frames(names: pd.Categorical) -> dict[str, np.ndarray]:
    """file, line, function, is_user of each python_function row, parsed once per name."""
    info = []
    for n in names.categories:
        fr = parse_frame(str(n))
        if fr is None or not -(1 << 62) < fr[1] < 1 << 62:
            info.append(("", -1, str(n), False))
        else:
            info.append((fr[0], fr[1], fr[2], is_user_file(fr[0])))
    out: dict[str, np.ndarray] = {}
    for j, (col, dt) in enumerate(
        (("file", object), ("line", np.int64), ("function", object), ("is_user", bool))
    ):
        per = np.empty(len(info), dtype=dt)
        per[:] = [x[j] for x in info]
        out[col] = _per_code(
            per, names.codes, "" if dt is object else (-1 if col == "line" else False)
        )
    return out
