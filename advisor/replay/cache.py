"""The replay's cache (:class:`ReplayCache`), held by each step graph
(:class:`~advisor.replay.model.Graph`), and the records it keeps: what every replay of one graph
reads, made once: each step's own work (:class:`OwnWork`, :mod:`advisor.replay.steptime`) and the
plans of the replay's scans (:class:`Plan`, made by :func:`advisor.replay.scanplan.plan`).

The records are declared here, below the graph that holds them and the modules that make them,
so that the graph's cache is typed without importing its makers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True, eq=False)
class OwnWork:
    """Per step, the nodes that bound its own GPU work, and the host's waits
    (:mod:`advisor.replay.steptime`)."""

    first: list[list[int]]  # per step: the first own activity on each stream it used
    last: list[list[tuple[int, int]]]  # ...its last one there, and the one that ended last
    carried: list[list[int]]  # per step: the activities issued before it that end last
    waits: list[tuple[int, int]]  # (call, step): the main thread's calls that wait
    keyed: np.ndarray  # the activities some replayed step issued
    key_of: np.ndarray  # ...and their step_key


@dataclass(eq=False)
class ReplayCache:
    """The replay's cache: what every replay of one graph reads, made on first use by the
    replay (:mod:`advisor.replay.engine`) and the fixes (:mod:`advisor.replay.fixes`), and
    kept as long as the graph (which lives in ``Trace.memo``). One slot per value; None: not
    made yet."""

    loop_lists: dict[str, list[Any]] | None = None  # the graph's arrays the replay loop reads
    unchanged: dict[str, tuple[np.ndarray, list[int]]] | None = None  # Mods.of(graph), as lists
    own_work: OwnWork | None = None  # each step's own GPU work and waits (steptime)
    one_step_host: np.ndarray | None = None  # bool per host call: in the one-step replay
    one_step_gpu: np.ndarray | None = None  # bool per GPU activity: in the one-step replay
    one_step_apart: bool | None = None  # the one-step replay reads no node only the full visits
    scan_plans: dict[bool, Plan | None] = field(
        default_factory=dict
    )  # the replay's plan (advisor.replay.scanplan) along the full order (False) or one step's
    shrink_plans: dict[int, tuple[object, list[tuple[np.ndarray, ...]]]] = field(
        default_factory=dict
    )  # ShrinkHost: id of the fix -> (the fix, what its ranges cover)


@dataclass(frozen=True, eq=False)
class Plan:
    """How to replay one graph along one order (see the module doc). Elements: host starts
    ``i``, host ends ``n_h + i``, GPU ends ``2 n_h + j``; ``n`` of them. Values live in one
    array of ``2 n + 1`` slots: the replayed times, the measured times, a zero."""

    n: int  # elements (host starts, host ends, GPU ends)
    el: np.ndarray  # per processed element (in processing order): its slot
    kind: np.ndarray  # 0: host start, 1: host end, 2: GPU end
    idx: np.ndarray  # its host call or GPU activity
    has_pred: np.ndarray  # bool: it follows its chain predecessor
    pred: np.ndarray  # the predecessor's slot at a run's first element (else unused), -1
    runs: list[tuple[int, int]]  # [a, b) in processing order, level by level
    src: np.ndarray  # per edge (sorted by element): the slot it reads
    ekind: np.ndarray  # where its offset comes from
    eidx: np.ndarray  # ...at this host call or GPU activity
    estart: np.ndarray  # per element: its first edge (every element has one)
    by_kind: list[tuple[int, np.ndarray, np.ndarray]]  # per edge kind: its edges, their index
    short: np.ndarray  # processed elements in short runs
    short_edges: np.ndarray  # their edges
    short_el: list[int]  # ...their slots, in the short runs' own numbering
    short_pred: list[int]  # ...each short run's predecessor slot at its start (-1: none)
    short_start: list[int]  # ...each one's first edge among the short edges
    short_src: list[int]  # ...each short edge's slot
    steps: list[tuple[bool, int, int]]  # the runs in order: (short, a, b), short ones renumbered
    early_syncs: np.ndarray  # syncs whose end a node reads before the sync's end is visited
    gpu_in: np.ndarray  # bool per GPU activity: replayed on this order
    values: np.ndarray  # the slots before a replay: measured, measured, zero
