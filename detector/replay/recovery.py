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

**Retry chains** (with a job-attempts file). A chain is a job restarted at least once (2 or more
attempts). It succeeded when its last attempt exited 0, failed when the last attempt failed (it
was given up), and is unfinished when the last attempt still runs (left out of the rates). It is
``automatic`` when every restart was automatic, ``manual`` when none was, ``mixed`` otherwise.
The retry interval is from an attempt's end to the next attempt's start. Time lost per failure:
from the failure (the earliest failure XID on one of the failed attempt's nodes during it; its
end when no XID names one) to the restart: the hang until the job was torn down plus the retry
interval, in hours and in node-hours (times the attempt's nodes); a failure never restarted is
counted apart. A chain that failed twice on the same node (by those XIDs) is a same-node
refailure. The study's figures (``STUDY_RETRY``): automatic chains succeeded 33.3% of the time
over 12 chains and 73 attempts, manual restarts 12.5%; median retry interval 11 min, IQR 10-11.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..evaluation import AlertRow, Evaluation
from ..loop import Decision
from ..model import JobAttempt, XidEvent

TOP_K = (1, 3, 5, 10)
SAME_FAILURE_S = 3600.0  # XIDs on a node this soon after a failure without an end are part of it
STUDY_TOP3_SHARE = 0.5  # the top 3 of 63 nodes held more than half of all exclusions
STUDY_AUTOMATIC_SUCCESS = 0.333  # over 12 automatic chains and 73 attempts
STUDY_MANUAL_SUCCESS = 0.125
STUDY_CONCENTRATION: dict[str, Any] = {
    "k": 3,
    "nodes": 63,
    "share_above": STUDY_TOP3_SHARE,
    "text": "study: the top 3 of 63 nodes accounted for more than half of all node exclusions",
}
STUDY_RETRY: dict[str, Any] = {
    "automatic_success_rate": STUDY_AUTOMATIC_SUCCESS,
    "automatic_chains": 12,
    "automatic_attempts": 73,
    "manual_success_rate": STUDY_MANUAL_SUCCESS,
    "retry_interval_median_s": 660.0,
    "retry_interval_iqr_s": [600.0, 660.0],
    "text": (
        "study: automatic chains 33.3% success over 12 chains and 73 attempts, manual 12.5%; "
        "median retry interval 11 min, IQR 10-11"
    ),
}
RULE = (
    "replace: 2 or more failures; keep excluded: 1 failure and an unmatched alert after it; "
    "inspect: otherwise (a repeat offender has 2 or more failures or 2 or more alerts)"
)
KINDS = ("automatic", "manual", "mixed")


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
class ChainStats:
    """The retry chains of one kind (automatic, manual, mixed)."""

    chains: int
    attempts: int
    succeeded: int
    failed: int
    unfinished: int

    @property
    def success_rate(self) -> float | None:
        finished = self.succeeded + self.failed
        return self.succeeded / finished if finished else None

    def to_json(self) -> dict[str, Any]:
        return {
            "chains": self.chains,
            "attempts": self.attempts,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "unfinished": self.unfinished,
            "success_rate": _round(self.success_rate),
        }


@dataclass(frozen=True, slots=True)
class Spread:
    """A distribution in seconds: count, median and quartiles (None when empty)."""

    count: int
    median: float | None
    p25: float | None
    p75: float | None
    total: float = 0.0

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        if not values:
            return cls(0, None, None, None)
        p25, median, p75 = (float(v) for v in np.percentile(values, [25, 50, 75]))
        return cls(len(values), median, p25, p75, float(sum(values)))

    def to_json(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "median": _round(self.median, 1),
            "p25": _round(self.p25, 1),
            "p75": _round(self.p75, 1),
            "total": round(self.total, 1),
        }


@dataclass(frozen=True, slots=True)
class RetryAnalysis:
    """The retry chains of a job-attempts file (module docstring)."""

    jobs: int
    attempts: int
    by_kind: Mapping[str, ChainStats]
    not_restarted: int  # jobs whose only attempt failed and that were never restarted
    interval_s: Spread  # every restart
    interval_by_kind_s: Mapping[str, Spread]  # "automatic" / "manual" restarts
    lost_s: Spread  # per restarted failure: failure -> restart
    lost_node_s: float  # the same, times the failed attempt's nodes
    unrestarted_failures: int
    same_node: tuple[tuple[str, str], ...]  # (job, node) failing twice in one chain

    def to_json(self) -> dict[str, Any]:
        return {
            "jobs": self.jobs,
            "attempts": self.attempts,
            "chains": {kind: stats.to_json() for kind, stats in self.by_kind.items()},
            "not_restarted": self.not_restarted,
            "retry_interval_s": {
                "all": self.interval_s.to_json(),
                **{kind: s.to_json() for kind, s in self.interval_by_kind_s.items()},
            },
            "time_lost_per_failure_s": self.lost_s.to_json(),
            "time_lost_node_hours": round(self.lost_node_s / 3600, 2),
            "failures_not_restarted": self.unrestarted_failures,
            "same_node_refailures": [{"job": j, "node": n} for j, n in self.same_node],
            "reference": STUDY_RETRY,
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


def retry_chains(attempts: Sequence[JobAttempt], failures: Sequence[XidEvent]) -> RetryAnalysis:
    """The retry-chain analysis of ``attempts`` (module docstring); ``failures`` (failure XIDs)
    date each failed attempt's failure and name its node."""
    jobs: dict[str, list[JobAttempt]] = defaultdict(list)
    for a in attempts:
        jobs[a.job].append(a)
    counts = {kind: [0, 0, 0, 0, 0] for kind in KINDS}  # chains attempts succeeded failed open
    not_restarted = unrestarted = 0
    intervals: list[float] = []
    by_kind: dict[str, list[float]] = {"automatic": [], "manual": []}
    lost: list[float] = []
    lost_node_s = 0.0
    same_node: list[tuple[str, str]] = []
    for job, chain in sorted(jobs.items()):
        chain.sort(key=lambda a: a.attempt)
        culprits: list[str] = []
        for a, restart in zip(chain, [*chain[1:], None], strict=True):
            if a.failed:
                failure = _failure_of(a, failures)
                if failure is not None:
                    culprits.append(failure.node)
                if restart is None:
                    unrestarted += 1
                else:
                    at = failure.time if failure is not None else a.end
                    assert at is not None  # a failed attempt has ended (ingest/jobs.py)
                    lost.append(max(0.0, restart.start - at))
                    lost_node_s += lost[-1] * len(a.nodes)
            if restart is not None and a.end is not None:
                gap = max(0.0, restart.start - a.end)
                intervals.append(gap)
                by_kind["automatic" if restart.automatic else "manual"].append(gap)
        repeated = sorted({n for n, c in Counter(culprits).items() if c >= 2})
        same_node.extend((job, node) for node in repeated)
        if len(chain) < 2:
            not_restarted += chain[0].failed
            continue
        restarts = [a.automatic for a in chain[1:]]
        kind = "automatic" if all(restarts) else "manual" if not any(restarts) else "mixed"
        last = chain[-1]
        outcome = 4 if last.exit_status is None else 3 if last.failed else 2
        counts[kind][0] += 1
        counts[kind][1] += len(chain)
        counts[kind][outcome] += 1
    return RetryAnalysis(
        jobs=len(jobs),
        attempts=len(attempts),
        by_kind={kind: ChainStats(*c) for kind, c in counts.items()},
        not_restarted=not_restarted,
        interval_s=Spread.of(intervals),
        interval_by_kind_s={kind: Spread.of(v) for kind, v in by_kind.items()},
        lost_s=Spread.of(lost),
        lost_node_s=lost_node_s,
        unrestarted_failures=unrestarted,
        same_node=tuple(same_node),
    )


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


def _failure_of(attempt: JobAttempt, failures: Sequence[XidEvent]) -> XidEvent | None:
    """The earliest failure XID on one of the attempt's nodes while it ran."""
    nodes = set(attempt.nodes)
    end = attempt.end if attempt.end is not None else float("inf")
    during = [e for e in failures if e.node in nodes and attempt.start <= e.time <= end]
    return min(during, key=lambda e: e.time) if during else None


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)
