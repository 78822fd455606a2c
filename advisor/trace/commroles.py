"""Which GPU kernels are communication: one table of rules, by library family and stream use.

``kernels.is_comm`` (and every figure built on it: the communication share, comm/compute overlap,
exposed communication, the collectives matched across ranks, the replay's collective nodes)
comes from :data:`RULES`. A rule names a *family* and a regular expression searched
(case-insensitively) in the kernel's name:

- **by library** (the name alone is enough): NCCL/RCCL (``ncclKernel_*``, ``ncclDevKernel_*``,
  ``rccl*``), DeepEP's dispatch and combine kernels (``deep_ep::intranode::dispatch<...>``,
  ``internode_ll::combine``, ``notify_dispatch``..., and its ``ep::intranode``/``ep::internode``
  namespaces under another: ``dpsk::ep::internode::dispatch``), vLLM's (and SGLang's) custom all-reduce
  (``cross_device_reduce_1stage``/``2stage``), PyTorch symmetric memory and the one-shot /
  two-shot all-reduce kernels of the libraries built on it (``multimem_all_reduce_kernel``,
  ``one_shot_all_reduce_kernel``, TensorRT-LLM's ``oneShotAllReduceKernel``...), NVSHMEM;
- **by role on a dedicated stream** (``dedicated_stream=True``): generic names such as
  ``all_to_all`` or a MoE ``dispatch``/``combine`` kernel count as communication only on a stream
  that runs communication alone: every kernel on that stream (same device) matches a rule of
  the table. The same name on a stream that also computes is taken for computation.
- **by behaviour** (:func:`by_behaviour`): a kernel whose name holds a word of communication
  (:data:`COMM_WORDS`: dispatch, combine, all-to-all, all-gather, reduce-scatter, all-reduce,
  an ``ep::`` namespace, p2p, send/recv) counts as communication when its stream behaves as a
  communication stream: those kernels take most (:data:`MIN_STREAM_SHARE`) of the stream's
  kernel time, other streams of the same GPU compute during most (:data:`MIN_OVERLAP`) of their
  time, and they launch few blocks (the median launch at most one block per SM/CU: a persistent
  kernel that moves data on a few SMs, as DeepEP's and NCCL's do, where a compute kernel fills
  the GPU). A DeepEP build under its own namespace (``dpsk::ep::internode::dispatch``) on a
  20-SM side stream is recognised so. The trace-quality notes say which kernels were taken this
  way (:func:`behaviour_note`).

A plugin adds rules with :func:`advisor.detect.registry.comm_kernels` (docs/plugins.md); they
apply to the traces loaded after the plugin is imported (``advisor`` imports the plugins before
it loads a trace).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from advisor.trace.intervals import covered_by, union


@dataclass(frozen=True)
class CommRule:
    """Kernels whose name matches ``pattern`` (searched, case-insensitive) are communication of
    ``family``; with ``dedicated_stream``, only on a stream where every kernel is communication."""

    family: str
    pattern: str
    dedicated_stream: bool = False

    def compiled(self) -> re.Pattern[str]:
        return re.compile(self.pattern, re.IGNORECASE)


RULES: tuple[CommRule, ...] = (
    CommRule("NCCL/RCCL", r"^(?:void\s+)?(?:nccl|rccl)|nccldevkernel"),
    # DeepEP's namespaces, also in builds that nest them under a namespace of their own
    # (``dpsk::ep::internode::dispatch``)
    CommRule("DeepEP", r"(?:deep_?ep|(?:^|::|\s)ep)::(?:intranode|internode(?:_ll)?)::"),
    CommRule("custom all-reduce", r"cross_device_reduce_[12]stage|custom_?all_?reduce"),
    CommRule("symmetric memory", r"multimem_\w*(?:reduce|gather)|symmetric_memory::"),
    CommRule(
        "one/two-shot all-reduce",
        r"(?:one|two)_?shot_?all_?reduce|all_?reduce\w*_(?:one|two)_?shot",
    ),
    CommRule("NVSHMEM", r"nvshmem"),
    CommRule("all-to-all", r"all_?to_?all", dedicated_stream=True),
    CommRule(
        "MoE dispatch/combine",
        r"(?:^|[_:\s])(?:dispatch|combine)(?:$|[_<(\s])",
        dedicated_stream=True,
    ),
)

_added: list[CommRule] = []  # rules registered by plugins (add_rules), after the table's own


def add_rules(new: list[CommRule]) -> None:
    """Extend the table (for the traces loaded from now on); a rule already there is ignored."""
    for r in new:
        r.compiled()  # a bad pattern fails here, where the plugin registers it
        if r not in RULES and r not in _added:
            _added.append(r)


def rules() -> tuple[CommRule, ...]:
    """The table: :data:`RULES`, then the rules plugins added."""
    return RULES + tuple(_added)


def families(names: pd.Categorical) -> tuple[np.ndarray, np.ndarray]:
    """Per distinct name (the categories): the index in :func:`rules` of the first rule that
    matches (-1: none), and whether that rule needs a dedicated stream."""
    table = rules()
    pats = [r.compiled() for r in table]
    cats = [str(c) for c in names.categories]
    first = np.full(len(cats), -1, dtype=np.int64)
    for i, name in enumerate(cats):
        for j, p in enumerate(pats):
            if p.search(name):
                first[i] = j
                break
    dedicated = np.array([table[j].dedicated_stream if j >= 0 else False for j in first], bool)
    return first, dedicated


def is_comm(
    names: pd.Categorical,
    device: np.ndarray,
    stream: np.ndarray,
    behaviour: Behaviour | None = None,
) -> np.ndarray:
    """Whether each kernel is communication (see the module doc); with ``behaviour`` (the
    kernels' times, grids and the GPUs' SM counts) also the kernels :func:`by_behaviour` finds."""
    comm = by_rules(names, device, stream)
    if behaviour is not None and len(comm):
        comm |= by_behaviour(names, device, stream, comm, behaviour)
    return comm


def by_rules(names: pd.Categorical, device: np.ndarray, stream: np.ndarray) -> np.ndarray:
    """Whether each kernel is communication by the table's rules alone (name, stream use)."""
    codes = np.asarray(names.codes)
    if not len(codes):
        return np.zeros(0, dtype=bool)
    first, dedicated = families(names)
    rule = np.append(first, -1)[codes]  # code -1 (no name): no rule
    needs_stream = np.append(dedicated, False)[codes]
    comm = (rule >= 0) & ~needs_stream
    if needs_stream.any():
        key = pd.factorize(
            pd.MultiIndex.from_arrays([pd.Series(device).fillna(-1), pd.Series(stream).fillna(-1)])
        )[0]
        # a stream runs communication alone when no kernel on it matches no rule
        other = np.bincount(key[rule < 0], minlength=int(key.max()) + 1)
        comm |= needs_stream & (other[key] == 0)
    return comm


