"""End to end with the real Debian binaries: prometheus, prometheus-alertmanager and
prometheus-node-exporter around ``detector run`` (a subprocess), on loopback ports picked at
run time. tests/e2e/stack.py starts the stack once for this module and describes its
timeline: a planted PCIe failure (the GPU falls off the bus) on node-02 GPU 1 of the
simulator's live exporters, 20 s in, repaired 15 s later.

What is checked, each against the real tool's own API:
- the daemon's alert reaches Alertmanager (API v2), is notified to a webhook grouped by
  alertname and node, and is notified resolved once the GPU is back;
- Prometheus scrapes the daemon and a genuine node-exporter, evaluates the project's rules
  (rules/prometheus/detector.rules.yaml with ``for`` durations divided by 60 and group
  intervals of 1 s, see ``shorten_rules``) without error, and fires GPUFailureScoreHigh for
  the failed GPU, which it routes to the same Alertmanager;
- the daemon scrapes that node-exporter as one of its own targets, without errors;
- Prometheus also scrapes the simulated exporters, and replays of its own exports
  (``query_range``, ``promtool tsdb dump``) with the failure as an events file find it.

A missing binary skips these tests on a developer machine and fails them under CI (``CI``
set), where .ci/run installs the three packages.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from e2e.observe import Notification
from e2e.procs import require_tool, wait_until
from e2e.stack import (
    FAILED_GPU,
    FAILED_NODE,
    FAILURE_AT_S,
    REAL_HOST,
    REPAIR_S,
    RULES,
    SPEED,
    Stack,
    duration_s,
    shorten_rules,
)

from detector.cli.main import main
from detector.ingest.parse import parse_exposition

ALERT = "GPUFailureSuspected"  # the daemon's own alert
RULE_ALERT = "GPUFailureScoreHigh"  # Prometheus' score alert (rules/prometheus)
# The failure fires within ~25 s of the start and resolves ~15 s later; these are ceilings.
FIRE_TIMEOUT_S = 60.0
RESOLVE_TIMEOUT_S = 60.0
EXPORT_END_MARGIN_S = 3.0  # the exported span ends this long before the export


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The running stack; stopped (every process reaped) even when starting it fails."""
    running = Stack(tmp_path_factory.mktemp("e2e"))
    try:
        running.start()
        yield running
    finally:
        running.close()


def _from_daemon(labels: dict[str, str]) -> bool:
    """The daemon's own alerts carry a ``signal`` label; the Prometheus rules' carry
    ``component``."""
    return "signal" in labels and "component" not in labels


def _daemon_alert(alerts: list[dict[str, Any]]) -> dict[str, Any] | None:
    for alert in alerts:
        labels = alert["labels"]
        named = labels.get("alertname") == ALERT and labels.get("node") == FAILED_NODE
        if named and _from_daemon(labels):
            return alert
    return None


def _notified(stack: Stack, status: str) -> Notification | None:
    """The first webhook notification carrying the daemon's alert with ``status``."""
    assert stack.webhook is not None
    for note in stack.webhook.received():
        alert = _daemon_alert(note.alerts)
        if alert is not None and alert["status"] == status:
            return note
    return None


def _get(url: str, **params: str) -> Any:
    response = httpx.get(url, params=params, timeout=60.0)  # a hang guard
    response.raise_for_status()
    return response.json()


def _prom_query(stack: Stack, query: str) -> list[dict[str, Any]]:
    answer = _get(f"{stack.prometheus}/api/v1/query", query=query)
    assert "success" == answer["status"], answer
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


