"""Recovery analytics of a replay: where failures concentrate, what to do with the nodes that
keep failing, and how restarts fared (the report's ``recovery`` key and HTML section).

Pure functions of a replay's result and, given one, a job-attempts file (ingest/jobs.py).

**Concentration.** For exclusions (the nodes the action engine excluded or, dry-run, would
have), failures (failure XIDs) and alerts: the share of all of them on the ``k`` nodes with the
most, for k in ``TOP_K``, beside the share ``k`` nodes would hold if spread evenly. The
reference line is the study's: the top 3 of 63 nodes accounted for more than half of all node
exclusions (``STUDY_CONCENTRATION``).

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

**Retry chains** (with a job-attempts file): replay/retries.py.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..evaluation import AlertRow, Evaluation
from ..loop import Decision
from ..model import JobAttempt, XidEvent
from .retries import RetryAnalysis, retry_chains

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


class ReplayOutcome(Protocol):
    """What the analysis reads from a replay (``replay.ReplayResult`` has all of it; the HTML
    report imports this module and stays below the replay driver)."""

    @property
    def node_names(self) -> Sequence[str]: ...
    @property
    def failures(self) -> Sequence[XidEvent]: ...
    @property
    def evaluation(self) -> Evaluation: ...
    @property
    def actions(self) -> Sequence[Decision]: ...


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


@dataclass(frozen=True, slots=True)
class Recovery:
    """The whole analysis: the report's ``recovery`` key (``to_json``) and HTML section."""

    concentration: tuple[Concentration, ...]
    offenders: tuple[Offender, ...]
    retries: RetryAnalysis | None  # None without a job-attempts file

    def to_json(self) -> dict[str, Any]:
        return {
            "concentration": {c.what: c.to_json() for c in self.concentration},
            "concentration_reference": STUDY_CONCENTRATION,
            "repeat_offenders": [o.to_json() for o in self.offenders],
            "recommendation_rule": RULE,
            "retry_chains": self.retries.to_json() if self.retries is not None else None,
        }

    def lines(self) -> list[str]:
        """The terminal's account: a line on concentration and offenders, one on retries."""
        lines = []
        for c in self.concentration:
            share = c.top_share(3)
            if share is not None and c.what != "alerts":
                lines.append(
                    f"recovery: the top 3 of {c.nodes} nodes hold {100 * share:.0f}% of "
                    f"{c.total} {c.what} (study: top 3 of 63 > 50% of exclusions)"
                )
        if self.offenders:
            counted = Counter(o.recommendation for o in self.offenders)
            listed = ", ".join(f"{what} {n}" for what, n in sorted(counted.items()))
            n = len(self.offenders)
            lines.append(f"recovery: {n} repeat offender{'' if n == 1 else 's'} ({listed})")
        if self.retries is not None:
            rates = []
            for kind in ("automatic", "manual"):
                s = self.retries.by_kind[kind]
                rate = "–" if s.success_rate is None else f"{100 * s.success_rate:.1f}%"
                rates.append(f"{kind} {rate} of {s.succeeded + s.failed} finished")
            iv = self.retries.interval_s
            interval = (
                f"median retry interval {iv.median / 60:.0f} min "
                f"(IQR {iv.p25 / 60:.0f}-{iv.p75 / 60:.0f})"
                if iv.median is not None and iv.p25 is not None and iv.p75 is not None
                else "no retries"
            )
            lines.append(
                f"recovery: retry chains {', '.join(rates)}; {interval} "
                "(study: 33.3% vs 12.5%, 11 min, IQR 10-11)"
            )
        return lines


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


def recovery_analysis(result: ReplayOutcome, jobs: Sequence[JobAttempt] | None) -> Recovery:
    """The recovery analytics of a replay (module docstring); ``jobs``: its job attempts, or
    None without a job-attempts file."""
    nodes = len(result.node_names)
    kinds = []
    excluded = Counter(
        d.node for d in result.actions if d.action == "exclude" and d.refused is None
    )
    if excluded:
        kinds.append(concentration("exclusions", excluded, nodes))
    episodes = {node: len(found) for node, found in failure_episodes(result.failures).items()}
    kinds.append(concentration("failures", episodes, nodes))
    alerts = Counter(r.alert.node for r in result.evaluation.alerts)
    kinds.append(concentration("alerts", alerts, nodes))
    return Recovery(
        concentration=tuple(kinds),
        offenders=tuple(repeat_offenders(result.failures, result.evaluation.alerts)),
        retries=retry_chains(jobs, result.failures) if jobs is not None else None,
    )


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)
