"""The Prometheus side of the alert story: rules on the detector's own /metrics, generated from
the same settings the daemon alerts with.

``prometheus_rules(RuleSettings.from_config(config.alerts, calibration))`` is the rule file
``detector rules prometheus`` prints; rules/prometheus/detector.rules.yaml is its output for
the default config with no calibration (a test fails when they differ). One name per meaning:

- the daemon's own ``GPUFailureSuspected`` / ``GPUClusterIncident`` (loop/policy.py) are the
  detector's decisions (hysteresis, minimum duration, XID forcing, storm breaker, evidence);
- the rules here name what Prometheus can see, a score above the threshold:
  ``GPUFailureScoreHigh`` (a GPU's fused score), ``NodeFailureScoreHigh`` (a node's, no GPU of
  it above the threshold) and ``GPUClusterScoreHigh`` (many nodes above it at once).
  Their severities follow the daemon's rule (``loop.alert_severity``): ``warning`` once the
  score has held above the threshold for ``alerts.min_duration_s``, ``critical`` (pages) once
  it has held for ``page_after_s`` more. Prometheus has no hysteresis, so a dip below the
  threshold restarts the hold where the daemon's alert goes on firing.

The threshold is the one the daemon fires at (``AlertsConfig.resolve_threshold``: the config's,
else the calibration file's, else 0.6); the false-positive budget is the calibration's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..config import AlertsConfig, Calibration

DEFAULT_FP_BUDGET_PER_DAY = 1.0  # with no calibration file: the budget the docs start from
STORM_MIN_NODES = 3  # AlertPolicy's storm_min_nodes
SCORE_ALERTS = ("GPUFailureScoreHigh", "NodeFailureScoreHigh", "GPUClusterScoreHigh")


@dataclass(frozen=True, slots=True)
class RuleSettings:
    """What the generated rules take from the config and the calibration."""

    threshold: float
    warn_after_s: float  # hold before a score alert fires (warning)
    page_after_s: float | None  # further hold before it pages (critical); None: never
    storm_fraction: float
    fp_budget_per_day: float
    score_alerts: bool = True  # False: recording and detector-health rules only

    @classmethod
    def from_config(
        cls,
        alerts: AlertsConfig,
        calibration: Calibration | None = None,
        *,
        score_alerts: bool = True,
    ) -> RuleSettings:
        """The settings the daemon alerts with under ``alerts`` and ``calibration``."""
        calibrated = calibration.threshold if calibration is not None else None
        budget = (
            calibration.fp_budget_per_day if calibration is not None else DEFAULT_FP_BUDGET_PER_DAY
        )
        return cls(
            threshold=alerts.resolve_threshold(calibrated),
            warn_after_s=alerts.min_duration_s,
            page_after_s=alerts.page_after_s,
            storm_fraction=alerts.storm.fraction,
            fp_budget_per_day=budget,
            score_alerts=score_alerts,
        )


def prom_duration(seconds: float) -> str:
    """A Prometheus duration: 0s, 90s -> 1m30s, 660 -> 11m, 5400 -> 1h30m, 0.5 -> 500ms."""
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"a duration is a finite number of seconds >= 0 (got {seconds})")
    ms = round(seconds * 1000)
    if ms % 1000:
        return f"{ms}ms"
    s = ms // 1000
    parts = [(s // 3600, "h"), (s % 3600 // 60, "m"), (s % 60, "s")]
    return "".join(f"{n}{unit}" for n, unit in parts if n) or "0s"


def _number(x: float) -> str:
    """The shortest text that reads back as ``x``: 0.6, 0.6234, 1 (not 1.0)."""
    text = repr(float(x))
    return text.removesuffix(".0")


def prometheus_rules(settings: RuleSettings) -> str:
    """The rule file (YAML text) for ``settings``; see the module docstring."""
    values = {
        "threshold": _number(settings.threshold),
        "warn_for": prom_duration(settings.warn_after_s),
        "storm_fraction": _number(settings.storm_fraction),
        "storm_percent": f"{settings.storm_fraction:.0%}",
        "storm_min_nodes": str(STORM_MIN_NODES),
        "fp_budget": _number(settings.fp_budget_per_day),
    }
    if settings.page_after_s is not None:
        values["page_for"] = prom_duration(settings.warn_after_s + settings.page_after_s)
        values["page_after"] = prom_duration(settings.page_after_s)
    header = _HEADER + (_PAGES if settings.page_after_s is not None else _NEVER_PAGES)
    if not settings.score_alerts:
        header += _NO_SCORE_ALERTS
    parts = [header, _RECORDING, _ALERTS_GROUP]
    if settings.score_alerts:
        parts += [_score_alert(rule, values) for rule in _SCORE_RULES]
    parts.append(_HEALTH)
    return _fill("".join(parts), values)


def _fill(text: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    return text


_HEADER = """\
# Prometheus rules on the gpu failure detector's own /metrics.
#
# GENERATED by `detector rules prometheus` (detector/alerting/prometheus_rules.py): this file is
# its output for the default config and no calibration; tests/test_prometheus_rules.py fails
# when they differ. After `detector calibrate`, generate your own copy so Prometheus fires on the
# threshold the daemon fires on:
#     detector rules prometheus --config config.yaml --calibration cal.json > detector.rules.yaml
#
# Checked and unit-tested with the real promtool (scripts/validate-deploy):
#     promtool check rules rules/prometheus/detector.rules.yaml
#     promtool test rules  rules/prometheus/detector.rules.test.yaml
# The Helm chart ships this very file as its PrometheusRule (deploy/helm/gpu-failure-detector/
# files/ links here), so the chart and bare-metal Prometheus evaluate the same rules.
#
# Which alert path to run when: docs/deploy.md "Alert paths". In short, the daemon's own
# GPUFailureSuspected (alerts.alertmanager_urls) is the detector's decision, with its evidence;
# the *ScoreHigh alerts here are Prometheus' view of the same scores (threshold @threshold@),
# for sites where only Prometheus talks to Alertmanager. Running both, the Alertmanager example
# (alertmanager.example.yaml) lets the daemon's alert inhibit the score alert of its node.
#
# Assumptions the expressions make:
# - The detector is scraped as job="gpu-failure-detector" (the chart's ServiceMonitor sets
#   jobLabel to app.kubernetes.io/name; on bare metal name the scrape job so).
"""

_PAGES = """\
# - Severity follows the daemon's rule: warning once a score holds at or above @threshold@ for
#   @warn_for@ (alerts.min_duration_s), critical (pages) once it holds @page_after@ longer
#   (alerts.page_after_s).
"""

_NEVER_PAGES = """\
# - Severity follows the daemon's rule: warning once a score holds at or above @threshold@ for
#   @warn_for@ (alerts.min_duration_s); alerts.page_after_s is null, so scores never page (only
#   the daemon's failure-XID alerts do).
"""

_NO_SCORE_ALERTS = """\
# - Generated with --no-score-alerts: recording and detector-health rules only (the daemon's own
#   alerts are the only failure alerts).
"""

_RECORDING = """\
groups:
  - name: gpu-failure-detector.recording
    interval: 30s
    rules:
      # One score per node and GPU even when several detector processes export the same entity
      # (a fleet StatefulSet mid-reshard, or agent + fleet side by side): the worst one counts.
      - record: node:detector_node_score:max
        expr: max by (node) (detector_node_score)
      - record: node_gpu:detector_gpu_score:max
        expr: max by (node, gpu) (detector_gpu_score)
      # Share of scored nodes at or above the threshold: the cluster-incident signal.
      - record: cluster:detector_nodes_above_threshold:ratio
        expr: |
          count(node:detector_node_score:max >= @threshold@)
            / count(node:detector_node_score:max)
          or
          0 * count(node:detector_node_score:max)
      - record: cluster:detector_alerts_firing:sum
        expr: sum by (severity) (detector_alerts_firing)
      - record: cluster:detector_false_positives_per_day:max
        expr: max(detector_false_positives_per_day)
      # Detection recall over the last 7 days (failures caught / failures seen).
      - record: cluster:detector_recall:ratio_7d
        expr: |
          sum(increase(detector_failures_detected_total[7d]))
            /
          (sum(increase(detector_failures_detected_total[7d]))
            + sum(increase(detector_failures_missed_total[7d])))
      # Lead time quantiles (seconds an alert came before its failure) over 7 days.
      - record: cluster:detector_lead_time_seconds:p25_7d
        expr: |
          histogram_quantile(0.25,
            sum by (le) (increase(detector_lead_time_seconds_bucket[7d])))
      - record: cluster:detector_lead_time_seconds:p50_7d
        expr: |
          histogram_quantile(0.50,
            sum by (le) (increase(detector_lead_time_seconds_bucket[7d])))
      - record: cluster:detector_lead_time_seconds:p75_7d
        expr: |
          histogram_quantile(0.75,
            sum by (le) (increase(detector_lead_time_seconds_bucket[7d])))
      - record: instance:detector_tick_duration_seconds:p99_5m
        expr: |
          histogram_quantile(0.99,
            sum by (instance, le) (rate(detector_tick_duration_seconds_bucket[5m])))
      - record: instance_target:detector_scrape_errors:rate5m
        expr: sum by (instance, target) (rate(detector_scrape_errors_total[5m]))

