"""The diagnosis through ``detector replay``'s engine on a small simulated cluster (the Scenario
API): one failure of each kind the simulator plants, each diagnosed when its first alert
starts, and the report JSON carrying the diagnosis.

The simulator's power fault (a failing PSU: capped, jittery power and throttled clocks on every
GPU of the node) ends with XID 79, as real ones often do: the diagnosis names what the
precursors show (thermal_power), the XID's class is pcie_bus, so that failure sits off the
diagonal by design. Every other kind ends with an XID of its own class and is on it.
"""

from __future__ import annotations

import math

import pytest

from detector.config import load_config
from detector.loop import TickLoop
from detector.replay import (
    ReplayResult,
    alert_diagnoses,
    diagnosis_confusion,
    learn_diagnosis,
    render_html,
    report_document,
    run_replay,
    simulated_frames,
)
from detector.series import SeriesIndex
from detector.sim import FailureSpec, Scenario, SimulatedCluster

HOUR = 3600.0
PLANTED = (
    FailureSpec("ecc", node=0, gpu=1, at_s=3 * HOUR, lead_s=1800.0, xid=95),
    FailureSpec("pcie", node=1, gpu=2, at_s=4 * HOUR, lead_s=1800.0, xid=79),
    FailureSpec("nvlink", node=2, gpu=3, at_s=5 * HOUR, lead_s=1800.0, xid=149),
    FailureSpec("row_remap", node=3, gpu=4, at_s=6 * HOUR, lead_s=1800.0, xid=64),
    FailureSpec("gsp", node=4, gpu=5, at_s=7 * HOUR, lead_s=0.0, xid=119),
    FailureSpec("power", node=5, gpu=6, at_s=8 * HOUR, lead_s=1800.0, xid=79),
)


@pytest.fixture(scope="module")
def replayed() -> ReplayResult:
    scenario = Scenario(
        nodes=6,
        gpus=8,
        days=0.45,
        seed=3,
        dcgm_fields="all",
        failures=PLANTED,
        xid45_on_teardown=False,
    )
    cluster = SimulatedCluster(scenario)
    index = SeriesIndex()
    loop = TickLoop.from_config(load_config(None, env={}), index)
    frames = simulated_frames(cluster, index)
    return run_replay(loop, frames, events=cluster.events())


def test_each_failure_kind_is_diagnosed_at_its_first_alert(replayed: ReplayResult) -> None:
    """(XID, XID class, diagnosed class, basis) per failure, in time order: every kind on the
    diagonal but the power fault, which the precursors call thermal_power (module doc)."""
    confusion = diagnosis_confusion(replayed)
    assert confusion is not None
    expected = [
        (48, "memory_ecc", "memory_ecc", "signals"),
        (95, "memory_ecc", "memory_ecc", "signals"),
        (79, "pcie_bus", "pcie_bus", "signals"),
        (149, "nvlink", "nvlink", "signals"),
        (64, "memory_ecc", "memory_ecc", "signals"),
        (119, "gsp_driver", "gsp_driver", "xid"),
        (120, "gsp_driver", "gsp_driver", "xid"),  # the GSP error after the timeout (seeded)
        (79, "pcie_bus", "thermal_power", "signals"),
    ]
    assert expected == [(r.xid, r.actual, r.predicted, r.basis) for r in confusion.rows]


def test_the_report_json_carries_a_diagnosis_per_alert(replayed: ReplayResult) -> None:
    """Each alert gains failure_class, action and confidence; the contract keys stay as they
    were; the top-level 'diagnosis' holds the confusion table."""
    document = report_document(replayed)
    contract = replayed.evaluation.to_json()
    assert set(contract) | {"diagnosis"} == set(document)
    for before, after in zip(contract["alerts"], document["alerts"], strict=True):
        assert before == {k: v for k, v in after.items() if k in before}
        assert {"failure_class", "action", "confidence"} == set(after) - set(before)
    pcie = next(a for a in document["alerts"] if a["node"] == "node-02")
    assert ("pcie_bus", "REBOOT") == (pcie["failure_class"], pcie["action"])
    assert (6, 5) == (
        document["diagnosis"]["from_signals"],
        document["diagnosis"]["correct_from_signals"],
    )


