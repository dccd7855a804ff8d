"""The daemon's /metrics: latest state only, bounded cardinality, promtool-valid."""

from __future__ import annotations

import subprocess
from dataclasses import replace

import numpy as np
import pytest
from e2e.procs import require_tool
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from detector.alerting.sender import AlertStats, DeliveryStats
from detector.diagnosis import Diagnosis, Evidence, storm_bottleneck
from detector.evaluation import RecoveryFigures, concentration, repeat_offenders
from detector.evaluation.accounting import AccountingSnapshot
from detector.loop import ClusterIncident, LoopTick
from detector.model import Alert, XidEvent
from detector.pipeline.tick import TickResult
from detector.service.entity_stats import NodeScoreStats
from detector.service.export import Exporter, SignalScore

T0 = 1_700_000_000.0
MEMORY_ECC = Diagnosis("memory_ecc", 0.87, "RESET_GPU", Evidence())
PROMTOOL = "/usr/bin/promtool"


def tick(t: float, scores: list[float], gpu_scores: list[float] | None = None) -> LoopTick:
    n = len(scores)
    gpus = gpu_scores or []
    xids = (XidEvent(t, "n0", "1", 79), XidEvent(t, "n0", "1", 13))
    scored = TickResult(
        time=t,
        node_names=tuple(f"n{i}" for i in range(n)),
        node_score=np.array(scores, dtype=float),
        gpu_node=np.zeros(len(gpus), dtype=np.int64),
        gpu_label=tuple(str(g) for g in range(len(gpus))),
        gpu_score=np.array(gpus, dtype=float),
        xids=xids,
        incidents=(),
    )
    alert = Alert("n0", "1", t, None, 0.9, ("xid_79",))
    return LoopTick(
        scores=scored,
        started=(alert,),
        ended=(),
        ended_sent=(),
        notifications=(),
        notified=(alert,),
        xids=xids,
        new_failures=(),
        detections=(),
    )


def samples(exporter: Exporter) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    body, _ = exporter.render()
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def full_exporter() -> Exporter:
    """An exporter with every kind of state filled in."""
    exp = Exporter(CollectorRegistry(), version="1.2.3", top_k=2)
    exp.observe_tick(tick(T0, [0.2, 0.9, np.nan], gpu_scores=[0.95, np.nan]), duration_s=0.03)
    exp.observe_series(3000, 7, dropped=270)
    exp.observe_signals(
        [
            SignalScore("n0", "1", "gpu_temp", 9.0),
            SignalScore("n0", None, "nfs_latency", 4.0),
            SignalScore("n0", "0", "ecc_sbe", 1.0),
            SignalScore("n1", "2", "power", 3.0),
        ]
    )
    exp.observe_scrapes(
        {"http://n0:9400/metrics": (0.12, None), "http://n1:9400/metrics": (5.0, "timeout")}
    )
    exp.set_alert_stats(
        AlertStats(
            alertmanagers={"http://am:9093": DeliveryStats(5, 2, 1, 0, 3)},
            suppressed={"storm": 4},
            firing={"critical": 1, "warning": 2},
            shadow=False,
        )
    )
    exp.set_accounting(
        AccountingSnapshot(
            alerts=6,
            true_positives=3,
            false_positives=3,
            failures=4,
            detected_before=2,
            detected_after=1,
            missed=1,
            fp_per_day=1.5,
            lead_times_s=[-60.0, 1200.0, 4000.0],
        )
    )
    exp.set_alert_diagnoses([(Alert("n0", "1", T0, None, 0.9, ("ecc_sbe_volatile",)), MEMORY_ECC)])
    failures = [XidEvent(T0, "n0", "1", 79, end=T0 + 60), XidEvent(T0 + 7200, "n0", "1", 48)]
    exp.set_recovery(
        RecoveryFigures(
            (concentration("failures", {"n0": 2}, 3),), tuple(repeat_offenders(failures, []))
        )
    )
    exp.node_stats = NodeScoreStats()
    for i in range(50):
        exp.node_stats.update(("n0", "n1"), np.array([0.2 + 0.01 * (i % 5), 0.9]))
    return exp