"""

_ALERTS_GROUP = """\
  - name: gpu-failure-detector.alerts
    rules:
"""


@dataclass(frozen=True, slots=True)
class _ScoreRule:
    name: str
    comment: str
    expr: str
    summary: str
    description: str


_SCORE_RULES = (
    _ScoreRule(
        "GPUFailureScoreHigh",
        "A GPU's fused score at or above the threshold (the daemon's GPUFailureSuspected names "
        "this GPU).",
        "node_gpu:detector_gpu_score:max >= @threshold@",
        "GPU {{ $labels.gpu }} on {{ $labels.node }} is likely failing",
        "The detector's fused score for GPU {{ $labels.gpu }} on node {{ $labels.node }} is "
        '{{ $value | printf "%.2f" }} (threshold @threshold@) for @for@. Drain the node '
        "before the next checkpoint; the detector's own alert and its /metrics "
        "(detector_signal_score) carry the top contributing signals.",
    ),
    _ScoreRule(
        "NodeFailureScoreHigh",
        "A node-level deviation with no single GPU to blame (NIC, NFS, host memory, power).",
        "node:detector_node_score:max >= @threshold@\n"
        "unless on (node)\n"
        "max by (node) (node_gpu:detector_gpu_score:max >= @threshold@)",
        "Node {{ $labels.node }} is likely failing",
        'Node {{ $labels.node }} scores {{ $value | printf "%.2f" }} (threshold '
        "@threshold@) for @for@ and no single GPU explains it: look at its host, network and "
        "storage signals.",
    ),
    _ScoreRule(
        "GPUClusterScoreHigh",
        "Many nodes at once is a shared cause (storage, fabric, a job restart), not N failures.",
        "cluster:detector_nodes_above_threshold:ratio > @storm_fraction@\n"
        "and on ()\n"
        "count(node:detector_node_score:max >= @threshold@) >= @storm_min_nodes@",
        "{{ $value | humanizePercentage }} of GPU nodes deviate together",
        "More than @storm_percent@ of scored nodes (and at least @storm_min_nodes@) are above "
        "the threshold @threshold@ for @for@. Look for a common cause (shared filesystem, "
        "fabric, scheduler) before draining nodes.",
    ),
)


def _wrap(text: str, indent: str, width: int = 96) -> str:
    """``text`` as lines of at most ``width`` characters (words kept whole), each indented."""
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= width - len(indent):
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "".join(f"{indent}{line}\n" for line in lines)


def _score_alert(rule: _ScoreRule, values: dict[str, str]) -> str:
    """The warning rule of ``rule`` and, when scores page (``page_for`` in ``values``), its
    critical twin."""
    out = []
    holds = [("warning", values["warn_for"])]
    if "page_for" in values:
        holds.append(("critical", values["page_for"]))
    for severity, hold in holds:
        expr = (
            f"        expr: {rule.expr}\n"
            if "\n" not in rule.expr
            else "        expr: |\n" + "".join(f"          {ln}\n" for ln in rule.expr.split("\n"))
        )
        out.append(
            f"      - alert: {rule.name}\n"
            + _wrap(_fill(rule.comment, values), "        # ")
            + expr
            + f"        for: {hold}\n"
            + "        labels:\n"
            + f"          severity: {severity}\n"
            + "          component: gpu-failure-detector\n"
            + "        annotations:\n"
            + f'          summary: "{rule.summary}"\n'
            + "          description: >-\n"
            + _wrap(_fill(rule.description, {**values, "for": hold}), "            ")
            + "\n"
        )
    return "".join(out)


_HEALTH = """\
      - alert: GPUFailureDetectorDown
        expr: up{job="gpu-failure-detector"} == 0
        for: 5m
        labels:
          severity: warning
          component: gpu-failure-detector
        annotations:
          summary: "GPU failure detector {{ $labels.instance }} is down"
          description: >-
            Prometheus cannot scrape the detector at {{ $labels.instance }} for 5 minutes: the
            GPUs it watches are unprotected.

      - alert: GPUFailureDetectorAbsent
        expr: absent(up{job="gpu-failure-detector"})
        for: 15m
        labels:
          severity: warning
          component: gpu-failure-detector
        annotations:
          summary: "No GPU failure detector is being scraped"
          description: >-
            No series up{job="gpu-failure-detector"} for 15 minutes: the detector is not
            deployed or its ServiceMonitor / scrape job does not match.

      - alert: GPUFailureDetectorStale
        # Serving /metrics but no longer ticking: the scoring loop is stuck.
        expr: |
          rate(detector_tick_duration_seconds_count[5m]) == 0
          and on (instance, job)
          up{job="gpu-failure-detector"} == 1
        for: 5m
        labels:
          severity: warning
          component: gpu-failure-detector
        annotations:
          summary: "GPU failure detector {{ $labels.instance }} stopped scoring"
          description: >-
            The detector at {{ $labels.instance }} answers scrapes but completed no tick in
            10 minutes. Its scores are frozen; restart it and check its logs.

      - alert: GPUFailureDetectorFalsePositivesAboveBudget
        expr: cluster:detector_false_positives_per_day:max > @fp_budget@
        for: 1h
        labels:
          severity: warning
          component: gpu-failure-detector
        annotations:
          summary: >-
            Detector false positives {{ $value | printf "%.1f" }}/day (budget @fp_budget@/day)
          description: >-
            Alerts that no XID failure followed exceed the budget of @fp_budget@ per day.
            Recalibrate (`detector calibrate`) on recent history or raise alerts.threshold.

      - alert: GPUFailureDetectorScrapeFailing
        # More than 1 error a minute is over a quarter of scrapes at the 15 s default interval.
        expr: instance_target:detector_scrape_errors:rate5m * 60 > 1
        for: 10m
        labels:
          severity: warning
          component: gpu-failure-detector
        annotations:
          summary: "Detector cannot scrape {{ $labels.target }}"
          description: >-
            The detector at {{ $labels.instance }} fails {{ $value | printf "%.1f" }}
            scrapes a minute of {{ $labels.target }} for 10 minutes: that exporter's GPUs are
            scored on stale or no data.

      - alert: GPUFailureDetectorSeriesRefused
        expr: increase(detector_series_refused_total[10m]) > 0
        labels:
          severity: warning
          component: gpu-failure-detector
        annotations:
          summary: "Detector series index full on {{ $labels.instance }}"
          description: >-
            The detector at {{ $labels.instance }} dropped {{ $value | printf "%.0f" }} new
            series in 10 minutes because it holds scrape.max_series_total series: an exporter
            whose label values churn (add that label to labels.drop), or more nodes than the
            cap was sized for (raise it with the memory limit). Those series are not scored.

      - alert: GPUFailureDetectorSlowTick
        expr: instance:detector_tick_duration_seconds:p99_5m > 10
        for: 15m
        labels:
          severity: info
          component: gpu-failure-detector
        annotations:
          summary: "Detector ticks take {{ $value | humanizeDuration }} (p99)"
          description: >-
            The detector at {{ $labels.instance }} needs more than 10 s per tick at p99, close
            to the 15 s scrape interval. Shard the fleet (StatefulSet, config key shard: i/N) or
            give it more CPU.
"""
