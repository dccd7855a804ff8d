"""Alert policy: which notifications Alertmanager should get this tick, and with which labels.

Pure (no I/O, clock passed in). ``AlertPolicy.update`` turns the pipeline's alert episodes,
cluster incidents and the set of nodes under maintenance into ``Notification`` records:

- a node alert is ``GPUFailureSuspected`` with labels alertname, node, gpu (when a GPU leads
  the evidence), severity, cluster (when configured), signal (the leading signal) and, when
  the loop diagnosed it (``diagnoses``: decided once, when the alert started), failure_class
  and action; its annotations summary, description and runbook_url are then
  ``diagnosis.alert_text``'s (``alerts.runbook_url``, when set, overrides the class's link).
  ``severity`` (``alert_severity``) is ``critical`` (pages) when the evidence names
  ``xid_<code>`` of a failure XID (the pipeline forces such alerts), when the alert is
  ``definitive`` (a GPU gone from its exporter's page: forced the same way), or when the episode has
  been firing for ``page_after_s`` (its score held above the threshold, with hysteresis,
  that long past the minimum duration that made it fire), else ``warning``. Labels are fixed
  when an episode is first sent so Alertmanager sees one alert per episode even as its
  evidence moves; an escalation to critical resolves the warning alert and fires a critical
  one (a critical alert never steps down to warning).
- firing notifications repeat every ``resend_interval_s`` with fresh annotations; an episode
  that ended (or vanished) is resolved once, at its end time.
- suppression removes evidence: ``xid_<code>`` for suppressed codes and suppressed signal
  names are dropped; an alert left with no evidence is not sent (reason "xid" or "signal").
- a node in ``muted`` (maintenance) sends nothing, not even a resolve: its alert expires in
  Alertmanager by its endsAt, and comes back if the episode outlives the maintenance.
- storm breaker: when more than ``storm_fraction`` of the nodes with data (and at least
  ``storm_min_nodes``) start alerting within ``storm_window_s``, the cluster incident takes
  them (critical) instead; episodes starting while it is active are suppressed for their
  lifetime (reason "storm") so the storm's end does not release a flood. Already sent ones stay.
- cluster incidents (incidents.py): whatever moves cluster-wide (common-mode signals, the
  storm breaker) until ``storm_window_s`` passes with nothing moving together is one
  ``GPUClusterIncident``, labelled with its ``incident`` id and first ``signal``, annotated
  with its signals and its bottleneck (``bottleneck``: the tick loop's ``StormMeter``).
- shadow mode: notifications are still returned (the sender does not send them); each
  episode is counted once under "shadow".
``suppressed`` counts episodes (not notifications) per reason.

``state_dict()`` / ``load_state_dict()`` carry what was sent (labels, last send, the storm
breaker's starts and the open cluster incident) across a restart as JSON-able data, so a
restarted daemon resolves an episode that ended while it was down and keeps the labels
Alertmanager already has.
"""

from __future__ import annotations

import re
from collections import Counter, deque
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..config import AlertsConfig
from ..diagnosis import Diagnosis, DiagnosisModel, alert_text
from ..model import Alert, Incident, Labels
from .incidents import Bottleneck, ClusterIncident, IncidentTracker, StormStart, count_once
from .notification import Notification
from .notification import labels_of as _labels_of
from .notification import make_labels as _labels
from .notification import pairs as _pairs

_ALERTS = AlertsConfig()  # the defaults are the config schema's, written once there
FAILURE_ALERT = "GPUFailureSuspected"
_XID_SIGNAL = re.compile(r"xid_(\d+)")
CRITICAL, WARNING = "critical", "warning"


@dataclass(slots=True)
class _Tracked:
    """Delivery state of one alert episode."""

    labels: Labels | None = None  # labels last sent; None: never sent
    last_sent: float = float("-inf")
    suppressed: str | None = None  # permanent suppression (storm)
    counted: set[str] = field(default_factory=set)  # suppression reasons already counted


def xid_codes(signals: Iterable[str]) -> list[int]:
    """The XID codes named by ``xid_<code>`` evidence."""
    return [int(m[1]) for s in signals if (m := _XID_SIGNAL.fullmatch(s))]