def test_scores_of_nodes_and_gpus_with_data_are_exported() -> None:
    """Each node and GPU with a score has a series; NaN (no data) has none."""
    got = samples(full_exporter())
    assert 0.2 == got[("detector_node_score", (("node", "n0"),))]
    assert 0.9 == got[("detector_node_score", (("node", "n1"),))]
    assert ("detector_node_score", (("node", "n2"),)) not in got
    assert 0.95 == got[("detector_gpu_score", (("gpu", "0"), ("node", "n0")))]
    assert ("detector_gpu_score", (("gpu", "1"), ("node", "n0"))) not in got
    assert T0 == got[("detector_last_tick_timestamp_seconds", ())]


def test_vanished_node_leaves_no_series() -> None:
    """A node present in one tick and silent (NaN) in the next disappears from /metrics."""
    exp = Exporter(CollectorRegistry(), version="x")
    exp.observe_tick(tick(T0, [0.5, 0.5]), 0.01)
    assert ("detector_node_score", (("node", "n1"),)) in samples(exp)
    exp.observe_tick(tick(T0 + 15, [0.5, np.nan]), 0.01)
    got = samples(exp)
    assert [(("node", "n0"),)] == [k[1] for k in got if k[0] == "detector_node_score"]


def test_signal_scores_are_limited_to_top_k_per_node() -> None:
    """Only the top_k strongest signals per node are exported."""
    got = samples(full_exporter())
    signals = sorted(k[1] for k in got if k[0] == "detector_signal_score")
    assert [
        (("gpu", ""), ("node", "n0"), ("signal", "nfs_latency")),
        (("gpu", "1"), ("node", "n0"), ("signal", "gpu_temp")),
        (("gpu", "2"), ("node", "n1"), ("signal", "power")),
    ] == signals


def test_counters_and_delivery_and_accounting_are_exported() -> None:
    """Alerts, XIDs, scrape errors, Alertmanager delivery and accounting all appear."""
    got = samples(full_exporter())
    assert 1 == got[("detector_alerts_total", ())]
    assert 1 == got[("detector_xid_events_total", (("xid", "79"),))]
    assert 1 == got[("detector_xid_events_total", (("xid", "13"),))]
    target = "http://n1:9400/metrics"
    assert 1 == got[("detector_scrape_errors_total", (("reason", "timeout"), ("target", target)))]
    assert 5.0 == got[("detector_scrape_duration_seconds", (("target", target),))]
    am = (("alertmanager", "http://am:9093"),)
    assert (5, 2, 1, 0, 3) == tuple(
        got[(f"detector_alertmanager_{k}", am)]
        for k in (
            "sent_alerts_total",
            "failed_requests_total",
            "retried_requests_total",
            "dropped_alerts_total",
            "queued",
        )
    )
    assert 4 == got[("detector_alerts_suppressed_total", (("reason", "storm"),))]
    assert 2 == got[("detector_alerts_firing", (("severity", "warning"),))]
    assert 2 == got[("detector_failures_detected_total", (("when", "before"),))]
    assert 1 == got[("detector_failures_missed_total", ())]
    assert 3 == got[("detector_false_positives_total", ())]
    assert 1.5 == got[("detector_false_positives_per_day", ())]
    assert 1 == got[("detector_build_info", (("version", "1.2.3"),))]
    series = tuple(
        got[(f"detector_series{k}", ())] for k in ("", "_refused_total", "_dropped_total")
    )
    assert (3000, 7, 270) == series


def test_lead_time_histogram_buckets_in_seconds() -> None:
    """Lead times land in cumulative buckets from le=0 (after the XID) to 2 h and +Inf."""
    got = samples(full_exporter())

    def bucket(le: str) -> float:
        return got[("detector_lead_time_seconds_bucket", (("le", le),))]

    assert (1, 1, 2, 2, 3, 3) == (
        bucket("0.0"),
        bucket("900.0"),
        bucket("1800.0"),
        bucket("3600.0"),
        bucket("5400.0"),
        bucket("+Inf"),
    )
    assert 3 == got[("detector_lead_time_seconds_count", ())]
    assert 5140.0 == got[("detector_lead_time_seconds_sum", ())]


