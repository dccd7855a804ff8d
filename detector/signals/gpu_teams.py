"""GPU teams: which GPUs of a node are each other's peers (scorers/peers.py).

A GPU's team is its workload, the first of ``labels.gpu_workload_labels`` its series carry
(``series.workload_of``: dcgm-exporter's Slurm job or Kubernetes pod mapping); GPUs with none
are one team, 0, unless their power tells their jobs apart (gpu_comovement.py: ``infer``), or
shows a GPU moving with none of its node's job (alone: a team of its own, so no GPU peers). So
a node shared by several jobs compares each GPU only with the GPUs of its own job. Such a team
is split further by activity (gpu_activity.py: ``rest``): its GPUs at rest are peers of each
other only, not of its working ones. A label always wins over what co-movement and activity
infer. ``SignalMap`` (signals.py) asks here for a GPU's team when it maps the GPU, when the
index reports a new workload on one of its series and when co-movement or activity moves it,
and moves the GPU's columns.

Also kept here, for what replay and the daemon tell the user: the nodes whose GPUs ran more
than one workload at once (``split_nodes``; ``inferred_split_nodes`` where co-movement, not a
label, told them apart; ``alone_nodes`` where it judged a GPU alone), the most workloads the
cluster's GPUs ran at once
and the labels that named them (``cohort_advice``: with no cohort labels, nodes of different
jobs are judged against each other).
"""

from __future__ import annotations

import numpy as np

from ..model import GPU_ALONE, SeriesInfo
from ..series import LabelRules, workload_of


