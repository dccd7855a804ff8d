"""Cluster incidents (detector/loop/incidents.py) through the alert policy: whatever moves
cluster-wide until a quiet storm window is one GPUClusterIncident, with labels Alertmanager
can hold on to, its signals and its bottleneck (the loop's StormMeter) in the annotations, and
the same incident after a restart."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from detector.loop import AlertPolicy, ClusterIncident, Notification, StormMeter
from detector.model import Alert, Incident, SeriesInfo

T0 = 1_735_689_600.0  # 2025-01-01 00:00 UTC
WINDOW = 300.0
STEP = 15.0
INCIDENT = "GPUClusterIncident"


def policy(**settings: Any) -> AlertPolicy:
    return AlertPolicy(storm_window_s=WINDOW, resend_interval_s=60.0, **settings)


def moving(t: float, *signals: str) -> list[Incident]:
    return [Incident(t, None, s, 40, 50) for s in signals]


def incident_notes(notes: Sequence[Notification]) -> list[Notification]:
    return [n for n in notes if dict(n.labels)["alertname"] == INCIDENT]


def drive(
    p: AlertPolicy, ticks: Sequence[tuple[float, Sequence[str]]]
) -> tuple[list[Notification], list[ClusterIncident]]:
    """The incident notifications and the closed incidents of ``ticks`` (time, signals)."""
    notes: list[Notification] = []
    closed: list[ClusterIncident] = []
    for t, signals in ticks:
        notes += incident_notes(p.update(t, 50, [], (), moving(t, *signals)))
        closed += p.closed_incidents
    return notes, closed


def test_signals_moving_together_are_one_incident() -> None:
    """NFS latency, then retransmissions, then I/O pressure a minute apart: one alert whose
    labels never change (its id and its first signal), every signal in its annotations."""
    ticks = [(T0, ["nfs_op_rtt"]), (T0 + 60, ["nfs_retrans"]), (T0 + 120, ["psi_io"])]
    notes, closed = drive(policy(), ticks)
    assert [] == closed
    expected = (
        ("alertname", INCIDENT),
        ("incident", "20250101T000000Z"),
        ("severity", "warning"),
        ("signal", "nfs_op_rtt"),
    )
    assert {expected} == {n.labels for n in notes}
    assert [None, None, None] == [n.ends_at for n in notes]
    assert "nfs_op_rtt, nfs_retrans, psi_io" == dict(notes[-1].annotations)["signals"]


def test_a_quiet_storm_window_closes_the_incident() -> None:
    """Nothing moves together for storm.window_s: the alert resolves at that tick with the
    labels it fired with, the incident closes with every signal it had, and the next movement
    opens a new incident under a new id."""
    p = policy()
    notes, _ = drive(p, [(T0, ["nfs_op_rtt"]), (T0 + 60, ["psi_io"])])
    quiet = [(T0 + 60 + k * STEP, []) for k in range(1, 21)]  # up to 300 s after: still open
    _, closed = drive(p, quiet)
    assert [] == closed
    resolved, closed = drive(p, [(T0 + 60 + WINDOW + STEP, [])])
    assert [(notes[0].labels, T0 + 375.0)] == [(n.labels, n.ends_at) for n in resolved]
    (incident,) = closed
    assert ("20250101T000000Z", T0, T0 + 60, ("nfs_op_rtt", "psi_io")) == (
        incident.id,
        incident.start,
        incident.end,
        incident.signals,
    )
    assert None is p.open_incident()
    again, _ = drive(p, [(T0 + 3600, ["nfs_op_rtt"])])
    assert "20250101T010000Z" == dict(again[0].labels)["incident"]


def test_a_restart_keeps_the_open_incident() -> None:
    """The policy's state (as JSON, as the state file keeps it) carries the open incident: the
    restarted policy resends and resolves it under the labels Alertmanager has, and a signal
    moving after the restart joins it."""
    before = policy()
    fired, _ = drive(before, [(T0, ["nfs_op_rtt"])])
    after = policy()
    after.load_state_dict(json.loads(json.dumps(before.state_dict())))
    resent, _ = drive(after, [(T0 + 60, ["psi_io"])])
    resolved, (incident,) = drive(after, [(T0 + 60 + WINDOW + STEP, [])])
    assert [fired[0].labels] * 2 == [resent[0].labels, resolved[0].labels]
    assert (T0, ("nfs_op_rtt", "psi_io")) == (incident.start, incident.signals)


def test_the_storm_breaker_escalates_the_same_incident() -> None:
    """A common-mode incident open when 6 of 20 nodes start alerting at once: the warning
    alert is replaced by a critical one with the same incident id, node alerts are held, and
    it stays one incident."""
    p = policy(storm_fraction=0.2)
    common = [Incident(T0, None, "nfs_op_rtt", 5, 20)]
    warning = incident_notes(p.update(T0, 20, [], (), common))
    storm = [Alert(f"n{i}", "0", T0 + 30, None, 0.9, ("nfs_op_rtt",)) for i in range(6)]
    notes = p.update(T0 + 30, 20, storm, (), ())
    assert [] == [n for n in notes if dict(n.labels)["alertname"] != INCIDENT]
    replaced, critical = incident_notes(notes)
    assert (warning[0].labels, T0 + 30) == (replaced.labels, replaced.ends_at)
    labels = dict(critical.labels)
    assert ("critical", "20250101T000000Z") == (labels["severity"], labels["incident"])
    assert "6 of 20 nodes started alerting together" in dict(critical.annotations)["summary"]
    p.update(T0 + 30 + WINDOW + STEP, 20, storm, (), ())
    (incident,) = p.closed_incidents
    assert ("critical", 6) == (incident.severity, incident.nodes)


MOUNTSTATS = (  # (metric, increase per 15 s tick: quiet, storm)
    ("node_mountstats_nfs_transport_backlog_queue_total", 0.0, 30.0),
    ("node_mountstats_nfs_transport_sends_total", 100.0, 100.0),
    ("node_mountstats_nfs_operations_queue_time_seconds_total", 0.005, 0.2),
    ("node_mountstats_nfs_operations_response_time_seconds_total", 0.03, 0.5),
    ("node_mountstats_nfs_operations_request_time_seconds_total", 0.05, 0.8),
    ("node_mountstats_nfs_operations_requests_total", 50.0, 50.0),
    ("node_mountstats_nfs_write_bytes_total", 1e8, 1e8),
)
LINK = 2.5e10


def test_an_nfs_storm_incident_is_notified_with_its_bottleneck() -> None:
    """Five nodes' mountstats: quiet for 10 min, then the round trip grows from 0.6 to 10 ms
    per operation while NFS latency moves cluster-wide. The incident's notification names
    the server as the bottleneck with the figures, and so does the closed incident."""
    nodes = [f"n{i}" for i in range(5)]
    metrics = [m for m, _, _ in MOUNTSTATS] + ["node_infiniband_rate_bytes_per_second"]
    infos = [
        SeriesInfo(len(metrics) * k + j, m, (("node", node),), node, "")
        for k, node in enumerate(nodes)
        for j, m in enumerate(metrics)
    ]
    meter, p = StormMeter(), policy()
    counters = np.zeros(len(MOUNTSTATS))
    notes: list[Notification] = []
    for k in range(60):
        t = T0 + k * STEP
        storm = 40 <= k < 48
        counters += [storm_step if storm else quiet for _, quiet, storm_step in MOUNTSTATS]
        incidents = [Incident(t, None, "nfs_op_rtt", 5, 5)] if storm else []
        meter.observe(t, np.tile(np.append(counters, LINK), len(nodes)), infos, incidents)
        notes += incident_notes(p.update(t, 5, [], (), incidents, bottleneck=meter))
    firing = [n for n in notes if n.ends_at is None]
    assert {"nfs_server"} == {dict(n.annotations)["bottleneck"] for n in firing}
    description = dict(firing[-1].annotations)["description"]
    assert "round trip 10.0 ms (before 0.6), queued 4.0 ms (before 0.1)" in description
    (incident,) = p.closed_incidents or [p.open_incident(meter)]
    assert "nfs_server" == incident.diagnosis.bottleneck
    assert 10.0 == round(incident.diagnosis.figures["rtt_ms_per_op"], 6)


def test_a_state_from_before_one_incident_per_storm_still_loads() -> None:
    """A policy state with the former per-signal incidents and storm (no 'incident') loads:
    the episodes it tracked are kept and no incident is open."""
    old = policy()
    old.update(T0, 50, [Alert("n1", "0", T0, None, 0.9, ("gpu_temp",))])
    state = old.state_dict()
    del state["incident"]
    state |= {"incidents": {"nfs_op_rtt": {}}, "storm": None}
    restored = policy()
    restored.load_state_dict(state)
    assert None is restored.open_incident()
    assert old.state_dict()["episodes"] == restored.state_dict()["episodes"]
