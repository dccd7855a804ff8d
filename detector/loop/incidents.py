"""Cluster incidents: one ``GPUClusterIncident`` per incident, whatever moves together in it.

``IncidentTracker.update`` runs once per tick inside ``AlertPolicy.update``. An incident opens on
the first tick on which something moves cluster-wide: a common-mode signal (fusion's
``Incident``: many nodes moving together on one signal) or the storm breaker (more than
``alerts.storm.fraction`` of the nodes starting to alert within ``window_s``). Every signal that
moves cluster-wide while it is open joins it; it closes once nothing has moved together for
``window_s`` (a storm's movement is its nodes' alert starts). At most one is open at a time: a
checkpoint storm that moves NFS latency, retransmissions and I/O pressure is one incident.

Alertmanager identifies an alert by its labels, so they are fixed when the incident is first
notified: ``alertname`` ``GPUClusterIncident``, ``incident`` (its start, UTC, e.g.
``20250101T235200Z``: silence this one incident), ``signal`` (the first signal that moved, the
incident's kind: route or silence a kind, e.g. ``signal=~"nfs_.*"``; a storm opened by node
alerts names their leading signal), ``severity`` and ``cluster``. ``severity`` is ``warning``,
and ``critical`` once the storm breaker holds node alerts back during it; that escalation
resolves the warning alert and fires a critical one with the same ``incident`` (never back).
Annotations change with each resend: ``signals`` (every signal that moved together so far),
``bottleneck`` and the NFS figures behind it in the description (``Bottleneck``: the tick
loop's ``StormMeter``; ``diagnosis.storm_bottleneck``).

Suppressed signals (``alerts.suppress_signals``) still group (they are part of what happened)
but are not named; an incident with nothing else to show is not notified (counted once under
"signal"). Shadow mode counts each incident once under "shadow". Closed incidents, with their
final bottleneck, are ``IncidentTracker.closed`` for the tick that closed them: the replay
report's storm table and its "cluster incidents" count read them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..diagnosis import StormDiagnosis, storm_bottleneck
from ..model import Incident, Labels
from .notification import Notification, labels_of, make_labels, pairs

INCIDENT_ALERT = "GPUClusterIncident"


class Bottleneck(Protocol):
    """What diagnoses the open incident (the tick loop's ``StormMeter``)."""

    def begin(self) -> None: ...

    def diagnose(self, signals: Sequence[str]) -> StormDiagnosis: ...


@dataclass(frozen=True, slots=True)
class StormStart:
    """The storm breaker, active this tick: the nodes that started alerting in its window,
    the newest start among them and the leading signal of this tick's new alerts."""

    nodes: frozenset[str]
    last_start: float
    leading: str | None


@dataclass(frozen=True, slots=True)
class ClusterIncident:
    """One cluster incident: ``start`` (it opened) to ``end`` (the last tick something moved
    together), every signal that moved cluster-wide (sorted), the most nodes that moved
    together, ``severity`` (critical: the storm breaker held node alerts during it), whether it
    was notified, and its bottleneck (final once ``closed``, else so far)."""

    id: str
    start: float
    end: float
    signals: tuple[str, ...]
    nodes: int
    severity: str
    notified: bool
    closed: bool
    diagnosis: StormDiagnosis


@dataclass(slots=True)
class _Open:
    id: str
    start: float
    last_moved: float
    signals: dict[str, None] = field(default_factory=dict)  # in the order they moved
    nodes: int = 0
    nodes_total: int = 0
    storm_nodes: set[str] = field(default_factory=set)
    labels: Labels | None = None
    last_sent: float = -math.inf
    counted: set[str] = field(default_factory=set)
    diagnosis: StormDiagnosis | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "start": self.start,
            "last_moved": self.last_moved,
            "signals": list(self.signals),
            "nodes": self.nodes,
            "nodes_total": self.nodes_total,
            "storm_nodes": sorted(self.storm_nodes),
            "labels": pairs(self.labels),
            "last_sent": self.last_sent,
            "counted": sorted(self.counted),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> _Open:
        return cls(
            id=str(d["id"]),
            start=float(d["start"]),
            last_moved=float(d["last_moved"]),
            signals=dict.fromkeys(str(s) for s in d["signals"]),
            nodes=int(d["nodes"]),
            nodes_total=int(d["nodes_total"]),
            storm_nodes={str(n) for n in d["storm_nodes"]},
            labels=labels_of(d["labels"]),
            last_sent=float(d["last_sent"]),
            counted={str(c) for c in d["counted"]},
        )


def incident_id(start: float) -> str:
    """The ``incident`` label of an incident that opened at ``start`` (UTC, to the second)."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(start))


def describe_bottleneck(d: StormDiagnosis) -> str:
    """One sentence: the bottleneck, why, and the NFS figures (medians over the nodes)."""
    f = d.figures
    text = f"Bottleneck: {d.bottleneck} ({d.reason})."
    if math.isfinite(f.get("rtt_ms_per_op", math.nan)):
        text += (
            f" NFS per operation over {f['nodes']:.0f} nodes: round trip "
            f"{f['rtt_ms_per_op']:.1f} ms (before {f['rtt_ms_per_op_before']:.1f}), queued "
            f"{f['queue_ms_per_op']:.1f} ms (before {f['queue_ms_per_op_before']:.1f}), "
            f"{f['backlog_per_rpc']:.1%} of RPCs backlogged"
        )
        share = f["link_share"]
        text += f", links {share:.1%} used." if math.isfinite(share) else "."
    return text


class IncidentTracker:
    """See the module docstring. Owned by ``AlertPolicy``."""

    def __init__(
        self,
        *,
        window_s: float,
        resend_interval_s: float,
        storm_fraction: float,
        cluster: str | None = None,
        runbook_url: str | None = None,
        shadow: bool = False,
        suppress_signals: Collection[str] = frozenset(),
    ) -> None:
        self.window_s = window_s
        self.resend_interval_s = resend_interval_s
        self.storm_fraction = storm_fraction
        self.cluster = cluster
        self.runbook_url = runbook_url
        self.shadow = shadow
        self.suppress_signals = frozenset(suppress_signals)
        self.closed: list[ClusterIncident] = []  # closed by the last update
        self._open: _Open | None = None

    @property
    def severity(self) -> str | None:
        """The open incident's severity as notified; None when none is open and notified."""
        inc = self._open
        return None if inc is None or inc.labels is None else dict(inc.labels)["severity"]

    def update(
        self,
        now: float,
        n_nodes: int,
        moving: Sequence[Incident],
        storm: StormStart | None,
        count: Callable[[str], None],
        bottleneck: Bottleneck | None = None,
    ) -> list[Notification]:
        """This tick's notifications for the cluster incident: close it after a quiet
        ``window_s``, open or extend it with what moves together now, (re)send it."""
        out: list[Notification] = []
        self.closed = []
        inc = self._open
        if inc is not None and now - inc.last_moved > self.window_s:
            self._close(inc, now, bottleneck, out)
            inc = None
        if inc is None:
            if not moving and storm is None:
                return out
            inc = self._open = _Open(incident_id(now), now, -math.inf)
            if bottleneck is not None:
                bottleneck.begin()
        if moving:
            inc.last_moved = now
            inc.signals.update(dict.fromkeys(i.signal for i in moving))
            affected = max(moving, key=lambda i: i.nodes_affected)
            if affected.nodes_affected >= inc.nodes:
                inc.nodes, inc.nodes_total = affected.nodes_affected, affected.nodes_total
        if storm is not None:
            inc.last_moved = max(inc.last_moved, storm.last_start)
            inc.storm_nodes |= storm.nodes
        shown = [s for s in inc.signals if s not in self.suppress_signals]
        if not shown and not inc.storm_nodes:
            count_once(inc.counted, "signal", count)
            return out
        severity = "critical" if inc.storm_nodes else "warning"
        if inc.labels is None:
            if self.shadow:
                count_once(inc.counted, "shadow", count)
        elif dict(inc.labels)["severity"] != severity:
            out.append(Notification(inc.labels, (), inc.start, now))  # escalated: replaced
        elif now - inc.last_sent < self.resend_interval_s:
            return out
        if inc.labels is None or dict(inc.labels)["severity"] != severity:
            leading = storm.leading if storm is not None else None
            kind = dict(inc.labels)["signal"] if inc.labels else (shown or [leading or "storm"])[0]
            inc.labels = make_labels(
                alertname=INCIDENT_ALERT,
                severity=severity,
                cluster=self.cluster,
                incident=inc.id,
                signal=kind,
            )
        inc.last_sent = now
        inc.diagnosis = self._diagnose(inc, bottleneck)
        note = self._annotations(inc, shown, n_nodes)
        out.append(Notification(inc.labels, note, inc.start, None))
        return out

    def current(self, bottleneck: Bottleneck | None = None) -> ClusterIncident | None:
        """The open incident, its bottleneck as last notified (diagnosed now with
        ``bottleneck``); None when none is open."""
        inc = self._open
        if inc is None:
            return None
        if bottleneck is not None:
            inc.diagnosis = self._diagnose(inc, bottleneck)
        return self._record(inc, closed=False)

    def _close(
        self, inc: _Open, now: float, bottleneck: Bottleneck | None, out: list[Notification]
    ) -> None:
        if inc.labels is not None:
            out.append(Notification(inc.labels, (), inc.start, now))
        inc.diagnosis = self._diagnose(inc, bottleneck)
        self.closed.append(self._record(inc, closed=True))
        self._open = None

    def _diagnose(self, inc: _Open, bottleneck: Bottleneck | None) -> StormDiagnosis:
        signals = sorted(inc.signals)
        if bottleneck is None:
            return storm_bottleneck(signals, (), ())
        return bottleneck.diagnose(signals)

    def _record(self, inc: _Open, *, closed: bool) -> ClusterIncident:
        diagnosis = inc.diagnosis or storm_bottleneck(sorted(inc.signals), (), ())
        return ClusterIncident(
            id=inc.id,
            start=inc.start,
            end=inc.last_moved,
            signals=tuple(sorted(inc.signals)),
            nodes=max(inc.nodes, len(inc.storm_nodes)),
            severity="critical" if inc.storm_nodes else "warning",
            notified=inc.labels is not None,
            closed=closed,
            diagnosis=diagnosis,
        )

    def _annotations(self, inc: _Open, shown: Sequence[str], n_nodes: int) -> Labels:
        summary, description = [], []
        if shown:
            summary.append(f"{inc.nodes} of {inc.nodes_total} nodes moved together on {shown[0]}")
            description.append(
                "A cluster-wide (common-mode) movement, reported once instead of per-node "
                "alerts: a shared cause such as storage or a job restart."
            )
        if inc.storm_nodes:
            summary.append(f"{len(inc.storm_nodes)} of {n_nodes} nodes started alerting together")
            nodes = ", ".join(sorted(inc.storm_nodes)[:20])
            description.append(
                f"More than {self.storm_fraction:.0%} of nodes started alerting within "
                f"{self.window_s:g}s; per-node alerts are held back. Nodes: {nodes}."
            )
        assert inc.diagnosis is not None
        description.append(describe_bottleneck(inc.diagnosis))
        return make_labels(
            summary="; ".join(summary),
            description=" ".join(description),
            signals=", ".join(shown),
            bottleneck=inc.diagnosis.bottleneck,
            runbook_url=self.runbook_url,
        )

    def state_dict(self) -> dict[str, Any] | None:
        """The open incident as JSON-able data (None: none open)."""
        return None if self._open is None else self._open.to_json()

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """Restore ``state_dict`` output (raises KeyError/TypeError/ValueError when
        malformed, leaving this tracker as it was)."""
        self._open = None if state is None else _Open.from_json(state)


def count_once(counted: set[str], reason: str, count: Callable[[str], None]) -> None:
    """Count ``reason`` once per alert or incident (``counted``: the reasons already counted)."""
    if reason not in counted:
        counted.add(reason)
        count(reason)