class GpuTeams:
    """Per GPU entity its team id; per node its GPU entities."""

    def __init__(self, rules: LabelRules) -> None:
        self.rules = rules
        self._ids: dict[str, int] = {"": 0}  # workload -> team id ("": none)
        self.of: dict[int, int] = {}  # entity id -> team id
        self.labelled: dict[int, int] = {}  # entity id -> its workload label's team id (0: none)
        self._inferred: dict[int, int] = {}  # entity id -> team inferred from co-movement
        self._alone: set[int] = set()  # entity ids co-movement judged alone (label or not)
        # entity id -> its activity side where it is not the plain working one ("at rest", or
        # "crew K": working in the start of GPU K beside others already at work)
        self._side: dict[int, str] = {}
        self._labelled_mask: np.ndarray | None = None  # cache of ``labelled_mask``
        self._node_entities: dict[int, list[int]] = {}  # node id -> its GPU entity ids
        self.split_nodes: set[str] = set()  # nodes seen with GPUs in two workloads at once
        self.inferred_split_nodes: set[str] = set()  # the same, told apart by co-movement
        self.alone_nodes: set[str] = set()  # nodes with a GPU co-movement judged alone
        self.workloads_at_once = 0
        self.workload_labels_seen: set[str] = set()
        self._changed = False  # since the last ``recount``

    def team_of(self, info: SeriesInfo) -> int:
        """The team id of the workload ``info`` (a GPU's series) names."""
        label, name = workload_of(info, self.rules)
        if label:
            self.workload_labels_seen.add(label)
        return self._ids.setdefault(name, len(self._ids))

    def add_gpu(self, entity: int, node_id: int, info: SeriesInfo) -> None:
        """A new GPU entity of node ``node_id`` (``info.node``), first seen in ``info``."""
        self.of[entity] = self.labelled[entity] = self.team_of(info)
        self._labelled_mask = None
        self._node_entities.setdefault(node_id, []).append(entity)
        self.note_split(node_id, info.node)

    def move(self, entity: int, info: SeriesInfo) -> int | None:
        """The GPU's team as ``info`` (one of its series, relabelled) names it: its new team
        id, or None when that is its team already. With no workload label, the GPU's team is
        the one co-movement inferred for it, if any."""
        label = self.labelled[entity] = self.team_of(info)
        self._labelled_mask = None
        return self._set(entity, label or self._unlabelled(entity))

    def infer(self, entity: int, key: int) -> int | None:
        """The GPU's group as co-movement found it (gpu_comovement.py: -1 its node's own
        team, ``GPU_ALONE`` a team of its own, else the group's key): its new team id, or None
        when its team stays (a GPU with a workload label keeps the label's)."""
        if key == GPU_ALONE:
            self._alone.add(entity)
        else:
            self._alone.discard(entity)
        if key == -1:
            self._inferred.pop(entity, None)
        else:
            name = f"\0alone GPU {entity}" if key == GPU_ALONE else f"\0co-moving GPUs {key}"
            self._inferred[entity] = self._ids.setdefault(name, len(self._ids))
        if self.labelled[entity]:
            return None
        return self._set(entity, self._unlabelled(entity))

    def rest(self, entity: int, resting: bool, crew: int = -1) -> int | None:
        """The GPU's side as activity found it (gpu_activity.py: at rest, or working in the
        crew of GPU ``crew``, or on the plain working side for -1): its new team id, or None
        when its team stays (a GPU with a workload label keeps the label's)."""
        side = "at rest" if resting else f"crew {crew}" if crew >= 0 else ""
        if side:
            self._side[entity] = side
        else:
            self._side.pop(entity, None)
        if self.labelled[entity]:
            return None
        return self._set(entity, self._unlabelled(entity))

    def _unlabelled(self, entity: int) -> int:
        """The team of a GPU no workload label names: what co-movement inferred (0: its
        node's own team), split by its activity side; a GPU judged alone stays so."""
        team = self._inferred.get(entity, 0)
        side = self._side.get(entity)
        if side is None or entity in self._alone:
            return team
        return self._ids.setdefault(f"\0{side} {team}", len(self._ids))

    def _set(self, entity: int, team: int) -> int | None:
        if team == self.of[entity]:
            return None
        self.of[entity] = team
        return team

    def labelled_mask(self, n: int) -> np.ndarray:
        """Per GPU entity ``0..n-1``: whether a workload label names its team."""
        mask = self._labelled_mask
        if mask is None or mask.shape[0] != n:
            mask = np.zeros(n, dtype=bool)
            for entity, team in self.labelled.items():
                if entity < n:
                    mask[entity] = team != 0
            self._labelled_mask = mask
        return mask

    def note_split(self, node_id: int, node: str) -> None:
        """Note ``node`` in ``split_nodes`` when its GPUs now run more than one workload.
        Called for every new GPU and after every change of a GPU's team (once a node's GPUs
        have all moved: GPUs moving together are not split), so ``recount`` counts again."""
        self._changed = True
        entities = self._node_entities.get(node_id, ())
        alone = {e for e in entities if e in self._alone and not self.labelled[e]}
        if alone:
            self.alone_nodes.add(node)
        if len({self.labelled[e] for e in entities}) > 1:
            self.split_nodes.add(node)
        elif len({self._co_moving(e) for e in entities if e not in alone}) > 1:
            self.inferred_split_nodes.add(node)

    def _co_moving(self, entity: int) -> int:
        """The GPU's team as labels and co-movement alone name it (not its side at rest or
        working: a node whose job leaves GPUs idle is not split by it)."""
        return self.labelled[entity] or self._inferred.get(entity, 0)

    def recount(self) -> None:
        """Update ``workloads_at_once`` after teams changed."""
        if self._changed:
            running = len(set(self.labelled.values()) - {0})
            self.workloads_at_once = max(self.workloads_at_once, running)
            self._changed = False

    def cohort_advice(self) -> str:
        """What to configure when the GPUs ran several jobs at once and every node was still
        judged against all nodes (no cohort labels); "" otherwise (replay and daemon say it)."""
        rules = self.rules
        jobs = self.workloads_at_once
        if rules.cohort_labels or jobs < 2:  # the daemon asks every tick: cheap checks first
            return ""
        named = [n for n in rules.workload_labels if n in self.workload_labels_seen]
        if not named:
            return ""
        return (
            f"node cohorts: the GPUs ran up to {jobs} jobs at once ({', '.join(named)}), yet "
            f"every node was judged against all nodes; labels.cohort_labels: [{named[0]}] "
            "judges each node against its own job's nodes only (docs/deploy.md)"
        )