@pytest.mark.tools
@pytest.mark.slow
def test_daemon_alert_reaches_alertmanager_then_resolves(stack: Stack) -> None:
    """Alertmanager lists the daemon's alert for the failed node, notifies it in a group of
    (alertname, node), then notifies it resolved and stops listing it as active."""
    poller = stack.poller
    assert poller is not None
    procs = stack.procs

    def active_at_alertmanager() -> tuple[float, Any] | None:
        return poller.first("alertmanager", lambda a: _daemon_alert(a) is not None)

    _, listed = wait_until(active_at_alertmanager, FIRE_TIMEOUT_S, "the alert at AM", procs)
    alert = _daemon_alert(listed)
    assert alert is not None
    assert "active" == alert["status"]["state"]
    assert ["webhook"] == [r["name"] for r in alert["receivers"]]
    assert alert["labels"]["severity"] in ("warning", "critical")

    firing = wait_until(lambda: _notified(stack, "firing"), 30.0, "a firing notification", procs)
    assert {"alertname": ALERT, "node": FAILED_NODE} == firing.group_labels
    assert all(a["labels"]["node"] == FAILED_NODE for a in firing.alerts)
    assert "/hook" == firing.path

    resolved = wait_until(
        lambda: _notified(stack, "resolved"), RESOLVE_TIMEOUT_S, "a resolved notification", procs
    )
    assert resolved.arrived > firing.arrived
    assert {"alertname": ALERT, "node": FAILED_NODE} == resolved.group_labels
    resolved_alert = _daemon_alert(resolved.alerts)
    assert resolved_alert is not None
    assert alert["fingerprint"] == resolved_alert["fingerprint"]

    def gone_from_active() -> bool:
        current = _daemon_alert(_get(f"{stack.alertmanager}/api/v2/alerts", active="true"))
        return current is None

    wait_until(gone_from_active, 30.0, "the alert to leave AM's active list", procs)


@pytest.mark.tools
@pytest.mark.slow
def test_prometheus_rule_fires_for_the_failed_gpu(stack: Stack) -> None:
    """GPUFailureScoreHigh fires in Prometheus for node-02 GPU 1 from the detector's scores
    and reaches Alertmanager; no other node's score alert and no detector-health alert
    fires."""
    poller = stack.poller
    assert poller is not None

    def rule_alert(alerts: Any, state: str) -> bool:
        return any(
            a["labels"].get("alertname") == RULE_ALERT
            and a["labels"].get("node") == FAILED_NODE
            and a["labels"].get("gpu") == FAILED_GPU
            and a["state"] == state
            for a in alerts["data"]["alerts"]
        )

    wait_until(
        lambda: poller.first("prometheus", lambda a: rule_alert(a, "firing")),
        FIRE_TIMEOUT_S,
        "Prometheus to fire GPUFailureScoreHigh",
        stack.procs,
    )

    def routed(alerts: Any) -> bool:
        return any(
            a["labels"].get("alertname") == RULE_ALERT
            and a["labels"].get("node") == FAILED_NODE
            and a["labels"].get("component") == "gpu-failure-detector"
            for a in alerts
        )

    wait_until(
        lambda: poller.first("alertmanager", routed),
        30.0,
        "Prometheus' alert at Alertmanager",
        stack.procs,
    )
    fired = [
        a["labels"]
        for _, answer in poller.history("prometheus")
        if answer is not None
        for a in answer["data"]["alerts"]
        if a["state"] == "firing"
    ]
    health = {"GPUFailureDetectorDown", "GPUFailureDetectorAbsent", "GPUFailureDetectorStale"}
    assert set() == {labels["alertname"] for labels in fired} & health
    failing = {"GPUFailureScoreHigh", "NodeFailureScoreHigh", "GPUClusterScoreHigh"}
    nodes = {labels.get("node") for labels in fired if labels["alertname"] in failing}
    assert {FAILED_NODE} == nodes  # the healthy nodes and the real host stay quiet


