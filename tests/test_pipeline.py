"""Pipeline.step end to end with the real rules and scorers on a small synthetic cluster:
6 nodes x 4 GPUs, temperature and power gauges with noise, 2 h at 30 s."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from detector.config.load import load_config
from detector.config.rules import load_signal_rules, load_xid_catalog
from detector.loop import TickLoop
from detector.model import Alert, FloatArray, Frame
from detector.pipeline.tick import Pipeline, TickResult
from detector.series.index import SeriesIndex
from detector.series.labels import LabelRules

T0 = 1_700_000_000.0
STEP = 30.0
TICKS = 240  # 2 h
Key = tuple[int, int, str]  # (node, gpu, metric)
METRICS = {
    "temp": "DCGM_FI_DEV_GPU_TEMP",
    "power": "DCGM_FI_DEV_POWER_USAGE",
    "xid": "DCGM_FI_DEV_XID_ERRORS",
}
NFS_RETRANS = "node_nfs_rpc_retransmissions_total"
Plant = Callable[[int, FloatArray, dict[Key, int]], None]


@dataclass
class Cluster:
    """A synthetic cluster feeding a production pipeline, tick by tick."""

    rules: LabelRules = field(default_factory=LabelRules)
    nodes: list[int] = field(default_factory=lambda: list(range(6)))
    gpus: int = 4
    index: SeriesIndex = field(init=False)
    columns: dict[Key, int] = field(default_factory=dict)
    pipeline: Pipeline = field(init=False)

    def __post_init__(self) -> None:
        self.index = SeriesIndex(self.rules)
        for node in self.nodes:
            self.add_node(node)
        self.pipeline = TickLoop.from_config(load_config(None, env={}), self.index)
        self.rng = np.random.default_rng(0)
        self.retransmissions = dict.fromkeys(self.nodes, 0.0)

    def add_node(self, node: int) -> None:
        for gpu in range(self.gpus):
            labels = (("Hostname", f"node{node}"), ("UUID", f"GPU-{node}-{gpu}"), ("gpu", str(gpu)))
            for key, metric in METRICS.items():
                self.columns[(node, gpu, key)] = self.index.add(metric, labels)
        target = (("instance", f"node{node}:9100"),)
        self.columns[(node, -1, "nfs")] = self.index.add(NFS_RETRANS, target)
        if node not in self.nodes:
            self.nodes.append(node)

    def run(
        self, ticks: int = TICKS, plant: Plant | None = None, first: int = 0
    ) -> list[TickResult]:
        out = []
        for k in range(first, first + ticks):
            values = np.full(len(self.index), np.nan)
            for node in self.nodes:
                for gpu in range(self.gpus):
                    values[self.columns[(node, gpu, "temp")]] = 60 + gpu + self.rng.normal(0, 0.5)
                    values[self.columns[(node, gpu, "power")]] = 600 + self.rng.normal(0, 10)
                    values[self.columns[(node, gpu, "xid")]] = 0.0
                self.retransmissions[node] = self.retransmissions.get(node, 0.0) + float(
                    self.rng.poisson(20.0)
                )
                values[self.columns[(node, -1, "nfs")]] = self.retransmissions[node]
            if plant is not None:
                plant(k, values, self.columns)
            out.append(self.pipeline.step(Frame(T0 + STEP * k, values)))
        return out


def started(ticks: list[TickResult]) -> list[Alert]:
    return [alert for tick in ticks for alert in tick.started]


def ramp_gpu_temp(node: int, gpu: int, begin: int, end: int = TICKS) -> Plant:
    """The GPU's temperature climbs 1 C per tick from ``begin`` to ``end``, then recovers
    (thermal runaway against peers that stay flat)."""

    def plant(k: int, values: FloatArray, columns: dict[Key, int]) -> None:
        if begin <= k < end:
            values[columns[(node, gpu, "temp")]] += (k - begin) * 1.0

    return plant


def test_real_rules_load_and_classify_the_cluster_metrics() -> None:
    """The built-in catalogs know the metrics this suite plants and the failure XID 79."""
    signals = load_signal_rules()
    xids = load_xid_catalog()
    names = {s.name for s in signals.signals}
    assert {"gpu_temp", "power_usage"} <= names
    rule = xids.get(79)
    assert rule is not None
    assert rule.failure


def test_quiet_cluster_raises_no_alert() -> None:
    """Two hours of noise only: no alert, no incident, no XID; scores stay below threshold."""
    cluster = Cluster()
    ticks = cluster.run()
    assert [] == started(ticks)
    assert all(not t.incidents and not t.xids for t in ticks)
    threshold = cluster.pipeline.threshold
    assert float(np.nanmax([t.node_score for t in ticks])) < threshold


def test_lone_gpu_temperature_ramp_alerts_on_that_gpu_only() -> None:
    """A GPU heating while its peers stay flat: one alert, on its node, naming that GPU and
    gpu_temp first; it resolves once the temperature is back."""
    ticks = Cluster().run(plant=ramp_gpu_temp(node=2, gpu=1, begin=150, end=210))
    alerts = started(ticks)
    assert [("node2", "1")] == [(a.node, a.gpu) for a in alerts]
    assert "gpu_temp" == alerts[0].signals[0]
    assert T0 + STEP * 150 < alerts[0].start < T0 + STEP * 210
    ended = [a for t in ticks for a in t.ended]
    assert [("node2", alerts[0].start)] == [(a.node, a.start) for a in ended]
    assert ended[0].end is not None
    assert ended[0].end >= T0 + STEP * 210
    assert all(not t.incidents for t in ticks)


def test_gpu_score_is_highest_on_the_heating_gpu() -> None:
    """At the end of the ramp the heating GPU has the top GPU score and its node the top node
    score."""
    last = Cluster().run(plant=ramp_gpu_temp(node=2, gpu=1, begin=150))[-1]
    hottest = int(np.nanargmax(last.scores.gpu_score))
    assert ("node2", "1") == (
        last.node_names[last.scores.gpu_node[hottest]],
        last.scores.gpu_label[hottest],
    )
    assert "node2" == last.node_names[int(np.nanargmax(last.node_score))]


def test_cluster_wide_power_jump_raises_no_node_alert() -> None:
    """Every node's power jumps together (a job phase): not one node alert."""

    def jump(k: int, values: FloatArray, columns: dict[Key, int]) -> None:
        if k >= 160:
            for (_, _, metric), column in columns.items():
                if metric == "power":
                    values[column] += 200.0

    assert [] == started(Cluster().run(plant=jump))


