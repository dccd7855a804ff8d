"""Live TP/FP accounting: alerts judged against failure XIDs as they arrive.

The matching rule is evaluation.py's (ARCHITECTURE.md "Matching"): an alert on node N matches
a failure on N when the alert starts in ``[time - horizon_s, (end or time) + grace_s]``. Live,
that becomes:

- when a failure arrives, every alert on its node that started at or after ``time - horizon``
  becomes a true positive; the failure is *detected*, ``before`` when the earliest matching
  alert started strictly before ``time`` (lead time = time - start, positive), else ``after``;
- when an alert starts, every failure on its node whose window is still open
  (``start <= (end or time) + grace``) makes it a true positive (and detects that failure if
  nothing had: ``before`` if it started before the XID time, else ``after``);
- an alert counts as a true positive the moment it first matches a failure, and as a
  *false positive* once ``horizon`` has passed after its start with no
  failure on its node; a failure is *missed* once ``(end or time) + grace`` has passed with no
  matching alert.
Failures are the caller's failure XIDs (filter with ``XidCatalog.is_failure``); each event
counts once (XID episode dedup happens upstream, as in replay). Decisions follow the event
times passed in, so the same sequence gives the same numbers live and in replay.

FP/day is rolling: false positives decided within the last ``fp_window_s`` (7 days) divided by
the days covered (that window, or less since accounting began). Pure: ``now`` is passed in.
``state_dict``/``load_state_dict`` are JSON-able so numbers survive restarts.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ..model import Alert, XidEvent
from .matching import DEFAULT_GRACE_S, DEFAULT_HORIZON_S

SECONDS_PER_DAY = 86400.0
STATE_VERSION = 1


@dataclass(slots=True)
class _Open:
    """An alert awaiting its verdict."""

    node: str
    start: float
    true_positive: bool = False


@dataclass(slots=True)
class _Failure:
    """A failure whose matching window is still open."""

    node: str
    time: float
    deadline: float  # (end or time) + grace
    detected: bool = False


@dataclass(frozen=True, slots=True)
class Detection:
    """One detected failure: lead time is XID time - earliest matching alert start."""

    node: str
    time: float
    lead_time_s: float


@dataclass(slots=True)
class AccountingSnapshot:
    """Counters since accounting began (restored across restarts) and the rolling FP rate."""

    alerts: int = 0
    true_positives: int = 0
    false_positives: int = 0
    failures: int = 0
    detected_before: int = 0
    detected_after: int = 0
    missed: int = 0
    fp_per_day: float = 0.0
    lead_times_s: list[float] = field(default_factory=list)  # per detection, oldest first


class LiveAccounting:
    """See the module docstring."""

    def __init__(
        self,
        horizon_s: float = DEFAULT_HORIZON_S,
        grace_s: float = DEFAULT_GRACE_S,
        fp_window_s: float = 7 * SECONDS_PER_DAY,
        max_lead_times: int = 10_000,
    ) -> None:
        self.horizon_s = horizon_s
        self.grace_s = grace_s
        self.fp_window_s = fp_window_s
        self.counts = AccountingSnapshot()
        self.since: float | None = None
        self._alerts: list[_Open] = []
        self._failures: list[_Failure] = []
        self._fp_times: deque[float] = deque()
        self._lead: deque[float] = deque(maxlen=max_lead_times)

    def update(
        self, now: float, started: Sequence[Alert] = (), failures: Sequence[XidEvent] = ()
    ) -> list[Detection]:
        """Account for this tick's new alerts and failure XIDs; returns new detections."""
        if self.since is None:
            self.since = now
        c = self.counts
        detections: list[Detection] = []
        for alert in started:
            c.alerts += 1
            entry = _Open(alert.node, alert.start)
            self._alerts.append(entry)
            for f in self._failures:
                if f.node == alert.node and f.time - self.horizon_s <= alert.start <= f.deadline:
                    self._true_positive(entry)
                    if not f.detected:
                        detections.append(self._detect(f, alert.start))
        for event in failures:
            c.failures += 1
            deadline = (event.end if event.end is not None else event.time) + self.grace_s
            f = _Failure(event.node, event.time, deadline)
            matches = [
                a
                for a in self._alerts
                if a.node == f.node and f.time - self.horizon_s <= a.start <= deadline
            ]
            for a in matches:
                self._true_positive(a)
            if matches:
                detections.append(self._detect(f, min(a.start for a in matches)))
            self._failures.append(f)
        self._expire(now)
        return detections

    def _true_positive(self, alert: _Open) -> None:
        if not alert.true_positive:
            alert.true_positive = True
            self.counts.true_positives += 1

    def _detect(self, failure: _Failure, first_start: float) -> Detection:
        failure.detected = True
        lead = failure.time - first_start
        if lead > 0:
            self.counts.detected_before += 1
        else:
            self.counts.detected_after += 1
        self._lead.append(lead)
        return Detection(failure.node, failure.time, lead)

    def _expire(self, now: float) -> None:
        c = self.counts
        keep: list[_Open] = []
        for a in self._alerts:
            if now - a.start <= self.horizon_s:
                keep.append(a)
            elif not a.true_positive:
                c.false_positives += 1
                self._fp_times.append(now)
        self._alerts = keep
        c.missed += sum(1 for f in self._failures if f.deadline < now and not f.detected)
        self._failures = [f for f in self._failures if f.deadline >= now]
        while self._fp_times and self._fp_times[0] < now - self.fp_window_s:
            self._fp_times.popleft()

    def snapshot(self, now: float) -> AccountingSnapshot:
        """The counters, with FP/day over the rolling window ending at ``now``."""
        self._expire(now)
        covered = min(self.fp_window_s, now - (self.since if self.since is not None else now))
        fp_per_day = len(self._fp_times) * SECONDS_PER_DAY / covered if covered > 0 else 0.0
        return replace(self.counts, fp_per_day=fp_per_day, lead_times_s=list(self._lead))

    def state_dict(self) -> dict[str, Any]:
        """JSON-able state: counters, pending alerts and failures, FP times, lead times."""
        c = self.counts
        return {
            "version": STATE_VERSION,
            "since": self.since,
            "counts": {k: getattr(c, k) for k in _COUNTERS},
            "alerts": [[a.node, a.start, a.true_positive] for a in self._alerts],
            "failures": [[f.node, f.time, f.deadline, f.detected] for f in self._failures],
            "fp_times": list(self._fp_times),
            "lead_times_s": list(self._lead),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict`` output; ValueError names what is wrong."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"accounting state version {state.get('version')!r} is not 1")
        try:
            counts = {k: int(state["counts"][k]) for k in _COUNTERS}
            alerts = [_Open(str(n), float(s), bool(tp)) for n, s, tp in state["alerts"]]
            failures = [
                _Failure(str(n), float(t), float(d), bool(det))
                for n, t, d, det in state["failures"]
            ]
            fp_times = [float(t) for t in state["fp_times"]]
            lead = [float(v) for v in state["lead_times_s"]]
            since = None if state["since"] is None else float(state["since"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"accounting state is malformed: {exc!r}") from None
        self.counts = AccountingSnapshot()
        for name, value in counts.items():
            setattr(self.counts, name, value)
        self.since = since
        self._alerts, self._failures = alerts, failures
        self._fp_times = deque(fp_times)
        self._lead = deque(lead, maxlen=self._lead.maxlen)


# The persisted counters: every snapshot field but the two computed by ``snapshot``.
_COUNTERS = tuple(
    f.name for f in fields(AccountingSnapshot) if f.name not in ("fp_per_day", "lead_times_s")
)
