"""The Prometheus rules are generated from the settings the daemon alerts with: the shipped file
is the defaults' output, a calibration's threshold and FP budget reach the expressions, and
severities follow the daemon's hold-then-page rule (checked with the real promtool)."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e.procs import require_tool

from detector.alerting import RuleSettings, prom_duration, prometheus_rules
from detector.cli.main import main
from detector.config import AlertsConfig, Calibration
from detector.config.calibration_file import Achieved, FittedOn, save_calibration
from detector.loop import FAILURE_ALERT, INCIDENT_ALERT, alert_severity

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "rules" / "prometheus" / "detector.rules.yaml"
SCORE_ALERTS = {"GPUFailureScoreHigh", "NodeFailureScoreHigh", "GPUClusterScoreHigh"}


def calibration(threshold: float, budget: float) -> Calibration:
    return Calibration(
        threshold=threshold,
        fp_budget_per_day=budget,
        fitted_on=FittedOn(dump="history", days=7.0, failures=4),
        achieved=Achieved(detected=3, detected_before=3, fp_per_day=budget / 2),
        created=datetime(2026, 1, 1, tzinfo=UTC),
    )


def rules_of(text: str) -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(text)["groups"] for r in g["rules"]]


def score_rules(text: str) -> list[tuple[str, str, str]]:
    """(alertname, severity, for) of every score alert."""
    return [
        (r["alert"], r["labels"]["severity"], r["for"])
        for r in rules_of(text)
        if r.get("alert") in SCORE_ALERTS
    ]


def test_shipped_rules_are_the_generated_defaults() -> None:
    """rules/prometheus/detector.rules.yaml is `detector rules prometheus` with no config: a
    hand edit (or a changed default) that is not regenerated fails here."""
    expected = prometheus_rules(RuleSettings.from_config(AlertsConfig()))
    assert expected == SHIPPED.read_text(encoding="utf-8")


def test_alert_names_keep_one_meaning_per_path() -> None:
    """The daemon's decisions and Prometheus' score alerts never share a name."""
    names = {r["alert"] for r in rules_of(SHIPPED.read_text()) if "alert" in r}
    assert SCORE_ALERTS <= names
    assert set() == names & {FAILURE_ALERT, INCIDENT_ALERT}


def test_default_rules_warn_after_min_duration_and_page_after_page_after() -> None:
    """Defaults: warning after 1m (min_duration_s 60), critical after 11m (+ page_after_s 600)."""
    expected = [
        (name, severity, hold)
        for name in ("GPUFailureScoreHigh", "NodeFailureScoreHigh", "GPUClusterScoreHigh")
        for severity, hold in (("warning", "1m"), ("critical", "11m"))
    ]
    assert expected == score_rules(SHIPPED.read_text())


def test_calibrated_threshold_and_budget_reach_every_expression() -> None:
    """A calibration's threshold is in every score comparison; its budget in the FP alert."""
    text = prometheus_rules(RuleSettings.from_config(AlertsConfig(), calibration(0.4321, 0.25)))
    rules = {(r.get("alert") or r["record"], r.get("for")): r for r in rules_of(text)}
    gpu = rules[("GPUFailureScoreHigh", "1m")]["expr"]
    assert "node_gpu:detector_gpu_score:max >= 0.4321" == gpu
    assert 2 == rules[("NodeFailureScoreHigh", "11m")]["expr"].count(">= 0.4321")
    assert ">= 0.4321)" in rules[("cluster:detector_nodes_above_threshold:ratio", None)]["expr"]
    fp = rules[("GPUFailureDetectorFalsePositivesAboveBudget", "1h")]
    assert "cluster:detector_false_positives_per_day:max > 0.25" == fp["expr"]
    assert "0.6" not in "".join(r["expr"] for r in rules.values())


def test_config_threshold_wins_over_the_calibration_as_in_the_daemon() -> None:
    """alerts.threshold set: the rules use it, as AlertsConfig.resolve_threshold does."""
    alerts = AlertsConfig(threshold=0.75, min_duration_s=120, page_after_s=300)
    settings = RuleSettings.from_config(alerts, calibration(0.4, 1.0))
    assert 0.75 == settings.threshold
    text = prometheus_rules(settings)
    gpu = [(sev, hold) for name, sev, hold in score_rules(text) if name == "GPUFailureScoreHigh"]
    assert [("warning", "2m"), ("critical", "7m")] == gpu


def test_page_after_null_leaves_no_critical_score_alert() -> None:
    """alerts.page_after_s null: the score alerts only warn (only failure XIDs page)."""
    text = prometheus_rules(RuleSettings.from_config(AlertsConfig(page_after_s=None)))
    assert {"warning"} == {severity for _, severity, _ in score_rules(text)}
    assert 3 == len(score_rules(text))