def test_cluster_wide_nfs_retransmission_burst_is_an_incident_not_node_alerts() -> None:
    """Every node's NFS client retransmits together (the server hiccupped): no node alert, the
    signal is reported as a cluster incident over all six nodes, and only during the burst."""

    def burst(k: int, values: FloatArray, columns: dict[Key, int]) -> None:
        if (
            k >= 160
        ):  # +500 retransmissions a tick (usual: 20) for 10 ticks, then back to the usual rate
            for (_, _, metric), column in columns.items():
                if metric == "nfs":
                    values[column] += 500.0 * (min(k, 169) - 159)

    ticks = Cluster().run(plant=burst)
    assert [] == started(ticks)
    incidents = [(t.time, i) for t in ticks for i in t.incidents]
    assert incidents
    assert {("nfs_rpc_retransmissions", 6, 6)} == {
        (i.signal, i.nodes_affected, i.nodes_total) for _, i in incidents
    }
    assert all(T0 + STEP * 160 <= when < T0 + STEP * 200 for when, _ in incidents)


def test_sticky_xid_79_yields_one_event_and_an_alert_naming_it() -> None:
    """The DCGM XID gauge turning 79 (and staying) is one XidEvent on that GPU and an alert on
    its node that names xid_79."""

    def xid(k: int, values: FloatArray, columns: dict[Key, int]) -> None:
        if k >= 200:
            values[columns[(4, 3, "xid")]] = 79.0

    ticks = Cluster().run(plant=xid)
    events = [(t.time, e) for t in ticks for e in t.xids]
    assert 1 == len(events)
    when, event = events[0]
    assert (T0 + STEP * 200, "node4", "3", 79) == (when, event.node, event.gpu, event.xid)
    alerts = started(ticks)
    assert ["node4"] == [a.node for a in alerts]
    assert ("xid_79",) == alerts[0].signals
    assert when <= alerts[0].start
    assert 1.0 == alerts[0].peak_score


def test_silent_node_scores_nan_and_does_not_alert() -> None:
    """A node whose exporter stops has NaN node and GPU scores, not zeros, and no alert."""

    def silence(k: int, values: FloatArray, columns: dict[Key, int]) -> None:
        if k >= 120:
            for (node, _, _), column in columns.items():
                if node == 5:
                    values[column] = np.nan

    ticks = Cluster().run(plant=silence)
    last = ticks[-1]
    assert np.isnan(last.node_score[last.node_names.index("node5")])
    node5 = last.node_names.index("node5")
    assert np.all(np.isnan(last.scores.gpu_score[last.scores.gpu_node == node5]))
    assert np.all(np.isfinite(last.node_score[:node5]))
    assert [] == started(ticks)


def test_node_joining_mid_run_is_scored_and_can_alert() -> None:
    """Series that appear later grow the layout; the new node's heating GPU alerts."""
    cluster = Cluster()
    before = cluster.run(ticks=100)
    cluster.add_node(6)
    after = cluster.run(ticks=160, plant=ramp_gpu_temp(node=6, gpu=0, begin=190), first=100)
    assert 6 == len(before[-1].node_names)
    assert 7 == len(after[-1].node_names)
    assert [("node6", "0")] == [(a.node, a.gpu) for a in started(before + after)]


def test_alert_names_gpu_by_its_label_when_labels_are_uuids() -> None:
    """With UUIDs as the GPU label (non-numeric), the alert still lands on the right node and
    names the heating GPU's UUID."""
    cluster = Cluster(rules=LabelRules(gpu_labels=("uuid",)))
    ticks = cluster.run(plant=ramp_gpu_temp(node=2, gpu=1, begin=150))
    assert [("node2", "GPU-2-1")] == [(a.node, a.gpu) for a in started(ticks)]
    last = ticks[-1]
    owners = {
        label: last.node_names[n]
        for n, label in zip(last.scores.gpu_node, last.scores.gpu_label, strict=True)
    }
    assert all(owner == f"node{label.split('-')[1]}" for label, owner in owners.items())


def test_open_alerts_lists_firing_alerts_with_their_evidence() -> None:
    """A still-firing alert is reported by open_alerts with no end."""
    cluster = Cluster()
    cluster.run(plant=ramp_gpu_temp(node=3, gpu=2, begin=150))
    (alert,) = cluster.pipeline.open_alerts()
    assert ("node3", "2", None) == (alert.node, alert.gpu, alert.end)
    assert alert.peak_score >= cluster.pipeline.threshold