def alert_severity(
    signals: Iterable[str],
    firing_s: float,
    page_after_s: float | None,
    is_failure_xid: Callable[[int], bool] = lambda _code: True,
    definitive: bool = False,
) -> str:
    """The severity of a node alert that has been firing for ``firing_s`` seconds with
    evidence ``signals``: ``critical`` for a failure XID, for ``definitive`` structural
    evidence (``Alert.definitive``: a GPU gone from its exporter's page) or once ``firing_s``
    reaches ``page_after_s`` (None: never by duration), else ``warning``. The Prometheus rules that
    ``detector rules prometheus`` prints page on the same duration (alerting.prometheus_rules).
    """
    if definitive or any(is_failure_xid(c) for c in xid_codes(signals)):
        return CRITICAL
    if page_after_s is not None and firing_s >= page_after_s:
        return CRITICAL
    return WARNING


def _tracked_state(t: _Tracked) -> dict[str, Any]:
    return {
        "labels": _pairs(t.labels),
        "last_sent": t.last_sent,
        "suppressed": t.suppressed,
        "counted": sorted(t.counted),
    }


def _tracked_from(d: dict[str, Any]) -> _Tracked:
    return _Tracked(
        labels=_labels_of(d["labels"]),
        last_sent=float(d["last_sent"]),
        suppressed=d["suppressed"],
        counted=set(d["counted"]),
    )


