"""What a fix may change in a replay (:class:`Mods`: durations, gaps, edges of the step graph)
and the node-time columns the replay and the scans produce (``Column``, ``Times``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from advisor.replay.model import Bind, Graph

Column = list[int] | np.ndarray  # one time per node
Times = tuple[Column, Column, Column, Column]  # host starts and ends, GPU starts and ends


@dataclass
class Mods:
    """What a fix may change: host durations and gaps, syncs, GPU durations and edges (the
    arrays of :class:`~advisor.replay.model.Graph` of the same names)."""

    host_dur_ns: np.ndarray  # each host call's duration when it does not wait
    gap_ns: np.ndarray
    handoff_ns: np.ndarray
    own_ns: np.ndarray
    return_ns: np.ndarray
    awaited: np.ndarray  # -1: the call no longer waits
    gpu_dur_ns: np.ndarray
    launch: np.ndarray  # -1: no launch edge (the activity follows its stream)
    launch_ns: np.ndarray
    prev_ns: np.ndarray
    dep_ns: np.ndarray
    anchor_ns: np.ndarray  # each step boundary's offset from its anchor call

    @staticmethod
    def of(gr: Graph, calibrated: bool = True) -> Mods:
        g = gr.gpu
        launch_ns, prev_ns, dep_ns = g.launch_ns.copy(), g.prev_ns.copy(), g.dep_ns.copy()
        if not calibrated:  # the graph alone: no measured delay it cannot explain
            r = g.residual_ns
            launch_ns = np.where(g.bind == Bind.LAUNCH, launch_ns - r, launch_ns)
            prev_ns = np.where(g.bind == Bind.STREAM, prev_ns - r, prev_ns)
            dep_ns = np.where(g.bind == Bind.CROSS_STREAM, dep_ns - r, dep_ns)
        h = gr.host
        return Mods(
            host_dur_ns=h.end_ns - h.ts_ns,
            gap_ns=h.gap_ns.copy(),
            handoff_ns=h.handoff_ns.copy(),
            own_ns=h.own_ns.copy(),
            return_ns=h.return_ns.copy(),
            awaited=h.awaited.copy(),
            gpu_dur_ns=g.end_ns - g.ts_ns,
            launch=g.launch.copy(),
            launch_ns=launch_ns,
            prev_ns=prev_ns,
            dep_ns=dep_ns,
            anchor_ns=gr.steps.anchor_ns.copy(),
        )
