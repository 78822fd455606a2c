"""Which GPU kernels are communication: one table of rules, by library family and stream use.

``kernels.is_comm`` (and every figure built on it: the communication share, comm/compute overlap,
exposed communication, the collectives matched across ranks, the replay's collective nodes)
comes from :data:`RULES`. A rule names a *family* and a regular expression searched
(case-insensitively) in the kernel's name:

- **by library** (the name alone is enough): NCCL/RCCL (``ncclKernel_*``, ``ncclDevKernel_*``,
  ``rccl*``), DeepEP's dispatch and combine kernels (``deep_ep::intranode::dispatch<...>``,
  ``internode_ll::combine``, ``notify_dispatch``...), vLLM's (and SGLang's) custom all-reduce
  (``cross_device_reduce_1stage``/``2stage``), PyTorch symmetric memory and the one-shot /
  two-shot all-reduce kernels of the libraries built on it (``multimem_all_reduce_kernel``,
  ``one_shot_all_reduce_kernel``, TensorRT-LLM's ``oneShotAllReduceKernel``...), NVSHMEM;
- **by role on a dedicated stream** (``dedicated_stream=True``): generic names such as
  ``all_to_all`` or a MoE ``dispatch``/``combine`` kernel count as communication only on a stream
  that runs communication alone: every kernel on that stream (same device) matches a rule of
  the table. The same name on a stream that also computes is taken for computation.

A plugin adds rules with :func:`advisor.detect.registry.comm_kernels` (docs/plugins.md); they
apply to the traces loaded after the plugin is imported (``advisor`` imports the plugins before
it loads a trace).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd


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
    CommRule("DeepEP", r"deep_?ep::(?:intranode|internode(?:_ll)?)::"),
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


def is_comm(names: pd.Categorical, device: np.ndarray, stream: np.ndarray) -> np.ndarray:
    """Whether each kernel is communication (see the module doc)."""
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
    plugins were imported); nothing to do while no plugin added any."""
    if _added and len(kernels):
        kernels["is_comm"] = is_comm(
            kernels["name"].array, kernels["device"].to_numpy(), kernels["stream"].to_numpy()
        )


def family_of(name: str) -> str | None:
    """The family of the first rule ``name`` matches (None: none), stream use aside."""
    for r in rules():
        if r.compiled().search(name):
            return r.family
    return None