class AlertPolicy:
    """See the module docstring. One instance per daemon; state is per episode."""

    def __init__(
        self,
        *,
        resend_interval_s: float = _ALERTS.resend_interval_s,
        cluster: str | None = None,
        runbook_url: str | None = None,
        shadow: bool = False,
        storm_fraction: float = _ALERTS.storm.fraction,
        storm_window_s: float = _ALERTS.storm.window_s,
        storm_min_nodes: int = 3,
        suppress_xids: Collection[int] = (),
        suppress_signals: Collection[str] = (),
        is_failure_xid: Callable[[int], bool] | None = None,
        page_after_s: float | None = _ALERTS.page_after_s,
        diagnosis: DiagnosisModel | None = None,
    ) -> None:
        self.page_after_s = page_after_s
        self.diagnosis = diagnosis  # the model the diagnoses passed to update come from
        self.resend_interval_s = resend_interval_s
        self.cluster = cluster
        self.runbook_url = runbook_url
        self.shadow = shadow
        self.storm_fraction = storm_fraction
        self.storm_window_s = storm_window_s
        self.storm_min_nodes = storm_min_nodes
        self.suppress_xids = frozenset(suppress_xids)
        self.suppress_signals = frozenset(suppress_signals)
        # The pipeline only writes xid_<code> for failure XIDs, so by default every one counts.
        self.is_failure_xid = is_failure_xid or (lambda _code: True)
        self.suppressed: Counter[str] = Counter()
        self.firing: Counter[str] = Counter()  # open episodes and incidents by severity
        self._episodes: dict[tuple[str, float], _Tracked] = {}
        self.incidents = IncidentTracker(
            window_s=storm_window_s,
            resend_interval_s=resend_interval_s,
            storm_fraction=storm_fraction,
            cluster=cluster,
            runbook_url=runbook_url,
            shadow=shadow,
            suppress_signals=suppress_signals,
        )
        self._starts: deque[tuple[float, str]] = deque()

    @classmethod
    def from_config(
        cls,
        config: AlertsConfig,
        is_failure_xid: Callable[[int], bool] | None = None,
        diagnosis: DiagnosisModel | None = None,
    ) -> AlertPolicy:
        """The policy ``config.alerts`` describes (pass ``XidCatalog.is_failure`` and the
        loop's diagnosis model)."""
        return cls(
            diagnosis=diagnosis,
            resend_interval_s=config.resend_interval_s,
            cluster=config.cluster,
            runbook_url=config.runbook_url,
            shadow=config.shadow,
            storm_fraction=config.storm.fraction,
            storm_window_s=config.storm.window_s,
            suppress_xids=config.suppress_xids,
            suppress_signals=config.suppress_signals,
            is_failure_xid=is_failure_xid,
            page_after_s=config.page_after_s,
        )

    def settings(self) -> dict[str, Any]:
        """The constructor's arguments: ``AlertPolicy(**p.settings())`` is a fresh copy."""
        return {
            "resend_interval_s": self.resend_interval_s,
            "cluster": self.cluster,
            "runbook_url": self.runbook_url,
            "shadow": self.shadow,
            "storm_fraction": self.storm_fraction,
            "storm_window_s": self.storm_window_s,
            "storm_min_nodes": self.storm_min_nodes,
            "suppress_xids": self.suppress_xids,
            "suppress_signals": self.suppress_signals,
            "is_failure_xid": self.is_failure_xid,
            "page_after_s": self.page_after_s,
            "diagnosis": self.diagnosis,
        }

    def update(
        self,
        now: float,
        n_nodes: int,
        open_alerts: Sequence[Alert],
        ended: Sequence[Alert] = (),
        incidents: Sequence[Incident] = (),
        muted: Collection[str] = frozenset(),
        diagnoses: Mapping[tuple[str, float], Diagnosis] | None = None,
        bottleneck: Bottleneck | None = None,
    ) -> list[Notification]:
        """The notifications due at ``now`` (see the module docstring); ``diagnoses``: the
        open alerts' by (node, start); ``bottleneck`` diagnoses the cluster incident (none:
        its bottleneck is ``unknown``)."""
        diagnoses = diagnoses or {}
        out: list[Notification] = []
        new = [a for a in open_alerts if (a.node, a.start) not in self._episodes]
        storm = self._update_storm(now, n_nodes, new, muted)
        storm_on = storm is not None
        self.firing = Counter()
        current: set[tuple[str, float]] = set()
        for alert in open_alerts:
            key = (alert.node, alert.start)
            current.add(key)
            tracked = self._episodes.get(key)
            if tracked is None:
                tracked = self._episodes[key] = _Tracked()
                if storm_on and alert.node not in muted:
                    tracked.suppressed = "storm"
            self._node_alert(now, alert, tracked, muted, out, diagnoses.get(key))
        ends = {(a.node, a.start): a.end for a in ended}
        for key in [k for k in self._episodes if k not in current]:
            tracked = self._episodes.pop(key)
            end = ends.get(key)
            if tracked.labels is not None and key[0] not in muted:
                out.append(Notification(tracked.labels, (), key[1], now if end is None else end))
        out += self.incidents.update(now, n_nodes, incidents, storm, self._count_reason, bottleneck)
        severity = self.incidents.severity
        if severity is not None:
            self.firing[severity] += 1
        return out

    @property
    def closed_incidents(self) -> list[ClusterIncident]:
        """The cluster incidents the last ``update`` closed."""
        return self.incidents.closed

    def open_incident(self, bottleneck: Bottleneck | None = None) -> ClusterIncident | None:
        """The open cluster incident (its bottleneck diagnosed now with ``bottleneck``)."""
        return self.incidents.current(bottleneck)

    def state_dict(self) -> dict[str, Any]:
        """What was sent and is being tracked, as JSON-able data (see the module docstring)."""
        return {
            "episodes": [
                [node, start, _tracked_state(t)] for (node, start), t in self._episodes.items()
            ],
            "incident": self.incidents.state_dict(),
            "starts": [list(s) for s in self._starts],
            "suppressed": dict(self.suppressed),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict`` output. Raises KeyError/TypeError/ValueError on a malformed
        state, leaving this policy as it was."""
        episodes = {
            (str(node), float(start)): _tracked_from(t) for node, start, t in state["episodes"]
        }
        # A state written before incidents.py has none: its per-signal incident alerts
        # expire in Alertmanager by their endsAt.
        incident = state.get("incident")
        starts = deque((float(t), str(node)) for t, node in state["starts"])
        suppressed = Counter({str(k): int(v) for k, v in state["suppressed"].items()})
        self.incidents.load_state_dict(incident)
        self._episodes, self._starts, self.suppressed = episodes, starts, suppressed

    def _evidence(self, signals: Sequence[str]) -> tuple[tuple[str, ...], str | None]:
        """Signals left after suppression, and the reason when suppression removed them all."""
        kept, reason = [], None
        for s in signals:
            codes = xid_codes((s,))
            if codes and codes[0] in self.suppress_xids:
                reason = "xid"
            elif s in self.suppress_signals:
                reason = reason or "signal"
            else:
                kept.append(s)
        return tuple(kept), (reason if signals and not kept else None)

    def _count(self, tracked: _Tracked, reason: str) -> None:
        count_once(tracked.counted, reason, self._count_reason)

    def _count_reason(self, reason: str) -> None:
        self.suppressed[reason] += 1

    def _node_alert(
        self,
        now: float,
        alert: Alert,
        tracked: _Tracked,
        muted: Collection[str],
        out: list[Notification],
        diagnosis: Diagnosis | None,
    ) -> None:
        evidence, reason = self._evidence(alert.signals)
        severity = alert_severity(
            evidence, now - alert.start, self.page_after_s, self.is_failure_xid, alert.definitive
        )
        self.firing[severity] += 1
        if tracked.suppressed is not None or alert.node in muted:
            self._count(tracked, tracked.suppressed or "maintenance")
            return
        if reason is not None and tracked.labels is None:
            self._count(tracked, reason)
            return
        labels = _labels(
            alertname=FAILURE_ALERT,
            node=alert.node,
            gpu=alert.gpu,
            severity=severity,
            cluster=self.cluster,
            signal=evidence[0] if evidence else None,
            failure_class=diagnosis.failure_class if diagnosis is not None else None,
            action=diagnosis.action if diagnosis is not None else None,
        )
        if tracked.labels is None:
            if self.shadow:
                self._count(tracked, "shadow")
        elif severity == CRITICAL and dict(tracked.labels)["severity"] != CRITICAL:
            # Escalated (a failure XID, or held past page_after_s): a critical alert
            # replaces the warning one.
            out.append(Notification(tracked.labels, (), alert.start, now))
        else:
            labels = tracked.labels  # frozen for the episode's lifetime
            if not self._due(now, tracked):
                return
        tracked.labels, tracked.last_sent = labels, now
        note = self._annotations(alert, evidence, dict(labels)["severity"], now, diagnosis)
        out.append(Notification(labels, note, alert.start, None))

    def _due(self, now: float, tracked: _Tracked) -> bool:
        return now - tracked.last_sent >= self.resend_interval_s

    def _annotations(
        self,
        alert: Alert,
        evidence: Sequence[str],
        severity: str,
        now: float,
        diagnosis: Diagnosis | None,
    ) -> Labels:
        xids = xid_codes(evidence)
        score = f"Fused failure score peaked at {alert.peak_score:.2f}."
        paging = ""
        if alert.definitive and not xids:
            paging = " A GPU's series are gone from the page its node's exporter still serves."
        elif severity == CRITICAL and not xids:
            minutes = (now - alert.start) / 60
            paging = f" Firing for {minutes:.0f} min (alerts.page_after_s): it pages."
        if diagnosis is not None and self.diagnosis is not None:
            text = alert_text(diagnosis, self.diagnosis, alert.node, alert.gpu, xids_since=xids)
            annotations = dict(text.annotations)
            described = (score, annotations["description"])
            annotations["description"] = " ".join(d for d in described if d) + paging
            if self.runbook_url:
                annotations["runbook_url"] = self.runbook_url
            return _labels(**annotations)
        where = f"GPU {alert.gpu} on node {alert.node}" if alert.gpu else f"node {alert.node}"
        description = f"{score} Top signals: {', '.join(evidence) or 'none recorded'}."
        if xids:
            description += f" Evidence: failure XID {', '.join(map(str, xids))} seen on the node."
        return _labels(
            summary=f"{where} looks like it is failing",
            description=description + paging,
            runbook_url=self.runbook_url,
        )

    def _update_storm(
        self, now: float, n_nodes: int, new: Sequence[Alert], muted: Collection[str]
    ) -> StormStart | None:
        """Track node alert starts in the window; the storm when the breaker is active."""
        self._starts.extend((a.start, a.node) for a in new if a.node not in muted)
        while self._starts and self._starts[0][0] < now - self.storm_window_s:
            self._starts.popleft()
        nodes = {node for _, node in self._starts}
        active = len(nodes) >= self.storm_min_nodes and len(nodes) > self.storm_fraction * n_nodes
        if not active:
            return None
        leading = Counter(a.signals[0] for a in new if a.signals).most_common(1)
        return StormStart(
            frozenset(nodes), max(t for t, _ in self._starts), leading[0][0] if leading else None
        )
