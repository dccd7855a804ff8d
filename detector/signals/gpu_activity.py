"""Which GPUs of a node work and which rest, where no label names their jobs: from utilization.

GPU peers (scorers/peers.py) are the GPUs of one node that run one workload. Where no workload
label names it (dcgm-exporter without its pod or Slurm job mapping), a node's GPUs were one
team, and when a job started on some of them the idle GPUs beside it read as lone deviants:
their clocks, power and temperatures stayed at idle while the median rose to the job's
(bench/RESULTS.md, "Robustness": shared nodes without workload labels, false alerts in the
first minutes of each job, before co-movement has the hour of evidence it needs). An idle
GPU's clocks are not a throttled GPU's: clocks and power follow the load, so they can only be
compared between GPUs under load, or between GPUs at rest.

So, per GPU, its utilization (``labels.gpu_activity_signal``, by default ``gpu_util``,
DCGM_FI_DEV_GPU_UTIL, one of dcgm-exporter's default fields) gives its state: at rest below
``REST_BELOW`` %, working from ``WORK_FROM`` % (in between it keeps its state: a checkpoint's
dip does not flip it). A GPU's first reading sets its side. After that a GPU moves to the
other side (a team of its own within its workload, ``GpuTeams.rest``) when at least
``TOGETHER`` GPUs of its node changed state the same way within ``TOGETHER_S`` of each other:
a job starting or ending moves its GPUs together, and so does a node's next job. Once a move
happens, every GPU of the node whose state matches the movers' joins them, so one that stopped
alone earlier rejoins its job's GPUs when they stop too. A GPU that stops on its own does not
move: a GPU that stops working while its job's other GPUs keep going is the deviant its peers
must see (rules/signals.yaml: ``gpu_util`` is bad when it goes down). One that starts on its
own (a one-GPU job, a rank that started late) joins the working side once it has worked for
``TOGETHER_S``: judged among idle GPUs it would be a deviant, and an idle GPU is none.

GPUs that start together while other GPUs of their node already work are another job (the
GPUs of one synchronous job start within seconds of each other; a job that starts later is
not theirs): they form a *crew*, a working team of their own (named by their lowest id),
until they rest again. Without it a side job that starts beside a running one was judged
against it for the hour or more co-movement needs, and read as its deviant at each of the
other job's phase changes (bench/RESULTS.md, "Robustness" item 28). A start with no other GPU
of the node at work (a whole-node job, a node's next job) is the node's plain working side.

GPUs with a workload label are left out: a label always wins (``GpuTeams``). O(GPUs) a tick.
"""

from __future__ import annotations

import numpy as np

from ..model import BoolArray, FloatArray, IntArray

REST_BELOW = 5.0  # utilization (%) below which a GPU is at rest
WORK_FROM = 20.0  # utilization (%) from which it works; in between it keeps its state
TOGETHER_S = 120.0  # state changes of a node's GPUs this close in time are one move
TOGETHER = 2  # GPUs that must change together for a move

_PER_GPU = ("node", "resting", "side", "changed_t", "started", "crew")
_DTYPES = {"node": np.int64, "resting": np.bool_, "side": np.bool_, "started": np.bool_}
_DTYPES["crew"] = np.int64


