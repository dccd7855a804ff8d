"""The recovery figures' rules, shared by the replay report (replay/recovery.py) and the live
loop (``RecoveryLog``, exported on /metrics): where failures and exclusions concentrate, and
what to do with the nodes that keep failing.

**Concentration.** For a kind of event (exclusions, failures, alerts): the share of all of
them on the ``k`` nodes with the most, for k in ``TOP_K``, beside the share ``k`` nodes would
hold if spread evenly. The reference line is the study's: the top 3 of 63 nodes accounted for
more than half of all node exclusions (``STUDY_CONCENTRATION``).

Failures are counted as episodes per node: a failure XID that starts before the node's previous
one ended (its ``end``, the repair; ``SAME_FAILURE_S`` after it when it has none) is the same
failure (a GSP error's 119 then 120 two minutes later is one failure, not two).

**Repeat offenders.** A node with at least 2 failures or at least 2 alerts. Its recommendation
(``RULE``), first that applies:

1. ``replace``: 2 or more failures: it failed again after a repair, the repair did not hold;
2. ``keep excluded``: 1 failure and an alert that started after it and matched no failure:
   still not healthy since;
3. ``inspect``: otherwise (alerts without failures, or one failure and nothing since): look at
   its usual leading signal before it is trusted with a job again.

**Live** (``RecoveryLog``): the tick loop keeps the alerts it notified, the failure XID
episodes and the exclusions it decided (the latest ``max_events`` of each, in its state), and
``figures(now)`` applies the same rules, the alerts matched by the matching rule
(``evaluate``) as they stand now: an alert whose failure has not come yet counts as
unmatched until it does.
"""

from __future__ import annotations

from collections import Counter, defaultdict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..model import Alert, XidEvent
from .matching import DEFAULT_GRACE_S, DEFAULT_HORIZON_S, AlertRow, evaluate

TOP_K = (1, 3, 5, 10)
SAME_FAILURE_S = 3600.0  # XIDs on a node this soon after a failure without an end are part of it
STUDY_TOP3_SHARE = 0.5  # the top 3 of 63 nodes held more than half of all exclusions
STUDY_CONCENTRATION: dict[str, Any] = {
    "k": 3,
    "nodes": 63,
    "share_above": STUDY_TOP3_SHARE,
    "text": "study: the top 3 of 63 nodes accounted for more than half of all node exclusions",
}
RULE = (
    "replace: 2 or more failures; keep excluded: 1 failure and an unmatched alert after it; "
    "inspect: otherwise (a repeat offender has 2 or more failures or 2 or more alerts)"
)


@dataclass(frozen=True, slots=True)
class Concentration:
    """How one kind of event (exclusions, failures, alerts) spreads over the nodes."""

    what: str
    total: int
    nodes: int  # the cluster's nodes (the denominator of the even share)
    per_node: tuple[tuple[str, int], ...]  # nodes with any, most first (ties by name)

    def top_share(self, k: int) -> float | None:
        """The share of all events on the ``k`` nodes with the most (None: no events)."""
        if not self.total:
            return None
        return sum(n for _, n in self.per_node[:k]) / self.total

    def to_json(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "nodes": self.nodes,
            "nodes_with_any": len(self.per_node),
            "top": [
                {
                    "k": k,
                    "share": _round(self.top_share(k)),
                    "even_share": round(k / self.nodes, 4) if self.nodes else None,
                    "nodes": [node for node, _ in self.per_node[:k]],
                }
                for k in TOP_K
                if k <= max(self.nodes, 1)
            ],
        }


@dataclass(frozen=True, slots=True)
class Offender:
    """A repeat offender and what to do with it (``RULE``)."""

    node: str
    failures: int
    alerts: int
    false_positives: int
    xids: tuple[int, ...]
    leading_signal: str | None
    recommendation: str  # "replace" | "keep excluded" | "inspect"
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "failures": self.failures,
            "alerts": self.alerts,
            "false_positives": self.false_positives,
            "xids": list(self.xids),
            "leading_signal": self.leading_signal,
            "recommendation": self.recommendation,
            "reason": self.reason,
        }


def concentration(what: str, per_node: Mapping[str, int], nodes: int) -> Concentration:
    """``per_node`` counts as a ``Concentration`` over a cluster of ``nodes``."""
    ranked = sorted(((n, c) for n, c in per_node.items() if c > 0), key=lambda x: (-x[1], x[0]))
    return Concentration(what, sum(c for _, c in ranked), max(nodes, len(ranked)), tuple(ranked))


def failure_episodes(failures: Sequence[XidEvent]) -> dict[str, list[XidEvent]]:
    """Per node, its failures as episodes (module docstring): the first XID of each, by time."""
    by_node: dict[str, list[XidEvent]] = defaultdict(list)
    until: dict[str, float] = {}
    for event in sorted(failures, key=lambda e: e.time):
        if event.node in until and event.time <= until[event.node]:
            until[event.node] = max(until[event.node], _until(event))
            continue
        by_node[event.node].append(event)
        until[event.node] = _until(event)
    return dict(by_node)


def _until(event: XidEvent) -> float:
    return event.end if event.end is not None else event.time + SAME_FAILURE_S


