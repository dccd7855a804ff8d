"""Which cohort each node belongs to: the nodes a node's peers are (scorers/peers.py).

A node's cohort is the value of the first of ``labels.cohort_labels`` (in that order) that any
of the series it sent carries, identity or context label; for ``pod``, its GPUs' pods' owner
(``series.group_value``). Nodes none of whose series carries one form one cohort, "". Once some
node has GPUs, a node without any GPU series (a CPU-only host whose node-exporter is in the
data, e.g. a whole Prometheus export) is compared only with other such nodes: its work is not
the GPU nodes' and would skew their peer medians.

Cohorts are learnt from each series' first observation, not from the index, which may hold
every series of a dump from the start. A series that brings a better-ranked label (a target
that answered later), or a new value of the same label (the scheduler relabelled the node's
targets for its next job: its series come back as new ones), moves the node to that cohort.
``SignalMap`` (signals.py) asks here and moves the node's columns.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..model import SeriesInfo
from ..series import LabelRules, group_value


class NodeCohorts:
    """Per node its cohort (label rank and value), and the cohorts' names and ids."""

    def __init__(self, rules: LabelRules) -> None:
        self.rules = rules
        self.labels = rules.cohort_labels  # in order of preference
        self.names: list[str] = []  # cohort id -> name
        self._ids: dict[str, int] = {}
        self._node_cohort: dict[str, tuple[int, str]] = {}  # node -> (label rank, cohort)
        self._gpu_nodes: set[str] = set()  # nodes with a GPU series
        # (node, label rank, value) -> the index columns of the series carrying that value
        self._carriers: dict[tuple[str, int, str], list[int]] = {}

    def id_of(self, node: str) -> int:
        """The node's cohort id as it is now (new cohorts get the next id)."""
        label = self._node_cohort.get(node, (0, ""))[1]
        if self._gpu_nodes and node not in self._gpu_nodes:
            label = f"{label} (no GPU)" if label else "(no GPU)"
        found = self._ids.get(label)
        if found is None:
            found = self._ids[label] = len(self.names)
            self.names.append(label)
        return found

    def add_gpu_node(self, node: str) -> bool | None:
        """Note that ``node`` sent a GPU series: None when it had already, else whether it is
        the first GPU node (which moves every node known: the rest are now "no GPU")."""
        if node in self._gpu_nodes:
            return None
        first = not self._gpu_nodes
        self._gpu_nodes.add(node)
        return first

    def note_series(self, info: SeriesInfo) -> None:
        """Record which cohort label values ``info`` (a series just mapped) carries, for
        ``carrying``."""
        if not self.labels or not info.node:
            return
        labels = dict((*info.labels, *info.context))
        for rank, name in enumerate(self.labels):
            if value := self.value(info, name, labels):
                self._carriers.setdefault((info.node, rank, value), []).append(info.column)

    def carrying(self, node: str) -> list[int]:
        """The index columns of the series that carry the node's present cohort label value
        (empty while it has none)."""
        current = self._node_cohort.get(node)
        return self._carriers.get((node, *current), []) if current else []

    def learn(self, infos: Iterable[SeriesInfo]) -> set[str]:
        """Learn from ``infos`` (series in the order their values were first sent, or sent
        again under new labels); returns the nodes whose cohort changed."""
        moved: set[str] = set()
        if not self.labels:
            return moved
        rank = {name: r for r, name in enumerate(self.labels)}
        for info in infos:
            if not info.node:
                continue
            best = self._node_cohort.get(info.node, (len(rank), ""))
            labels = dict((*info.labels, *info.context))
            for key in labels:
                r = rank.get(key)
                if r is None:
                    continue
                value = self.value(info, key, labels)
                if value and (r, value) != best and r <= best[0]:
                    best = (r, value)
                    moved.add(info.node)
            self._node_cohort[info.node] = best
        return moved

    def value(self, info: SeriesInfo, name: str, labels: Mapping[str, str]) -> str:
        """The cohort that label ``name`` of series ``info`` (its ``labels``) names: a pod's
        owner (``series.group_value``), read from GPU series only, whose pod is the GPU's
        workload; on any other series ``pod`` is its exporter's own pod (Prometheus'
        Kubernetes discovery labels every target with it), which says nothing of the node's
        job."""
        if name == "pod" and not info.gpu:
            return ""
        return group_value(name, labels, self.rules)
