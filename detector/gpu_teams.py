"""GPU teams: which GPUs of a node are each other's peers (scorers/peers.py).

A GPU's team is its workload, the first of ``labels.gpu_workload_labels`` its series carry
(``series.workload_of``: dcgm-exporter's Slurm job or Kubernetes pod mapping); GPUs with none
are one team, 0. So a node shared by several jobs compares each GPU only with the GPUs of its
own job. ``SignalMap`` (signals.py) asks here for a GPU's team when it maps the GPU and when
the index reports a new workload on one of its series, and moves the GPU's columns.

Also kept here, for what replay and the daemon tell the user: the nodes whose GPUs ran more
than one workload at once (``split_nodes``), the most workloads the cluster's GPUs ran at once
and the labels that named them (``cohort_advice``: with no cohort labels, nodes of different
jobs are judged against each other).
"""

from __future__ import annotations

from .model import SeriesInfo
from .series import LabelRules, workload_of


class GpuTeams:
    """Per GPU entity its team id; per node its GPU entities."""

    def __init__(self, rules: LabelRules) -> None:
        self.rules = rules
        self._ids: dict[str, int] = {"": 0}  # workload -> team id ("": none)
        self.of: dict[int, int] = {}  # entity id -> team id
        self._node_entities: dict[int, list[int]] = {}  # node id -> its GPU entity ids
        self.split_nodes: set[str] = set()  # nodes seen with GPUs in two workloads at once
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
        self.of[entity] = self.team_of(info)
        self._node_entities.setdefault(node_id, []).append(entity)
        self.note_split(node_id, info.node)

    def move(self, entity: int, info: SeriesInfo) -> int | None:
        """The GPU's team as ``info`` (one of its series, relabelled) names it: its new team
        id, or None when that is its team already."""
        team = self.team_of(info)
        if team == self.of[entity]:
            return None
        self.of[entity] = team
        return team

    def note_split(self, node_id: int, node: str) -> None:
        """Note ``node`` in ``split_nodes`` when its GPUs now run more than one workload.
        Called for every new GPU and after every change of a GPU's team (once a node's GPUs
        have all moved: GPUs moving together are not split), so ``recount`` counts again."""
        self._changed = True
        entities = self._node_entities.get(node_id, ())
        if len({self.of[e] for e in entities}) > 1:
            self.split_nodes.add(node)

    def recount(self) -> None:
        """Update ``workloads_at_once`` after teams changed."""
        if self._changed:
            running = len(set(self.of.values()) - {0})
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