def test_scrape_durations_follow_the_latest_targets_and_errors_accumulate() -> None:
    """A target no longer scraped loses its duration series; error counters keep counting."""
    exp = Exporter(CollectorRegistry(), version="x")
    exp.observe_scrapes({"a": (0.1, "timeout"), "b": (0.2, None)})
    exp.observe_scrapes({"a": (0.3, "timeout")})
    got = samples(exp)
    assert {"a": 0.3} == {
        dict(k[1])["target"]: v
        for k, v in got.items()
        if k[0] == "detector_scrape_duration_seconds"
    }
    assert 2 == got[("detector_scrape_errors_total", (("reason", "timeout"), ("target", "a")))]


def test_registry_is_injected_not_global() -> None:
    """The exporter registers on its own registry; the global one stays untouched."""
    before = set(REGISTRY._names_to_collectors)
    exp = Exporter(version="x")
    assert before == set(REGISTRY._names_to_collectors)
    assert ("detector_build_info", (("version", "x"),)) in samples(exp)


def test_openmetrics_is_served_when_asked() -> None:
    """An OpenMetrics Accept header gets the OpenMetrics format, ending in # EOF."""
    body, content_type = full_exporter().render("application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    assert body.endswith(b"# EOF\n")
    _, plain = full_exporter().render(None)
    assert plain.startswith("text/plain; version=0.0.4")


@pytest.mark.tools
def test_metrics_pass_promtool_check_metrics() -> None:
    """promtool's linter accepts the exposition (names, units, _total, HELP)."""
    promtool = require_tool(PROMTOOL)
    body, _ = full_exporter().render()
    done = subprocess.run(
        [promtool, "check", "metrics"], input=body, capture_output=True, timeout=120, check=False
    )
    assert (0, b"", b"") == (done.returncode, done.stdout, done.stderr)


def test_node_score_statistics_are_exported_per_node() -> None:
    """Each node seen gets its score quantiles and its count of lasting rises; a node whose
    score has no estimate yet exports no quantile."""
    exp = Exporter(CollectorRegistry(), version="x")
    stats = NodeScoreStats()
    exp.node_stats = stats
    assert not [k for k in samples(exp) if k[0].startswith("detector_node_score_")]
    for i in range(200):
        stats.update(("n1", "n2"), np.array([0.01 * (i % 10), np.nan if i else 0.5]))
    got = samples(exp)
    name = "detector_node_score_distribution"
    assert 0.0 <= got[(name, (("node", "n1"), ("quantile", "0.5")))]
    assert got[(name, (("node", "n1"), ("quantile", "0.99")))] <= 0.09
    assert 200 == got[(name + "_count", (("node", "n1"),))]
    assert 1 == got[(name + "_count", (("node", "n2"),))]
    assert 0 == got[("detector_node_score_rises_total", (("node", "n1"),))]
    assert ("detector_node_score_rises_total", (("node", "n2"),)) in got


def test_the_open_cluster_incident_and_its_bottleneck_are_exported() -> None:
    """While a cluster incident is open one series names it, its severity and bottleneck;
    once it closes the series goes and the closed counter counts it."""
    diagnosis = storm_bottleneck(["nfs_op_rtt"], (), ())
    incident = ClusterIncident(
        "20231114T221320Z", T0, T0 + 60, ("nfs_op_rtt",), 40, "warning", True, False, diagnosis
    )
    exp = Exporter(CollectorRegistry(), version="x")
    exp.observe_tick(replace(tick(T0, [0.5]), open_incident=incident), 0.01)
    got = samples(exp)
    labels = (("bottleneck", "unknown"), ("incident", "20231114T221320Z"), ("severity", "warning"))
    assert 1 == got[("detector_cluster_incident_open", labels)]
    assert 0 == got[("detector_cluster_incidents_closed_total", ())]
    closed = replace(incident, closed=True)
    exp.observe_tick(replace(tick(T0 + 400, [0.5]), closed_incidents=(closed,)), 0.01)
    got = samples(exp)
    assert [] == [k for k in got if k[0] == "detector_cluster_incident_open"]
    assert 1 == got[("detector_cluster_incidents_closed_total", ())]