def refresh(kernels: pd.DataFrame) -> None:
    """``kernels.is_comm`` again, with the rules plugins added (for a trace loaded before the
    plugins were imported); nothing to do while no plugin added any. What the behaviour rule
    found stays."""
    if _added and len(kernels):
        kernels["is_comm"] = kernels["is_comm"].to_numpy(dtype=bool) | by_rules(
            kernels["name"].array, kernels["device"].to_numpy(), kernels["stream"].to_numpy()
        )


# ---------------------------------------------------------------- by behaviour

COMM_WORDS = re.compile(
    r"(?:^|[_:\s])(?:dispatch|combine)(?:$|[_<(\s])|all_?to_?all|all_?gather|reduce_?scatter|"
    r"all_?reduce|(?:^|[:\s])ep::|(?:^|[_:\s])(?:p2p|send|recv)(?:$|[_<(\s])",
    re.IGNORECASE,
)
MIN_STREAM_SHARE = 0.5  # of the stream's kernel time in kernels named for communication
MIN_OVERLAP = 0.5  # of their time with another stream of the GPU computing
BLOCKS_UNKNOWN_UNITS = 64  # most blocks per launch where the GPU's SM/CU count is unknown


@dataclass(frozen=True)
class Behaviour:
    """What the behaviour rule reads of each kernel: start and end (ns), blocks launched (grid
    x*y*z, 0 when unknown), and each device's SM/CU count (0: unknown)."""

    ts_ns: np.ndarray
    end_ns: np.ndarray
    blocks: np.ndarray
    units: dict[int, int]


def blocks_of(grids: np.ndarray) -> np.ndarray:
    """Blocks per launch from the kernels' ``grid`` values ([x, y, z]; 0 when absent)."""
    out = np.zeros(len(grids), dtype=np.int64)
    seen: dict[tuple[Any, ...], int] = {}  # a trace launches few distinct grids
    for i, g in enumerate(grids):
        if isinstance(g, list | tuple) and g:
            key = tuple(g)
            n = seen.get(key)
            if n is None:
                ok = all(isinstance(x, int) for x in key)
                n = seen[key] = min(math.prod(key), 1 << 62) if ok else 0
            out[i] = n
    return out


def by_behaviour(
    names: pd.Categorical,
    device: np.ndarray,
    stream: np.ndarray,
    known: np.ndarray,
    b: Behaviour,
) -> np.ndarray:
    """Kernels not in ``known`` that are communication by behaviour (see the module doc)."""
    codes = np.asarray(names.codes)
    cats = [str(c) for c in names.categories]
    worded = np.array([COMM_WORDS.search(c) is not None for c in cats] + [False], dtype=bool)
    cand = worded[codes] & ~known
    out = np.zeros(len(codes), dtype=bool)
    if not cand.any():
        return out
    dur = b.end_ns - b.ts_ns
    for dev, st in {(int(d), int(s)) for d, s in zip(device[cand], stream[cand], strict=True)}:
        on_dev = device == dev
        here = on_dev & (stream == st)
        mine = here & cand
        if dur[mine].sum() < MIN_STREAM_SHARE * dur[here].sum():
            continue
        limit = b.units.get(dev) or BLOCKS_UNKNOWN_UNITS
        blocks = b.blocks[mine]
        if not (blocks > 0).all() or float(np.median(blocks)) > limit:
            continue
        others = on_dev & (stream != st) & ~known
        os_, oe = union(b.ts_ns[others], b.end_ns[others])
        covered = covered_by(os_, oe, b.ts_ns[mine], b.end_ns[mine]).sum()
        if covered >= MIN_OVERLAP * dur[mine].sum():
            out |= mine
    return out


def behaviour_note(names: pd.Categorical, found: np.ndarray, dur_ns: np.ndarray) -> str:
    """One line naming the kernels :func:`by_behaviour` took for communication ("" if none)."""
    if not found.any():
        return ""
    short = [
        str(n).strip().removeprefix("void ").split("(")[0].split("<")[0]
        for n in np.asarray(names)[found]
    ]
    per = pd.Series(dur_ns[found]).groupby(short).sum()
    top = sorted(per.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = ", ".join(str(n)[:60] for n, _ in top[:3])
    more = f" and {len(top) - 3} more" if len(top) > 3 else ""
    return f"{int(found.sum())} kernel(s) of {len(top)} name(s) ({shown}{more})"


def family_of(name: str) -> str | None:
    """The family of the first rule ``name`` matches (None: none), stream use aside."""
    for r in rules():
        if r.compiled().search(name):
            return r.family
    return None