def test_calibrate_learns_the_classes_the_failures_had(replayed: ReplayResult) -> None:
    """What calibrate stores: one example per precursor alert and class of the XIDs behind it
    (the ECC fault's 48 and 95 are one), with the signals that led it (the power fault's under
    pcie_bus, the class of its XID)."""
    assert replayed.diagnosis_model is not None
    learned = learn_diagnosis(replayed, replayed.diagnosis_model)
    assert {"memory_ecc": 2, "nvlink": 1, "pcie_bus": 2} == learned.failures
    assert "pcie_replay" in learned.signals["pcie_bus"]
    # five failures with precursors, one of them (the power fault) misleading: a temperature
    # is fitted, and it tempers the evidence rather than sharpening it
    assert learned.temperature < 1.0


def test_the_html_report_shows_the_confusion_table_and_each_alerts_class(
    replayed: ReplayResult,
) -> None:
    """The diagnosis section: the table's diagonal count and one row per alert with its class
    and action; the failures table names the first alert's diagnosis."""
    confusion = diagnosis_confusion(replayed)
    diagnoses = alert_diagnoses(replayed)
    assert len(replayed.alerts) == len(diagnoses)
    html = render_html(
        replayed, threshold=0.6, label="small", confusion=confusion, diagnoses=diagnoses
    )
    section = html[html.index("<section id=diagnosis>") :]
    assert "7 of 8 on the diagonal; from precursor signals 5 of 6" in section
    alerts = section[section.index("<table class=alerts>") :]
    assert len(replayed.alerts) == alerts.count("<tr>") - 1  # the header row
    assert "<td>pcie_bus</td><td>REBOOT</td>" in alerts
    failures = html[html.index("<section id=failures>") : html.index("<section id=timelines>")]
    assert "first alert's diagnosis" in failures
    assert "<td>before</td>" not in failures  # the detection column keeps its own cell
    before = replayed.evaluation.summary.detected_before_failure
    assert before == failures.count("<span class=early>before</span>")


def test_every_cluster_incident_gets_a_bottleneck(replayed: ReplayResult) -> None:
    """The loop's cluster incidents are the report's: one storm row per incident counted, in
    the report JSON too, apart by more than the storm window; those on which an NFS signal
    moved cluster-wide carry the NFS figures their bottleneck was named from."""
    rows = report_document(replayed)["diagnosis"]["storms"]
    assert len(rows) == replayed.incidents
    assert [s.diagnosis.bottleneck for s in replayed.storms] == [r["bottleneck"] for r in rows]
    gaps = [b.start - a.end for a, b in zip(replayed.storms, replayed.storms[1:], strict=False)]
    assert [] == [g for g in gaps if g <= 300.0]  # alerts.storm.window_s
    nfs = [s for s in replayed.storms if any(x.startswith("nfs_") for x in s.signals)]
    assert nfs
    assert all(math.isfinite(s.diagnosis.figures["rtt_ms_per_op"]) for s in nfs)


def test_each_incident_is_notified_once_with_its_bottleneck(replayed: ReplayResult) -> None:
    """Every GPUClusterIncident notification names one of the report's incidents by its
    ``incident`` label, keeps one set of labels per incident, and carries a bottleneck; the
    incidents that closed were resolved at their end plus the storm window or later."""
    firing: dict[str, set[tuple[tuple[str, str], ...]]] = {}
    bottlenecks: dict[str, str] = {}
    for note in replayed.notifications:
        labels = dict(note.labels)
        if labels["alertname"] != "GPUClusterIncident" or note.ends_at is not None:
            continue
        firing.setdefault(labels["incident"], set()).add(note.labels)
        bottlenecks[labels["incident"]] = dict(note.annotations)["bottleneck"]
    assert [s.id for s in replayed.storms if s.notified] == sorted(firing)
    assert all(1 == len(labels) for labels in firing.values())
    named = {s.id: s.diagnosis.bottleneck for s in replayed.storms if s.notified}
    named = {i: b for i, b in named.items() if b != "unknown"}
    assert named
    assert named == {i: bottlenecks[i] for i in named}


def test_the_html_report_counts_the_incidents_its_storm_table_lists(
    replayed: ReplayResult,
) -> None:
    """The summary's 'cluster incidents' and the rows of the incident table are one number."""
    html = render_html(
        replayed,
        threshold=0.6,
        label="small",
        confusion=diagnosis_confusion(replayed),
        diagnoses=alert_diagnoses(replayed),
        storms=replayed.storms,
    )
    table = html[html.index("<table class=storms>") :]
    table = table[: table.index("</table>")]
    assert replayed.incidents == table.count("<tr>") - 1  # the header row
    assert f"<td>{replayed.incidents}</td>" in html[: html.index("id=incidents")]