def repeat_offenders(failures: Sequence[XidEvent], alerts: Sequence[AlertRow]) -> list[Offender]:
    """The nodes with 2 or more failures (episodes) or alerts, each with its recommendation
    (``RULE``); the most failures, then alerts, first."""
    by_node = failure_episodes(failures)
    rows: dict[str, list[AlertRow]] = defaultdict(list)
    for row in alerts:
        rows[row.alert.node].append(row)
    offenders = []
    for node in set(by_node) | set(rows):
        failed, alerted = by_node.get(node, []), rows.get(node, [])
        if len(failed) < 2 and len(alerted) < 2:
            continue
        fps = sum(not r.matched for r in alerted)
        leading = Counter(r.alert.signals[0] for r in alerted if r.alert.signals)
        signal = leading.most_common(1)[0][0] if leading else None
        if len(failed) >= 2:
            verdict = "replace"
            reason = f"failed {len(failed)} times: the repair did not hold"
        elif failed and any(not r.matched and r.alert.start > failed[0].time for r in alerted):
            verdict = "keep excluded"
            reason = "alerted again after its failure, matching no failure: not healthy since"
        else:
            verdict = "inspect"
            reason = (
                f"{len(alerted)} alerts ({fps} false positives), {len(failed)} failure"
                f"{'' if len(failed) == 1 else 's'}"
                + (f": check {signal} before trusting it with a job" if signal else "")
            )
        offenders.append(
            Offender(
                node,
                len(failed),
                len(alerted),
                fps,
                tuple(e.xid for e in failed),
                signal,
                verdict,
                reason,
            )
        )
    offenders.sort(key=lambda o: (-o.failures, -o.alerts, o.node))
    return offenders


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


@dataclass(frozen=True, slots=True)
class RecoveryFigures:
    """The live loop's recovery figures now: concentration of failures and exclusions (kinds
    with none left out) and the repeat offenders."""

    concentration: tuple[Concentration, ...]
    offenders: tuple[Offender, ...]


class RecoveryLog:
    """See the module docstring ("Live"). Pure: ``now`` is passed in."""

    def __init__(
        self,
        horizon_s: float = DEFAULT_HORIZON_S,
        grace_s: float = DEFAULT_GRACE_S,
        max_events: int = 10_000,
    ) -> None:
        self.horizon_s = horizon_s
        self.grace_s = grace_s
        self.since: float | None = None
        self.nodes = 0  # the most nodes a tick named (the even share's denominator)
        self._alerts: deque[Alert] = deque(maxlen=max_events)
        self._failures: deque[XidEvent] = deque(maxlen=max_events)
        self._exclusions: deque[tuple[float, str]] = deque(maxlen=max_events)

    def update(
        self,
        now: float,
        nodes: int,
        notified: Sequence[Alert] = (),
        failures: Sequence[XidEvent] = (),
        excluded: Sequence[str] = (),
    ) -> None:
        """One tick: how many nodes it named, the alerts notified for the first time, the
        failure XID episodes that began, the nodes the action engine excluded (or would
        have)."""
        if self.since is None:
            self.since = now
        self.nodes = max(self.nodes, nodes)
        self._alerts.extend(notified)
        self._failures.extend(failures)
        self._exclusions.extend((now, node) for node in excluded)

    def figures(self, now: float) -> RecoveryFigures:
        """The figures over what the log holds, judged at ``now``."""
        nodes = self.nodes
        kinds = []
        episodes = {node: len(found) for node, found in failure_episodes(self._failures).items()}
        if episodes:
            kinds.append(concentration("failures", episodes, nodes))
        excluded = Counter(node for _, node in self._exclusions)
        if excluded:
            kinds.append(concentration("exclusions", excluded, nodes))
        rows: Sequence[AlertRow] = ()
        if self._alerts and self.since is not None and now > self.since:
            rows = evaluate(
                list(self._alerts),
                list(self._failures),
                start=self.since,
                end=now,
                horizon_s=self.horizon_s,
                grace_s=self.grace_s,
            ).alerts
        return RecoveryFigures(tuple(kinds), tuple(repeat_offenders(self._failures, rows)))

    def state_dict(self) -> dict[str, Any]:
        """JSON-able: what the log holds."""
        return {
            "since": self.since,
            "nodes": self.nodes,
            "alerts": [
                [a.node, a.gpu, a.start, a.end, a.peak_score, list(a.signals)] for a in self._alerts
            ],
            "failures": [[e.time, e.node, e.gpu, e.xid, e.end] for e in self._failures],
            "exclusions": [list(x) for x in self._exclusions],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict`` output; KeyError, TypeError or ValueError when malformed,
        leaving the log as it was."""
        since = None if state["since"] is None else float(state["since"])
        nodes = int(state["nodes"])
        alerts = [
            Alert(str(n), _str(g), float(s), _float(e), float(p), tuple(str(x) for x in sig))
            for n, g, s, e, p, sig in state["alerts"]
        ]
        failures = [
            XidEvent(float(t), str(n), _str(g), int(x), end=_float(e))
            for t, n, g, x, e in state["failures"]
        ]
        exclusions = [(float(t), str(n)) for t, n in state["exclusions"]]
        self.since, self.nodes = since, nodes
        self._alerts.clear()
        self._alerts.extend(alerts)
        self._failures.clear()
        self._failures.extend(failures)
        self._exclusions.clear()
        self._exclusions.extend(exclusions)


def _str(value: object) -> str | None:
    return None if value is None else str(value)


def _float(value: Any) -> float | None:
    return None if value is None else float(value)
