"""Which GPUs of a node run one job where no label names it: from how their power moves.

GPU peers (scorers/peers.py) are the GPUs of one node that run one workload. dcgm-exporter
names a GPU's workload only with its Kubernetes pod mapping or its Slurm job mapping
(``labels.gpu_workload_labels``); without either, all GPUs of a node were one team, and on a
node shared by several jobs each job's GPUs read as deviants whenever the other job changed
phase (bench/RESULTS.md, "Robustness": shared nodes without workload labels).

dcgm-exporter samples all GPUs of a node at once. In synchronous training the GPUs of one job
are then at the same point of their step, so their power readings rise and fall together,
from tick to tick and at every phase change; a GPU of another job is at its own step, and an
idle GPU follows nothing. So, per GPU, its power's departure from its own recent level (EW
mean, ``LEVEL_HALF_LIFE_S``), clipped at ``CLIP`` times its usual size (``SCALE_HALF_LIFE_S``)
so that no single event, a checkpoint or a failure, decides on its own; and per pair of GPUs
of a node, EW sums of the products of their departures (``HALF_LIFE_S``): their correlation.
GPUs correlated at or above ``LINK`` are linked, and a connected group of at least two is a
job. A group is *separate* when it hardly moves with the other observed GPUs of its node (their
mean correlation with its members below ``SEPARATE``): a node gone idle after a job, whose
fading common past leaves every pair near ``LINK``, breaks into chance groups that are not
separate. A group that has left, or formed of GPUs that were alone (below), stays separate
until that mean reaches ``LINK``, as a job's own GPUs are linked: one event that moves both
jobs at once (a node-wide power or clock event, two phase changes that coincide) lifts it to
0.3-0.4 for an hour, and must not merge them; nor must a side job's start, which moves with
the main job at first.

Only separate groups leave the node's own team (key -1, ``GpuTeams`` team 0): every one but
the node's largest, and that one too when it does not outnumber the rest of the node's team
(a job on two GPUs of a node whose six others idle: the six stay, the two leave). A GPU linked
to no other (an idle GPU, a one-GPU job, a failing GPU that stopped moving with its job) does
not leave with a group. Once it has moved with its node's team (*proven*: linked into a group
of the team in ``CONFIRM`` evaluations in a row) it stays in the team for good: a lone GPU is
never split off from the peers that would catch it. A GPU that goes flat keeps its links,
too: its departures all but stop, so its sums of products and of squares decay alike and its
correlations stay near what they were. But a loner never proven, on a node whose team holds a
job that moves together, is *alone* (key ``GPU_ALONE``: no GPU peers): an idle GPU, or a side
job's GPU not yet moving with its partner, beside the main job would otherwise read as a
deviant at each of the job's phase changes. A node whose GPUs all idle stays one team.

A GPU outside the team (alone, or in a group that left) joins a group of the team only when
its mean correlation with the team's GPUs reaches ``LINK``: one pair above it (a side job's
checkpoint that coincides with the main job's, whose recovery moves both for twenty ticks)
would otherwise chain the whole side job into the team. A group that leaves is named by its
lowest GPU entity id (its key). A GPU takes part only once observed for ``MIN_EVIDENCE_S``,
and moves only once ``CONFIRM`` evaluations in a row (every ``EVERY_S``) found its new group;
the same holds for moving back.

GPUs with a workload label are left out: a label always wins (``GpuTeams``). O(GPUs + pairs) a
tick, all arrays; the grouping, every ``EVERY_S``, is a few array passes over all nodes at
once.
"""

from __future__ import annotations

import math

import numpy as np

from ..model import GPU_ALONE, BoolArray, FloatArray, IntArray

LEVEL_HALF_LIFE_S = 300.0  # a GPU's own recent level, which its departures are taken from
SCALE_HALF_LIFE_S = 1800.0  # the usual size of its departures (the clipping's unit)
CLIP = 3.0  # a departure counts at most this many times its usual size
HALF_LIFE_S = 7200.0  # memory of the co-movement sums
LINK = 0.5  # correlation at or above which two GPUs run one job
SEPARATE = 0.25  # mean correlation with its node's others below which a group is apart
# (a group that has left stays apart below LINK)
MIN_EVIDENCE_S = 3600.0  # observed time before a GPU takes part in a grouping
EVERY_S = 300.0  # how often the grouping is evaluated
CONFIRM = 3  # evaluations in a row that must find a GPU's new group before it moves

_PER_GPU = (
    "node", "mean", "scale", "var", "observed_s", "started", "key", "proposed", "streak", "joined"
)  # fmt: skip
_DTYPES = {"node": np.int64, "started": np.bool_, "key": np.int64, "proposed": np.int64}
_DTYPES |= {"streak": np.int64, "joined": np.int64}


