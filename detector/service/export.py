"""The daemon's own Prometheus metrics, from a custom collector over the latest state.

The only module that touches prometheus_client. ``Exporter`` is a collector registered on an
injected ``CollectorRegistry`` (a fresh one by default, never the global one). It keeps the
latest tick, scrape results, alert-delivery stats and accounting snapshot, and builds the
metric families when scraped, so a node that vanished (NaN score) or a target no longer
scraped leaves no stale series. Cardinality is bounded: per-signal scores are the top
``top_k`` per node only; every other label set is per node, GPU, target, XID code,
Alertmanager or a small fixed enum. Names follow ARCHITECTURE.md: ``detector_`` prefix, base
units (seconds), ``_total`` on counters.

Diagnoses and recovery: each open alert's diagnosis (``detector_alert_diagnosis``, gone when
the alert ends), the diagnoses made per class, and the recovery figures of the loop's
``RecoveryLog`` (failure and exclusion concentration on the top-k nodes, repeat offenders with
their recommendation; the same rules as the replay report's).

Counters kept here (alerts, XID events, diagnoses, scrape errors, tick durations) count since
the process started; the accounting counters come from ``LiveAccounting`` (restored across
restarts, so they continue rather than reset).
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from importlib import metadata

import numpy as np
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)

from ..actions import ActionStats
from ..alerting import AlertStats
from ..diagnosis import Diagnosis
from ..evaluation import TOP_K, AccountingSnapshot, RecoveryFigures
from ..ingest import SAMPLE_RESULTS, RemoteWriteStats
from ..loop import ClusterIncident, LoopTick
from ..model import Alert, SignalScore
from ..pipeline import TickResult
from .entity_stats import NodeScoreStats

__all__ = ["LEAD_TIME_BUCKETS_S", "TICK_BUCKETS_S", "Exporter", "SignalScore"]

# Lead time in seconds from 0 (detected after the XID: le="0") to 2 h.
LEAD_TIME_BUCKETS_S = (0.0, 60.0, 300.0, 600.0, 900.0, 1800.0, 2700.0, 3600.0, 5400.0, 7200.0)
TICK_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class _Histogram:
    """Cumulative bucket counts, for a histogram family built at collect time."""

    def __init__(self, buckets: Sequence[float]) -> None:
        self.bounds = list(buckets)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def family(self, name: str, doc: str) -> HistogramMetricFamily:
        cumulative, total = [], 0
        for bound, count in zip([*self.bounds, math.inf], self.counts, strict=True):
            total += count
            cumulative.append(("+Inf" if math.isinf(bound) else repr(bound), total))
        return HistogramMetricFamily(name, doc, buckets=cumulative, sum_value=self.sum)


def _version() -> str:
    try:
        return metadata.version("gpu-failure-detector")
    except metadata.PackageNotFoundError:
        return "unknown"


class Exporter:
    """See the module docstring. Feed it each tick; ``render`` answers GET /metrics."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        version: str | None = None,
        top_k: int = 5,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.version = version or _version()
        self.top_k = top_k
        self._tick: TickResult | None = None
        self._signals: list[SignalScore] = []
        self._alerts_total = 0
        self._incident: ClusterIncident | None = None
        self._incidents_closed = 0
        self._xids: Counter[int] = Counter()
        self._tick_hist = _Histogram(TICK_BUCKETS_S)
        self._scrape_s: dict[str, float] = {}
        self._scrape_errors: Counter[tuple[str, str]] = Counter()
        self._alert_stats: AlertStats | None = None
        self._accounting: AccountingSnapshot | None = None
        self._action_stats: ActionStats | None = None
        self._diagnoses: Counter[str] = Counter()
        self._open_diagnoses: list[tuple[Alert, Diagnosis]] = []
        self._recovery: RecoveryFigures | None = None
        self._series = 0
        self._series_refused = 0
        self._series_dropped = 0
        self.node_stats: NodeScoreStats | None = None  # read when scraped
        self.remote_write: RemoteWriteStats | None = None  # read when scraped
        self.warmup_remaining_s = float("nan")  # NaN before the first tick
        self.registry.register(self)

    def observe_tick(self, tick: LoopTick, duration_s: float) -> None:
        """The latest scores; alerts started and XIDs seen are added to their counters."""
        self._tick = tick.scores
        self._alerts_total += len(tick.started)
        self._incident = tick.open_incident
        self._incidents_closed += len(tick.closed_incidents)
        self._xids.update(ev.xid for ev in tick.xids)
        self._diagnoses.update(d.failure_class for d in tick.diagnoses.values())
        self._tick_hist.observe(duration_s)

    def set_alert_diagnoses(self, diagnosed: Iterable[tuple[Alert, Diagnosis]]) -> None:
        """The open alerts and the diagnosis each kept since it started (replaced: an alert
        that ended leaves no series)."""
        self._open_diagnoses = list(diagnosed)

    def set_recovery(self, figures: RecoveryFigures) -> None:
        """The loop's recovery figures (``RecoveryLog.figures``)."""
        self._recovery = figures

    def observe_signals(self, scores: Iterable[SignalScore]) -> None:
        """Replace the per-signal scores; only the ``top_k`` highest per node are kept."""
        per_node: dict[str, list[SignalScore]] = {}
        for s in scores:
            if math.isfinite(s.score):
                per_node.setdefault(s.node, []).append(s)
        self._signals = [
            s
            for rows in per_node.values()
            for s in sorted(rows, key=lambda r: -r.score)[: self.top_k]
        ]

    def observe_scrapes(self, results: Mapping[str, tuple[float, str | None]]) -> None:
        """One tick's scrapes: target -> (duration seconds, error reason or None).

        Durations are replaced (a target no longer scraped disappears); errors accumulate.
        """
        self._scrape_s = {target: duration for target, (duration, _) in results.items()}
        self._scrape_errors.update((t, err) for t, (_, err) in results.items() if err)

    def observe_series(self, series: int, refused: int, dropped: int = 0) -> None:
        """The series index: how many series it holds, how many it refused since the process
        started because it was full (``scrape.max_series_total``), and how many ``labels.drop``
        kept out."""
        self._series = series
        self._series_refused = refused
        self._series_dropped = dropped

    def set_alert_stats(self, stats: AlertStats) -> None:
        self._alert_stats = stats

    def set_accounting(self, snapshot: AccountingSnapshot) -> None:
        self._accounting = snapshot

    def set_action_stats(self, stats: ActionStats) -> None:
        """The action engine's decisions, exclusions and breaker (``ActionEngine.stats()``)."""
        self._action_stats = stats

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """The exposition for an HTTP Accept header: (body, content type)."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type

    def collect(self) -> Iterator[Metric]:
        """prometheus_client's collector hook: every family from the latest state."""
        info = GaugeMetricFamily(
            "detector_build_info", "Build of the detector.", labels=["version"]
        )
        info.add_metric([self.version], 1.0)
        yield info
        yield from self._scores()
        warmup = GaugeMetricFamily(
            "detector_warmup_remaining_seconds",
            "Seconds until the scorers that learn a signal's own past (rare-event counters' "
            "rates, scoring.warmup_s) score; 0 once they do. Peer comparisons score from the "
            "first tick.",
        )
        if math.isfinite(self.warmup_remaining_s):
            warmup.add_metric([], self.warmup_remaining_s)
        yield warmup
        alerts = CounterMetricFamily("detector_alerts", "Alerts started since process start.")
        alerts.add_metric([], float(self._alerts_total))
        yield alerts
        xids = CounterMetricFamily(
            "detector_xid_events", "XID events seen since process start.", labels=["xid"]
        )
        for code, count in sorted(self._xids.items()):
            xids.add_metric([str(code)], float(count))
        yield xids
        yield self._tick_hist.family(
            "detector_tick_duration_seconds", "Time to process one tick (scrape excluded)."
        )
        yield from self._scrapes()
        series = GaugeMetricFamily("detector_series", "Series in the index (scraped columns).")
        series.add_metric([], float(self._series))
        refused = CounterMetricFamily(
            "detector_series_refused",
            "Series dropped because the index was full (scrape.max_series_total).",
        )
        refused.add_metric([], float(self._series_refused))
        dropped = CounterMetricFamily(
            "detector_series_dropped",
            "New series kept out of the index by labels.drop (container devices and mounts).",
        )
        dropped.add_metric([], float(self._series_dropped))
        yield from (series, refused, dropped)
        yield from self._node_stats()
        yield from self._remote_write()
        yield from self._delivery()
        yield from self._evaluation()
        yield from self._diagnosis()
        yield from self._actions()
        yield from self._cluster_incidents()

    def _cluster_incidents(self) -> Iterator[Metric]:
        """The open cluster incident (one series, none when none is open) and its bottleneck
        as last notified; the incidents closed since process start."""
        open_ = GaugeMetricFamily(
            "detector_cluster_incident_open",
            "1 while a cluster incident (GPUClusterIncident) is open: its id, severity and "
            "the bottleneck named so far (docs/diagnosis.md).",
            labels=["incident", "severity", "bottleneck"],
        )
        inc = self._incident
        if inc is not None:
            open_.add_metric([inc.id, inc.severity, inc.diagnosis.bottleneck], 1.0)
        closed = CounterMetricFamily(
            "detector_cluster_incidents_closed",
            "Cluster incidents closed since process start.",
        )
        closed.add_metric([], float(self._incidents_closed))
        yield from (open_, closed)

    def _scores(self) -> Iterator[Metric]:
        node = GaugeMetricFamily(
            "detector_node_score", "Node alert score in [0, 1].", labels=["node"]
        )
        gpu = GaugeMetricFamily(
            "detector_gpu_score", "GPU fused score in [0, 1].", labels=["node", "gpu"]
        )
        signal = GaugeMetricFamily(
            "detector_signal_score",
            "Score of the top signals per node (z units after weighting).",
            labels=["node", "gpu", "signal"],
        )
        tick = self._tick
        if tick is not None:
            for i in np.flatnonzero(~np.isnan(tick.node_score)).tolist():
                node.add_metric([tick.node_names[i]], float(tick.node_score[i]))
            for i in np.flatnonzero(~np.isnan(tick.gpu_score)).tolist():
                name = tick.node_names[int(tick.gpu_node[i])]
                gpu.add_metric([name, tick.gpu_label[i]], float(tick.gpu_score[i]))
            last = GaugeMetricFamily(
                "detector_last_tick_timestamp_seconds", "Data time of the latest tick."
            )
            last.add_metric([], tick.time)
            yield last
        for s in self._signals:
            signal.add_metric([s.node, s.gpu or "", s.signal], s.score)
        yield from (node, gpu, signal)

    def _node_stats(self) -> Iterator[Metric]:
        distribution = SummaryMetricFamily(
            "detector_node_score_distribution",
            "The node's alert score since the process started (quantiles: P-square estimates).",
            labels=["node"],
        )
        rises = CounterMetricFamily(
            "detector_node_score_rises",
            "Lasting rises of the node's mean alert score (ADWIN) since the process started.",
            labels=["node"],
        )
        for node in self.node_stats.summary() if self.node_stats is not None else []:
            distribution.add_metric([node.node], node.count, node.total)
            for q, value in node.quantiles:
                if math.isfinite(value):
                    distribution.add_sample(
                        distribution.name,
                        {"node": node.node, "quantile": repr(q)},
                        value,
                    )
            rises.add_metric([node.node], float(node.rises))
        yield from (distribution, rises)

    def _scrapes(self) -> Iterator[Metric]:
        duration = GaugeMetricFamily(
            "detector_scrape_duration_seconds", "Duration of the latest scrape.", labels=["target"]
        )
        for target, seconds in sorted(self._scrape_s.items()):
            duration.add_metric([target], seconds)
        errors = CounterMetricFamily(
            "detector_scrape_errors", "Failed scrapes by reason.", labels=["target", "reason"]
        )
        for (target, reason), count in sorted(self._scrape_errors.items()):
            errors.add_metric([target, reason], float(count))
        yield from (duration, errors)

    def _remote_write(self) -> Iterator[Metric]:
        stats = self.remote_write
        if stats is None:  # remote write is off: no families at all
            return
        requests = CounterMetricFamily(
            "detector_remote_write_requests",
            "Remote-write requests by result: ok, or why it was refused (too_large, "
            "unsupported_media_type, encoding, snappy, protobuf, series).",
            labels=["result"],
        )
        for result, count in sorted(stats.requests.items()):
            requests.add_metric([result], float(count))
        samples = CounterMetricFamily(
            "detector_remote_write_samples",
            "Remote-written samples by result: accepted, or dropped as out_of_order, duplicate, "
            "too_old (remote_write.max_sample_age_s), dropped (labels.drop, index full) or "
            "stale (Prometheus' staleness marker).",
            labels=["result"],
        )
        for result in SAMPLE_RESULTS:
            samples.add_metric([result], float(stats.samples.get(result, 0)))
        yield from (requests, samples)

    def _delivery(self) -> Iterator[Metric]:
        stats = self._alert_stats
        firing = GaugeMetricFamily(
            "detector_alerts_firing", "Open alerts and incidents by severity.", labels=["severity"]
        )
        suppressed = CounterMetricFamily(
            "detector_alerts_suppressed", "Alerts not sent, by reason.", labels=["reason"]
        )
        per_am = {
            "sent_alerts": ("Alert updates accepted by the Alertmanager.", CounterMetricFamily),
            "failed_requests": ("POSTs that failed.", CounterMetricFamily),
            "retried_requests": ("POSTs that retried a failed delivery.", CounterMetricFamily),
            "dropped_alerts": ("Updates dropped (queue full or rejected).", CounterMetricFamily),
            "queued": ("Alert updates waiting for delivery.", GaugeMetricFamily),
        }
        families = {
            key: kind(f"detector_alertmanager_{key}", doc, labels=["alertmanager"])
            for key, (doc, kind) in per_am.items()
        }
        if stats is not None:
            for severity, count in sorted(stats.firing.items()):
                firing.add_metric([severity], float(count))
            for reason, count in sorted(stats.suppressed.items()):
                suppressed.add_metric([reason], float(count))
            for name, am in stats.alertmanagers.items():
                for key, family in families.items():
                    family.add_metric([name], float(getattr(am, key)))
        yield from (firing, suppressed, *families.values())

    def _evaluation(self) -> Iterator[Metric]:
        acc = self._accounting or AccountingSnapshot()
        detected = CounterMetricFamily(
            "detector_failures_detected",
            "Failure XIDs matched by an alert, before or after the XID.",
            labels=["when"],
        )
        detected.add_metric(["before"], float(acc.detected_before))
        detected.add_metric(["after"], float(acc.detected_after))
        yield detected
        for name, value, doc in (
            ("detector_failures_missed", acc.missed, "Failure XIDs no alert matched."),
            ("detector_false_positives", acc.false_positives, "Alerts no failure matched."),
            ("detector_true_positives", acc.true_positives, "Alerts that matched a failure."),
        ):
            counter = CounterMetricFamily(name, doc)
            counter.add_metric([], float(value))
            yield counter
        rate = GaugeMetricFamily(
            "detector_false_positives_per_day", "False positives per day over the last 7 days."
        )
        rate.add_metric([], acc.fp_per_day)
        yield rate
        lead = _Histogram(LEAD_TIME_BUCKETS_S)
        for lead_s in acc.lead_times_s:
            lead.observe(lead_s)
        yield lead.family(
            "detector_lead_time_seconds", "XID time minus the first matching alert's start."
        )

    def _diagnosis(self) -> Iterator[Metric]:
        alert = GaugeMetricFamily(
            "detector_alert_diagnosis",
            "Per open alert, the confidence of the failure class diagnosed when it started "
            "(labels: the class and its recommended action).",
            labels=["node", "gpu", "failure_class", "action"],
        )
        for a, d in self._open_diagnoses:
            alert.add_metric([a.node, a.gpu or "", d.failure_class, d.action], d.confidence)
        total = CounterMetricFamily(
            "detector_diagnoses",
            "Alerts diagnosed since process start, by failure class.",
            labels=["failure_class"],
        )
        for failure_class, count in sorted(self._diagnoses.items()):
            total.add_metric([failure_class], float(count))
        ratio = GaugeMetricFamily(
            "detector_failure_concentration_ratio",
            "Share of all failures (failure XID episodes) or exclusions on the top_k nodes "
            "with the most (study: the top 3 of 63 nodes held more than half of all "
            "exclusions).",
            labels=["kind", "top_k"],
        )
        offender = GaugeMetricFamily(
            "detector_repeat_offender",
            "1 per repeat offender (2 or more failures or alerts), with its recommendation: "
            "replace, keep excluded or inspect.",
            labels=["node", "recommendation"],
        )
        figures = self._recovery
        if figures is not None:
            for c in figures.concentration:
                for k in TOP_K:
                    share = c.top_share(k)
                    if share is not None and k <= c.nodes:
                        ratio.add_metric([c.what, str(k)], share)
            for o in figures.offenders:
                offender.add_metric([o.node, o.recommendation], 1.0)
        yield from (alert, total, ratio, offender)

    def _actions(self) -> Iterator[Metric]:
        """Only once actions are enabled (set_action_stats called): no empty families else."""
        stats = self._action_stats
        if stats is None:
            return
        total = CounterMetricFamily(
            "detector_actions",
            "Action decisions (exclude, release) by result: done, failed, dry_run, refused_*.",
            labels=["action", "result"],
        )
        for (action, result), count in sorted(stats.decisions.items()):
            total.add_metric([action, result], float(count))
        excluded = GaugeMetricFamily(
            "detector_actions_excluded_nodes",
            "Nodes the detector excludes now (dry_run: would exclude).",
            labels=["dry_run"],
        )
        excluded.add_metric(["false"], float(stats.excluded))
        excluded.add_metric(["true"], float(stats.excluded_dry_run))
        breaker = GaugeMetricFamily(
            "detector_actions_breaker_open",
            "1 while the action breaker is open (caps reached: no exclusion until a person "
            "closes it).",
        )
        breaker.add_metric([], 1.0 if stats.breaker_open else 0.0)
        yield from (total, excluded, breaker)