@pytest.mark.tools
@pytest.mark.slow
def test_prometheus_evaluates_every_project_rule(stack: Stack) -> None:
    """Every rule of rules/prometheus/detector.rules.yaml is loaded and evaluates cleanly
    against the live detector's metrics."""
    expected = sorted(
        r.get("alert") or r["record"] for g in stack.rules["groups"] for r in g["rules"]
    )

    def evaluated() -> list[dict[str, Any]] | None:
        groups = _get(f"{stack.prometheus}/api/v1/rules")["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        done = rules and all(r["health"] != "unknown" for r in rules)
        return rules if done else None

    rules = wait_until(evaluated, 30.0, "every rule to be evaluated", stack.procs)
    assert expected == sorted(r["name"] for r in rules)
    assert [] == [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    scores = _prom_query(stack, "node_gpu:detector_gpu_score:max")
    assert (FAILED_NODE, FAILED_GPU) in {(s["metric"]["node"], s["metric"]["gpu"]) for s in scores}


@pytest.mark.tools
@pytest.mark.slow
def test_prometheus_scrapes_detector_and_real_node_exporter(stack: Stack) -> None:
    """Both targets are up in Prometheus; node-exporter's CPU counters and the detector's
    scores are queryable."""

    def all_up() -> list[dict[str, Any]] | None:
        targets = _get(f"{stack.prometheus}/api/v1/targets")["data"]["activeTargets"]
        return targets if targets and all(t["health"] == "up" for t in targets) else None

    targets = wait_until(all_up, 30.0, "every Prometheus target up", stack.procs)
    jobs = sorted({t["labels"]["job"] for t in targets})
    assert ["dcgm", "gpu-failure-detector", "node", "node-sim"] == jobs
    cpu = _prom_query(stack, 'node_cpu_seconds_total{job="node"}')
    assert cpu
    assert {"idle", "user", "system"} <= {s["metric"]["mode"] for s in cpu}
    scored = _prom_query(stack, 'detector_node_score{job="gpu-failure-detector"}')
    assert {FAILED_NODE, REAL_HOST} <= {s["metric"]["node"] for s in scored}


@pytest.mark.tools
@pytest.mark.slow
def test_daemon_scrapes_the_real_node_exporter(stack: Stack) -> None:
    """The daemon scrapes the genuine node-exporter every tick without an error and scores
    its host; our parser reads that page with no bad line."""
    target = stack.node_exporter

    def detector_metrics() -> dict[str, float] | None:
        page = parse_exposition(httpx.get(f"{stack.detector}/metrics").content, "detector")
        assert [] == page.errors
        values = dict(zip(page.keys, page.values, strict=True))
        ticks = values.get("detector_tick_duration_seconds_count", 0.0)
        return values if ticks >= 5 else None

    values = wait_until(detector_metrics, 30.0, "five daemon ticks", stack.procs)
    assert values[f'detector_scrape_duration_seconds{{target="{target}"}}'] > 0
    errors = [k for k in values if k.startswith("detector_scrape_errors") and target in k]
    assert [] == errors
    assert f'detector_node_score{{node="{REAL_HOST}"}}' in values

    page = parse_exposition(httpx.get(target).content, target)
    assert [] == page.errors
    assert any(k.startswith("node_cpu_seconds_total{") for k in page.keys)
    daemon_log = stack.proc("detector").log_path.read_text()
    failures = [
        line
        for line in daemon_log.splitlines()
        if line.startswith("{") and json.loads(line).get("target") == target
    ]
    assert [] == failures


@pytest.mark.tools
@pytest.mark.slow
def test_replays_of_prometheus_own_exports_find_the_failure(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What Prometheus stored while it scraped the simulated exporters, exported the two ways
    docs/evaluate.md gives (``query_range`` through the HTTP API, and ``promtool tsdb dump
    --match`` of its data directory with ``detector export-selector``'s regex), each replayed
    with the failure as an events file: the
    real formats, staleness and labels of a Prometheus export (``instance``, ``job``, the
    ``node`` target label, ``Hostname``), the same four nodes, and the vanished GPU's failure
    found, as the live daemon found it, with no false alert."""
    back_s = (FAILURE_AT_S + REPAIR_S) / SPEED + 5.0 + EXPORT_END_MARGIN_S
    wait_until(
        lambda: time.monotonic() - stack.sim_started > back_s or None,
        back_s + 120.0,  # the condition is the time itself; the rest bounds a stall
        "the GPU to be back",
        stack.procs,
    )
    selector = '{job=~"dcgm|node-sim"}'
    # One span for both exports: after it the replays below load this process, which also
    # serves the simulated exporters, and their slower scrapes are a telemetry anomaly of
    # their own (the tsdb dump, unbounded, ended in health_scrape_duration alerts).
    # It also ends a few seconds before now: a scrape in flight when the export starts is
    # stamped inside the span and slowed by the export, which this process (serving the
    # exporters) does, and its node's health_scrape_duration alerted at the span's last tick
    # (one CI run; 1 of 4 runs with the other core busy). Not the whole story: this process
    # can stall any scrape for a few ms (2.5 -> 5.1 ms), and with the daemon's one-tick
    # alerting that too was a lone deviant (a later run, mid-span: ~2 in 9 runs). The
    # detector's fix: scrape duration is scored on a log scale with a floor (health's
    # log_floor), where a few ms is noise and a DCGM call blocked for a second is not.
    start, end = stack.sim_started_wall, time.time() - EXPORT_END_MARGIN_S
    answer = _get(
        f"{stack.prometheus}/api/v1/query_range",
        query=selector,
        start=str(start),
        end=str(end),
        step="1",
    )
    assert "success" == answer["status"]
    from_api = tmp_path / "prometheus.json"
    from_api.write_text(json.dumps(answer))
    from_tsdb = tmp_path / "prometheus.tsdb"
    span = [f"--min-time={int(start * 1000)}", f"--max-time={int(end * 1000)}"]
    # the tsdb export takes `detector export-selector`'s selector: PromQL, RE2, as promtool reads
    assert 0 == main(["export-selector", "--job", "dcgm", "--job", "node-sim"])
    match = f"--match={capsys.readouterr().out.strip()}"
    dumped = subprocess.run(
        [require_tool("promtool"), "tsdb", "dump", match, *span, str(stack.tsdb)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert 0 == dumped.returncode, dumped.stderr
    from_tsdb.write_text(dumped.stdout)
    events = tmp_path / "events.jsonl"
    failed_at = stack.sim_started_wall + FAILURE_AT_S / SPEED
    failure = {"time": failed_at, "node": FAILED_NODE, "gpu": FAILED_GPU, "xid": 79}
    events.write_text(json.dumps(failure))
    config = tmp_path / "replay.yaml"
    alerts = {"min_duration_s": 1, "min_observations": 1, "cooldown_s": 0, "clear_duration_s": 0}
    config.write_text(yaml.safe_dump({"alerts": alerts}))  # as the daemon's (stack.py)
    for dump in (from_api, from_tsdb):
        report, scores = tmp_path / f"{dump.name}.json", tmp_path / f"{dump.name}.csv"
        argv = ["replay", str(dump), "--events", str(events), "--config", str(config)]
        argv += ["--step", "1", "--report-json", str(report), "--scores-out", str(scores)]
        assert 0 == main([*argv, "--quiet"]), dump
        result = json.loads(report.read_text())
        nodes = {line.split(",")[1] for line in scores.read_text().splitlines()[1:]}
        assert {"node-01", "node-02", "node-03", "node-04"} == nodes, dump
        [found] = result["failures"]
        assert (found["node"], found["gpu"], found["xid"]) == (FAILED_NODE, FAILED_GPU, 79)
        assert found["detected"], (dump, result)
        raised = [(a["node"], a["gpu"], a["start"], a["signals"][:3]) for a in result["alerts"]]
        assert 0 == result["summary"]["false_positives"], (dump, raised)


def test_rule_durations_are_shortened_not_changed(tmp_path: Path) -> None:
    """The test copy of the rules keeps every expression and label; only ``for`` (divided by
    60, at least 1 s) and group intervals (1 s) differ from rules/prometheus/."""
    original = yaml.safe_load(RULES.read_text())
    short = shorten_rules(RULES, tmp_path / "rules.yaml")
    assert short == yaml.safe_load((tmp_path / "rules.yaml").read_text())
    for group, copy in zip(original["groups"], short["groups"], strict=True):
        assert ("interval" in group) == ("interval" in copy)
        for rule, new in zip(group["rules"], copy["rules"], strict=True):
            assert {k: v for k, v in rule.items() if k != "for"} == {
                k: v for k, v in new.items() if k != "for"
            }
            if "for" in rule:
                expected = max(1, round(duration_s(rule["for"]) / 60))
                assert f"{expected}s" == new["for"]
    assert "1s" == short["groups"][1]["rules"][0]["for"]  # GPUFailureScoreHigh warning: 1m
    assert "11s" == short["groups"][1]["rules"][1]["for"]  # its critical twin: 11m
    assert 1.5 * 3600 == duration_s("1h30m")
    with pytest.raises(ValueError, match="not a Prometheus duration"):
        duration_s("2 minutes")