class CoMovingGpus:
    """Per GPU entity (ids 0, 1, ... as ``SignalMap`` numbers them) the co-movement state,
    per pair of GPUs of one node the EW sum of products, and per GPU the group it is in.

    ``observe`` each tick; ``take_changes`` returns the GPUs whose group changed since."""

    def __init__(self) -> None:
        self.node: IntArray = np.zeros(0, np.int64)  # per GPU: its node id
        self.mean: FloatArray = np.zeros(0)  # EW level
        self.scale: FloatArray = np.zeros(0)  # EW size of the departures (0: none yet)
        self.var: FloatArray = np.zeros(0)  # EW sum of squared clipped departures
        self.observed_s: FloatArray = np.zeros(0)  # time observed (evidence)
        self.started: BoolArray = np.zeros(0, bool)  # has a level
        self.key: IntArray = np.zeros(0, np.int64)  # applied group: -1 the node's own team
        self.proposed: IntArray = np.zeros(0, np.int64)  # the last evaluations' group
        self.streak: IntArray = np.zeros(0, np.int64)  # evaluations in a row that found it
        # evaluations in a row linked into a group of its team; CONFIRM or more: proven, kept
        self.joined: IntArray = np.zeros(0, np.int64)
        self.pair_i: IntArray = np.zeros(0, np.int64)  # pairs of GPUs of one node, i < j
        self.pair_j: IntArray = np.zeros(0, np.int64)
        self.cov: FloatArray = np.zeros(0)  # per pair: EW sum of products
        self._node_gpus: dict[int, list[int]] = {}
        self._t = -math.inf  # last observed tick
        self._next_eval = -math.inf
        self._changes: list[tuple[int, int]] = []

    @property
    def proven(self) -> BoolArray:
        """Per GPU: linked into a group of its node's team ``CONFIRM`` evaluations in a row
        at some time, so kept in the team for good."""
        return self.joined >= CONFIRM

    def __len__(self) -> int:
        return int(self.node.shape[0])

    def add_gpu(self, entity: int, node_id: int) -> None:
        """GPU entity ``entity`` (the next id) of node ``node_id``."""
        if entity != len(self):
            raise ValueError(f"GPU entity {entity} added out of order (expected {len(self)})")
        for name in _PER_GPU:
            fill = node_id if name == "node" else -1 if name in ("key", "proposed") else 0
            grown = np.append(getattr(self, name), np.array([fill], dtype=_DTYPES.get(name)))
            setattr(self, name, grown)
        others = self._node_gpus.setdefault(node_id, [])
        self.pair_i = np.append(self.pair_i, np.asarray(others, dtype=np.int64))
        self.pair_j = np.append(self.pair_j, np.full(len(others), entity, dtype=np.int64))
        self.cov = np.append(self.cov, np.zeros(len(others)))
        others.append(entity)

    def observe(self, t: float, power: FloatArray) -> None:
        """One tick: ``power[e]``, GPU ``e``'s reading (NaN: not observed, or a GPU whose
        workload a label names)."""
        n = len(self)
        if not n or t <= self._t:
            return
        x = power[:n]
        with np.errstate(invalid="ignore"):
            observed = np.isfinite(x)
        if not observed.any():  # no reading (labelled GPUs, a tick without a DCGM scrape):
            return  # the next tick's decays span this one too, exactly as if it were not
        dt = 0.0 if self._t == -math.inf else t - self._t
        self._t = t
        going = observed & self.started
        departure = np.where(going, x - self.mean, 0.0)
        level_step = -math.expm1(-math.log(2.0) * dt / LEVEL_HALF_LIFE_S)
        self.mean = np.where(
            going, self.mean + level_step * departure, np.where(observed, x, self.mean)
        )
        self.started |= observed
        size = np.abs(departure)
        cap = CLIP * self.scale
        clipped = np.clip(departure, -cap, cap)  # 0 until the GPU has a usual size
        scale_step = -math.expm1(-math.log(2.0) * dt / SCALE_HALF_LIFE_S)
        self.scale = np.where(
            going,
            np.where(
                self.scale > 0.0,
                self.scale + scale_step * (np.minimum(size, cap) - self.scale),
                size,
            ),
            self.scale,
        )
        decay = math.exp(-math.log(2.0) * dt / HALF_LIFE_S)
        self.var = self.var * decay + clipped * clipped
        self.cov = self.cov * decay + clipped[self.pair_i] * clipped[self.pair_j]
        self.observed_s += np.where(going, dt, 0.0)
        if t >= self._next_eval:
            self._next_eval = t + EVERY_S
            self._evaluate()

    def groups(self) -> tuple[IntArray, BoolArray]:
        """Per GPU the group this tick's sums find: -1 for the node's own team, ``GPU_ALONE``,
        else the lowest GPU id of its separate group that leaves the team; and per GPU
        whether it is linked into a group of its team (module docstring)."""
        n = len(self)
        pi, pj = self.pair_i, self.pair_j
        with np.errstate(invalid="ignore", divide="ignore"):
            r = self.cov / np.sqrt(self.var[pi] * self.var[pj])
        ready = self.observed_s >= MIN_EVIDENCE_S
        linked = (r >= LINK) & ready[pi] & ready[pj]
        # a GPU outside the team is linked to the team's GPUs only through its mean with them
        outside = self.key != -1
        crosses = outside[pi] != outside[pj]  # one GPU of the pair in the team, one outside
        outer = np.where(outside[pi], pi, pj)  # a crossing pair's GPU outside the team
        to_team = ready[pi] & ready[pj] & np.isfinite(r) & crosses
        total = np.bincount(outer[to_team], weights=r[to_team], minlength=n)
        with np.errstate(invalid="ignore", divide="ignore"):
            with_team = total / np.bincount(outer[to_team], minlength=n)
        linked &= ~crosses | (with_team[outer] >= LINK)
        li, lj = pi[linked], pj[linked]
        root = np.arange(n)
        while True:  # connected components: each GPU takes the lowest id it is linked to
            low = np.minimum(root[li], root[lj])
            nxt = root.copy()
            np.minimum.at(nxt, li, low)
            np.minimum.at(nxt, lj, low)
            if np.array_equal(nxt, root):
                break
            root = nxt
        size = np.bincount(root, minlength=n)
        grouped = size[root] >= 2
        # a group is separate when it hardly moves with the node's other observed GPUs (a
        # fading common past, a node gone idle, leaves every pair near LINK); one that is
        # apart (has left, or formed of GPUs alone) stays so until it moves with them as a
        # job's GPUs do (hysteresis)
        cross = ready[pi] & ready[pj] & (root[pi] != root[pj]) & np.isfinite(r)
        ends = np.concatenate((root[pi][cross], root[pj][cross]))
        total = np.bincount(ends, weights=np.tile(r[cross], 2), minlength=n)
        count = np.bincount(ends, minlength=n)
        with np.errstate(invalid="ignore", divide="ignore"):
            bar = np.where(outside[root], LINK, SEPARATE)  # is it apart (its root)?
            apart = ~(total / count >= bar)  # no other observed GPU: apart
        separate = grouped & apart[root]
        nodes = int(self.node.max()) + 1
        rest = np.bincount(self.node[ready & ~separate], minlength=nodes)  # the node's team
        roots = np.unique(root[separate])
        # each node's largest separate group (ties: the lowest id) stays if it outnumbers
        # the rest of the node's team
        order = np.lexsort((roots, -size[roots], self.node[roots]))
        first = np.ones(order.shape[0], dtype=bool)
        first[1:] = self.node[roots[order]][1:] != self.node[roots[order]][:-1]
        largest = roots[order][first]
        kept = largest[size[largest] > rest[self.node[largest]]]
        found = np.where(separate & ~np.isin(root, kept), root, -1)
        # loners never proven beside a team that holds a moving job: alone
        joined = ready & grouped & (found == -1)
        moving = np.bincount(self.node[joined], minlength=nodes) > 0
        alone = ready & ~grouped & ~self.proven & moving[self.node]
        return np.where(alone, GPU_ALONE, found), joined

    def _evaluate(self) -> None:
        found, joined = self.groups()
        kept = joined | self.proven  # once proven, for good
        self.joined = np.where(kept, np.minimum(self.joined + 1, CONFIRM), 0)
        same = found == self.proposed
        self.streak = np.where(same, self.streak + 1, 1)
        self.proposed = found
        moving = np.flatnonzero((self.streak >= CONFIRM) & (found != self.key))
        for e in moving.tolist():
            self.key[e] = found[e]
            self._changes.append((e, int(found[e])))

    def take_changes(self) -> list[tuple[int, int]]:
        """(GPU entity, group key) of every GPU whose group changed since the last call, in
        the order they changed (key -1: back to its node's own team; ``GPU_ALONE``: no GPU
        peers)."""
        changes, self._changes = self._changes, []
        return changes

    # -- persistence --------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        state = {name: getattr(self, name).copy() for name in _PER_GPU}
        state |= {
            "pair_i": self.pair_i.copy(),
            "pair_j": self.pair_j.copy(),
            "cov": self.cov.copy(),
        }
        state["clock"] = np.array([self._t, self._next_eval])
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore ``state_dict`` output over the GPUs known now (a restored index numbers
        them as before); every GPU's restored group is reported by the next
        ``take_changes``."""
        n = min(len(self), state["node"].shape[0])
        same_nodes = np.array_equal(state["node"][:n], self.node[:n])
        if not same_nodes:
            raise ValueError("co-moving GPUs: the saved GPUs are not the index's")
        for name in _PER_GPU[1:]:
            if name in state:  # a state saved before a field was added keeps its default
                getattr(self, name)[:n] = state[name][:n]
        where = {
            (int(i), int(j)): k
            for k, (i, j) in enumerate(zip(self.pair_i, self.pair_j, strict=True))
        }
        for i, j, c in zip(
            state["pair_i"].tolist(), state["pair_j"].tolist(), state["cov"].tolist(), strict=True
        ):
            k = where.get((i, j))
            if k is not None:
                self.cov[k] = c
        self._t, self._next_eval = (float(v) for v in state["clock"][:2])
        self._changes = [(e, int(self.key[e])) for e in range(n) if self.key[e] != -1]
