"""Retry chains of a job-attempts file (ingest/jobs.py): how restarts after failures fared
(the ``retry_chains`` part of the report's ``recovery``, replay/recovery.py).

A chain is a job restarted at least once (2 or more attempts). It succeeded when its last
attempt exited 0, failed when the last attempt failed (it was given up), and is unfinished when
the last attempt still runs (left out of the rates). It is ``automatic`` when every restart was
automatic, ``manual`` when none was, ``mixed`` otherwise. The retry interval is from an
attempt's end to the next attempt's start. Time lost per failure: from the failure (the
earliest failure XID on one of the failed attempt's nodes during it; its end when no XID names
one) to the restart: the hang until the job was torn down plus the retry interval, in hours
and in node-hours (times the attempt's nodes); a failure never restarted is counted apart. A
chain that failed twice on the same node (by those XIDs) is a same-node refailure. The study's
figures (``STUDY_RETRY``): automatic chains succeeded 33.3% of the time over 12 chains and 73
attempts, manual restarts 12.5%; median retry interval 11 min, IQR 10-11.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..model import JobAttempt, XidEvent

STUDY_AUTOMATIC_SUCCESS = 0.333  # over 12 automatic chains and 73 attempts
STUDY_MANUAL_SUCCESS = 0.125

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

KINDS = ("automatic", "manual", "mixed")


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


def _failure_of(attempt: JobAttempt, failures: Sequence[XidEvent]) -> XidEvent | None:
    """The earliest failure XID on one of the attempt's nodes while it ran."""
    nodes = set(attempt.nodes)
    end = attempt.end if attempt.end is not None else float("inf")
    during = [e for e in failures if e.node in nodes and attempt.start <= e.time <= end]
    return min(during, key=lambda e: e.time) if during else None


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)