def test_no_score_alerts_keeps_recording_and_health_rules() -> None:
    """--no-score-alerts: no *ScoreHigh alert, every other rule unchanged."""
    full = rules_of(SHIPPED.read_text())
    lean = rules_of(prometheus_rules(RuleSettings.from_config(AlertsConfig(), score_alerts=False)))
    assert [r for r in full if r.get("alert") not in SCORE_ALERTS] == lean


def test_prometheus_durations_read_back_as_the_seconds() -> None:
    """Seconds become the Prometheus duration syntax, largest units first."""
    cases = [0, 0.5, 45, 60, 90, 660, 3600, 5400]
    assert ["0s", "500ms", "45s", "1m", "1m30s", "11m", "1h", "1h30m"] == [
        prom_duration(s) for s in cases
    ]
    with pytest.raises(ValueError, match="finite number of seconds"):
        prom_duration(float("inf"))


def test_daemon_and_rules_share_the_severity_rule() -> None:
    """The daemon's severity: warning while firing less than page_after_s, then critical;
    a failure XID is critical at once (the rules page on the same hold)."""
    assert "warning" == alert_severity(("gpu_temp",), 599.0, 600.0)
    assert "critical" == alert_severity(("gpu_temp",), 600.0, 600.0)
    assert "critical" == alert_severity(("gpu_temp", "xid_79"), 0.0, None)
    assert "warning" == alert_severity(("xid_13",), 0.0, None, lambda code: code == 79)


def test_rules_command_prints_the_rules_of_the_calibration_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`detector rules prometheus --calibration FILE` prints the rules at its threshold."""
    path = tmp_path / "calibration.json"
    save_calibration(path, calibration(0.55, 2.0))
    assert 0 == main(["rules", "prometheus", "--calibration", str(path)])
    expected = prometheus_rules(RuleSettings.from_config(AlertsConfig(), calibration(0.55, 2.0)))
    assert expected == capsys.readouterr().out


def test_rules_command_names_a_missing_calibration_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unreadable calibration file is a clean exit 2 naming the file."""
    missing = tmp_path / "nope.json"
    assert 2 == main(["rules", "prometheus", "--calibration", str(missing)])
    assert str(missing) in capsys.readouterr().err


def _expected(severity: str, held: str) -> str:
    description = (
        f"The detector's fused score for GPU 5 on node n1 is 0.50 (threshold 0.45) for {held}. "
        "Drain the node before the next checkpoint; the detector's own alert and its /metrics "
        "(detector_signal_score) carry the top contributing signals."
    )
    labels = f'{{severity: {severity}, component: gpu-failure-detector, node: n1, gpu: "5"}}'
    return (
        f"          - exp_labels: {labels}\n"
        "            exp_annotations:\n"
        '              summary: "GPU 5 on n1 is likely failing"\n'
        f'              description: "{description}"\n'
    )


PROMTOOL_TEST = (
    """
rule_files: [rules.yaml]
evaluation_interval: 30s
tests:
  - interval: 30s
    input_series:
      - series: 'detector_gpu_score{node="n1",gpu="5"}'
        values: '0.3 0.5x40'
    alert_rule_test:
      - eval_time: 2m
        alertname: GPUFailureScoreHigh
        exp_alerts: []
      - eval_time: 4m
        alertname: GPUFailureScoreHigh
        exp_alerts:
"""
    + _expected("warning", "2m")
    + """      - eval_time: 9m
        alertname: GPUFailureScoreHigh
        exp_alerts:
"""
    + _expected("warning", "2m")
    + _expected("critical", "7m")
)


def test_promtool_fires_generated_rules_at_the_calibrated_threshold(tmp_path: Path) -> None:
    """Rules for a 0.45 calibration, 2 min hold and 5 min page: a GPU at 0.5 (below the
    shipped 0.6) warns after 2 minutes and pages after 7, as the real promtool evaluates."""
    promtool = require_tool("promtool")
    alerts = AlertsConfig(min_duration_s=120, page_after_s=300)
    text = prometheus_rules(RuleSettings.from_config(alerts, calibration(0.45, 1.0)))
    (tmp_path / "rules.yaml").write_text(text)
    (tmp_path / "test.yaml").write_text(PROMTOOL_TEST)
    check = subprocess.run(
        [promtool, "check", "rules", str(tmp_path / "rules.yaml")], capture_output=True, text=True
    )
    assert 0 == check.returncode, check.stdout + check.stderr
    run = subprocess.run(
        [promtool, "test", "rules", "test.yaml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert 0 == run.returncode, run.stdout + run.stderr
