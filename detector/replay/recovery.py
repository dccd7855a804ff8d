"""Recovery analytics of a replay: where failures concentrate, what to do with the nodes that
keep failing, and how restarts fared (the report's ``recovery`` key and HTML section).

Pure functions of a replay's result and, given one, a job-attempts file (ingest/jobs.py).

**Concentration** (exclusions: the nodes the action engine excluded or, dry-run, would have;
failures: failure XID episodes; alerts) and **repeat offenders** with their recommendation:
the rules are ``detector.evaluation``'s (evaluation/recovery.py), which the live loop's
/metrics apply too.

**Retry chains** (with a job-attempts file): replay/retries.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..evaluation import (
    RULE,
    STUDY_CONCENTRATION,
    Concentration,
    Evaluation,
    Offender,
    concentration,
    failure_episodes,
    repeat_offenders,
)
from ..loop import Decision
from ..model import JobAttempt, XidEvent
from .retries import RetryAnalysis, retry_chains

__all__ = ["Recovery", "ReplayOutcome", "recovery_analysis"]


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