class GpuActivity:
    """Per GPU entity (ids 0, 1, ... as ``SignalMap`` numbers them) its state (``resting``),
    the side its team is on (``side``: True at rest), which follows the state only in moves
    of several GPUs of a node at once, and its crew (module docstring).

    ``observe`` each tick; ``take_changes`` returns the GPUs whose side changed since."""

    def __init__(self) -> None:
        self.node: IntArray = np.zeros(0, np.int64)
        self.resting: BoolArray = np.zeros(0, bool)  # its state, from its utilization
        self.side: BoolArray = np.zeros(0, bool)  # the side its team is on (True: at rest)
        self.changed_t: FloatArray = np.zeros(0)  # when its state last changed
        self.started: BoolArray = np.zeros(0, bool)  # has had a reading
        # working GPUs that started together beside others already working: the lowest id
        # of that start (-1: the node's plain working side)
        self.crew: IntArray = np.zeros(0, np.int64)
        self._changes: list[tuple[int, bool, int]] = []

    def __len__(self) -> int:
        return int(self.node.shape[0])

    def add_gpu(self, entity: int, node_id: int) -> None:
        """GPU entity ``entity`` (the next id) of node ``node_id``."""
        if entity != len(self):
            raise ValueError(f"GPU entity {entity} added out of order (expected {len(self)})")
        for name in _PER_GPU:
            fill = {"node": node_id, "changed_t": -np.inf, "crew": -1}.get(name, 0)
            grown = np.append(getattr(self, name), np.array([fill], dtype=_DTYPES.get(name)))
            setattr(self, name, grown)

    def observe(self, t: float, util: FloatArray) -> None:
        """One tick: ``util[e]``, GPU ``e``'s utilization in % (NaN: not observed, or a GPU
        whose workload a label names)."""
        n = len(self)
        if not n:
            return
        x = util[:n]
        with np.errstate(invalid="ignore"):
            observed = np.isfinite(x)
            state = np.where(x < REST_BELOW, True, np.where(x >= WORK_FROM, False, self.resting))
        first = observed & ~self.started
        if first.any():  # a first reading sets its side (nothing to move together with)
            self.resting[first] = self.side[first] = state[first]
            self.started |= first
            self._changes.extend((int(e), True, -1) for e in np.flatnonzero(first & state))
        flipped = observed & ~first & (state != self.resting)
        self.resting[flipped] = state[flipped]
        self.changed_t[flipped] = t
        lagging = self.started & (self.side != self.resting)
        if lagging.any():
            self._move(t, lagging)

    def _move(self, t: float, lagging: BoolArray) -> None:
        """Move the ``lagging`` GPUs (whose side is not their state) on a node where
        ``TOGETHER`` or more GPUs changed state the same way within ``TOGETHER_S``, and a GPU
        that has worked on its own for longer than ``TOGETHER_S``; GPUs starting together
        beside GPUs already at work form a crew."""
        recent = lagging & (t - self.changed_t <= TOGETHER_S)
        nodes = int(self.node.max()) + 1
        key = self.node * 2 + self.resting  # (node, state the GPUs changed to)
        together = np.bincount(key[recent], minlength=2 * nodes) >= TOGETHER
        started_alone = lagging & ~self.resting & ~recent
        moving = (lagging & together[key]) | started_alone
        # a start beside GPUs already working is another job: a crew of its own
        starting = moving & ~self.resting & ~started_alone
        working = self.started & ~self.side & ~moving
        busy = np.bincount(self.node[working], minlength=nodes) > 0
        lowest = np.full(nodes, len(self), dtype=np.int64)
        np.minimum.at(lowest, self.node[starting], np.flatnonzero(starting))
        self.crew[moving] = -1
        crewed = starting & busy[self.node]
        self.crew[crewed] = lowest[self.node[crewed]]
        for e in np.flatnonzero(moving).tolist():
            self.side[e] = self.resting[e]
            self._changes.append((e, bool(self.side[e]), int(self.crew[e])))

    def take_changes(self) -> list[tuple[int, bool, int]]:
        """(GPU entity, at rest, crew) of every GPU whose side changed since the last call (a
        GPU first read at rest included), in the order they changed."""
        changes, self._changes = self._changes, []
        return changes

    # -- persistence --------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name).copy() for name in _PER_GPU}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore ``state_dict`` output over the GPUs known now (a restored index numbers
        them as before); every GPU restored at rest is reported by the next
        ``take_changes``."""
        n = min(len(self), state["node"].shape[0])
        if not np.array_equal(state["node"][:n], self.node[:n]):
            raise ValueError("GPU activity: the saved GPUs are not the index's")
        for name in _PER_GPU[1:]:
            getattr(self, name)[:n] = state[name][:n]
        self._changes = [
            (e, bool(self.side[e]), int(self.crew[e]))
            for e in range(n)
            if self.side[e] or self.crew[e] >= 0
        ]
