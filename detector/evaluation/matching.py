"""Matching alerts to known failures: recall, precision, lead time, false positives per day.

The rule (ARCHITECTURE.md, "Matching"): an alert on node N matches a failure on N when the
alert *starts* in ``[time - horizon_s, (end or time) + grace_s]``, both ends included. A GPU
alert matches a failure on the same node whatever its GPU (XIDs are often attributed to the
wrong device, and a node-level action is what operators take); whether some matching alert was
on the failure's own GPU is reported as ``gpu_matched``.

- A failure is *detected* when at least one alert matches it; *detected before failure* when
  the earliest matching alert starts strictly before ``time``. ``lead_time_s`` is ``time`` minus
  that start (negative when the alert came after the XID, within the grace).
- An alert matching no failure is a false positive; ``fp_per_day`` divides them by the days
  the caller says were covered (the replayed span ``end - start``). One that the same rule
  would match to an event ``is_failure`` rejects (an application fault such as XID 13 or 43,
  which rules/xid.yaml does not count) stays a false positive, and is reported with that XID
  (``AlertRow.other_xid``, ``Summary.false_positives_at_other_xids``): the GPU it flagged
  went on to lose its application, which an operator may well want to know.
- ``recall`` is detected / failures and ``precision`` matched alerts / alerts; either is
  ``None`` (JSON ``null``) when its denominator is zero, never a made-up 0 or 1. The lead-time
  quartiles are over detected failures and ``None`` when nothing was detected.
- Each failure counts once; one alert may match several failures (XID episode dedup happens
  upstream). Failure rows are sorted by (time, node), alert rows by (start, node).
- A failure whose window ``[time - horizon_s, (end or time) + grace_s]`` misses the covered
  span entirely could be matched by no alert of this data: it is not evaluated (not a missed
  failure, not a row), only counted as ``out_of_span`` (an events file that covers more than
  the dump must not charge the detector for telemetry it never saw).

Cost: alerts and failures are grouped per node and matched with sorted arrays and
``searchsorted``, O((A + F) log A); no alert x failure Python loop.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..config import EvaluationConfig
from ..model import Alert, FloatArray, XidEvent

# The matching window's defaults are the config schema's (written once, there).
DEFAULT_HORIZON_S = EvaluationConfig().horizon_s
DEFAULT_GRACE_S = EvaluationConfig().grace_s
SECONDS_PER_DAY = 86400.0


@dataclass(frozen=True, slots=True)
class LeadTimes:
    """Quartiles of lead time (seconds) over detected failures; None when none was detected."""

    p25: float | None
    median: float | None
    p75: float | None


@dataclass(frozen=True, slots=True)
class Summary:
    """The headline numbers of one evaluation (the report's ``summary``)."""

    failures: int
    detected: int
    detected_before_failure: int
    recall: float | None
    precision: float | None
    false_positives: int
    fp_per_day: float
    days: float
    lead_time_s: LeadTimes
    share_before: float | None  # detected_before_failure / failures
    out_of_span: int = 0  # failures no alert in the covered span could match: not evaluated
    false_positives_at_other_xids: int = 0  # of false_positives: at an XID not a failure


@dataclass(frozen=True, slots=True)
class FailureRow:
    """One failure and how it was caught."""

    event: XidEvent
    detected: bool
    lead_time_s: float | None  # time - earliest matching alert start
    gpu_matched: bool | None  # None when the failure names no GPU or was not detected
    first_alert: Alert | None  # the earliest matching alert


@dataclass(frozen=True, slots=True)
class AlertRow:
    """One alert and whether it matched any failure."""

    alert: Alert
    matched: bool
    other_xid: int | None = None  # unmatched, but at this XID, which is not a failure


@dataclass(frozen=True, slots=True)
class Evaluation:
    """Everything ``evaluate`` found; ``to_json`` gives the report in the contract shape."""

    summary: Summary
    failures: tuple[FailureRow, ...]
    alerts: tuple[AlertRow, ...]
    # XID code -> signal -> times it was among the top signals of the earliest matching alert.
    signals_first: Mapping[int, Mapping[str, int]]

    def signal_hits(self) -> dict[str, tuple[int, int]]:
        """Per signal: (times it led a matched alert, times it led an unmatched alert).

        "Led" means first in ``Alert.signals`` (the strongest contributor at the peak). This is
        the input of ``calibration.fit_signal_weights``.
        """
        hits: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for row in self.alerts:
            if row.alert.signals:
                hits[row.alert.signals[0]][0 if row.matched else 1] += 1
        return {signal: (tp, fp) for signal, (tp, fp) in sorted(hits.items())}

    def other_xids(self) -> dict[int, int]:
        """XID code -> false positives at it (``AlertRow.other_xid``), by code."""
        counts = Counter(row.other_xid for row in self.alerts if row.other_xid is not None)
        return dict(sorted(counts.items()))

    def to_json(self) -> dict[str, Any]:
        """The ``--report-json`` document (ARCHITECTURE.md contract, plus additive fields).

        Additive to the contract: ``summary.share_before``, ``summary.failures_out_of_span``
        (failures no alert of the covered span could match: not evaluated),
        ``summary.false_positives_at_other_xids`` and ``alerts[].other_xid`` (module doc),
        ``failures[].gpu_matched`` and the top-level ``signals_first`` table
        ``{"<xid>": {"detected": n, "signals": {name: n}}}``.
        """
        s = self.summary
        detected_by_xid = Counter(row.event.xid for row in self.failures if row.detected)
        return {
            "summary": {
                "failures": s.failures,
                "detected": s.detected,
                "detected_before_failure": s.detected_before_failure,
                "recall": s.recall,
                "precision": s.precision,
                "false_positives": s.false_positives,
                "fp_per_day": s.fp_per_day,
                "days": s.days,
                "failures_out_of_span": s.out_of_span,
                "false_positives_at_other_xids": s.false_positives_at_other_xids,
                "lead_time_s": {
                    "p25": s.lead_time_s.p25,
                    "median": s.lead_time_s.median,
                    "p75": s.lead_time_s.p75,
                },
                "share_before": s.share_before,
            },
            "failures": [
                {
                    "time": row.event.time,
                    "node": row.event.node,
                    "gpu": row.event.gpu,
                    "xid": row.event.xid,
                    "detected": row.detected,
                    "lead_time_s": row.lead_time_s,
                    "gpu_matched": row.gpu_matched,
                }
                for row in self.failures
            ],
            "alerts": [
                {
                    "node": row.alert.node,
                    "gpu": row.alert.gpu,
                    "start": row.alert.start,
                    "end": row.alert.end,
                    "peak_score": row.alert.peak_score,
                    "signals": list(row.alert.signals),
                    "matched": row.matched,
                    "other_xid": row.other_xid,
                }
                for row in self.alerts
            ],
            "signals_first": {
                str(xid): {
                    "detected": detected_by_xid[xid],
                    "signals": dict(counts),
                }
                for xid, counts in self.signals_first.items()
            },
        }


def _group(keys: Sequence[Hashable]) -> dict[Hashable, list[int]]:
    groups: dict[Hashable, list[int]] = defaultdict(list)
    for index, key in enumerate(keys):
        groups[key].append(index)
    return groups


class _SortedStarts:
    """Alert starts of one group (a node, or a node and GPU), sorted, with original indices."""

    def __init__(self, starts: FloatArray, indices: list[int]) -> None:
        order = np.argsort(starts[indices], kind="stable")
        self.indices = np.asarray(indices, dtype=np.int64)[order]
        self.starts = starts[self.indices]

    def window(self, lo: FloatArray, hi: FloatArray) -> tuple[np.ndarray, np.ndarray]:
        """Positions [first, stop) of starts within each closed window [lo, hi]."""
        first = np.searchsorted(self.starts, lo, side="left")
        stop = np.searchsorted(self.starts, hi, side="right")
        return first, stop


def _quartiles(values: list[float]) -> LeadTimes:
    if not values:
        return LeadTimes(None, None, None)
    p25, median, p75 = np.percentile(np.asarray(values, dtype=np.float64), [25.0, 50.0, 75.0])
    return LeadTimes(float(p25), float(median), float(p75))


def evaluate(
    alerts: Sequence[Alert],
    failures: Sequence[XidEvent],
    *,
    start: float,
    end: float,
    horizon_s: float = DEFAULT_HORIZON_S,
    grace_s: float = DEFAULT_GRACE_S,
    is_failure: Callable[[XidEvent], bool] | None = None,
) -> Evaluation:
    """Match ``alerts`` to ``failures`` over the covered span ``[start, end]`` (module doc).

    ``is_failure`` filters ``failures`` first (e.g. by the XID catalog); by default every event
    passed is a failure. The events it rejects are only named beside the false positives at
    them. Raises ValueError when the span is empty or a window is negative.
    """
    if not end > start:
        raise ValueError(f"covered span must be positive: start={start} end={end}")
    if horizon_s < 0 or grace_s < 0:
        raise ValueError(f"horizon_s and grace_s must be >= 0, got {horizon_s}, {grace_s}")
    events: list[XidEvent] = []
    others: list[XidEvent] = []  # rejected: only named beside false positives
    for f in failures:
        (events if is_failure is None or is_failure(f) else others).append(f)
    events.sort(key=lambda f: (f.time, f.node))
    in_span = [_window(f, horizon_s, grace_s) for f in events]
    out_of_span = sum(1 for lo, hi in in_span if lo > end or hi < start)
    events = [f for f, (lo, hi) in zip(events, in_span, strict=True) if lo <= end and hi >= start]
    ordered_alerts = sorted(alerts, key=lambda a: (a.start, a.node))
    starts = np.fromiter((a.start for a in ordered_alerts), np.float64, len(ordered_alerts))
    event_times = np.fromiter((f.time for f in events), np.float64, len(events))
    # The window closes at (end or time) + grace; an end before time cannot shrink it.
    event_ends = np.fromiter(
        (f.time if f.end is None else max(f.end, f.time) for f in events), np.float64, len(events)
    )
    window_lo = event_times - horizon_s
    window_hi = event_ends + grace_s

    matched = np.zeros(len(ordered_alerts), dtype=bool)
    first_alert = np.full(len(events), -1, dtype=np.int64)  # index into ordered_alerts
    alerts_by_node = _group([a.node for a in ordered_alerts])
    for node, event_idx in _group([f.node for f in events]).items():
        if node not in alerts_by_node:
            continue
        group = _SortedStarts(starts, alerts_by_node[node])
        fidx = np.asarray(event_idx, dtype=np.int64)
        first, stop = group.window(window_lo[fidx], window_hi[fidx])
        hit = stop > first
        first_alert[fidx[hit]] = group.indices[first[hit]]
        # Mark every alert inside any window with a difference array: +1 at first, -1 at stop.
        cover = np.zeros(len(group.indices) + 1, dtype=np.int64)
        np.add.at(cover, first[hit], 1)
        np.add.at(cover, stop[hit], -1)
        matched[group.indices[np.cumsum(cover[:-1]) > 0]] = True

    gpu_matched = _gpu_matches(ordered_alerts, events, starts, window_lo, window_hi, first_alert)
    other_xid = _other_xids(ordered_alerts, starts, matched, others, horizon_s, grace_s)

    rows: list[FailureRow] = []
    lead_times: list[float] = []
    signals_first: dict[int, Counter[str]] = defaultdict(Counter)
    for i, event in enumerate(events):
        if first_alert[i] < 0:
            rows.append(FailureRow(event, False, None, None, None))
            continue
        alert = ordered_alerts[int(first_alert[i])]
        lead = event.time - alert.start
        lead_times.append(lead)
        signals_first[event.xid].update(alert.signals)
        rows.append(FailureRow(event, True, lead, gpu_matched[i], alert))

    detected = len(lead_times)
    before = sum(1 for lead in lead_times if lead > 0)
    n_matched = int(matched.sum())
    false_positives = len(ordered_alerts) - n_matched
    days = (end - start) / SECONDS_PER_DAY
    summary = Summary(
        failures=len(events),
        detected=detected,
        detected_before_failure=before,
        recall=detected / len(events) if events else None,
        precision=n_matched / len(ordered_alerts) if ordered_alerts else None,
        false_positives=false_positives,
        fp_per_day=false_positives / days,
        days=days,
        lead_time_s=_quartiles(lead_times),
        share_before=before / len(events) if events else None,
        out_of_span=out_of_span,
        false_positives_at_other_xids=sum(x is not None for x in other_xid),
    )
    return Evaluation(
        summary=summary,
        failures=tuple(rows),
        alerts=tuple(
            AlertRow(a, bool(m), x)
            for a, m, x in zip(ordered_alerts, matched, other_xid, strict=True)
        ),
        signals_first={
            xid: dict(counts.most_common()) for xid, counts in sorted(signals_first.items())
        },
    )


def _window(failure: XidEvent, horizon_s: float, grace_s: float) -> tuple[float, float]:
    """When an alert may start to match ``failure``: ``[time - horizon, (end or time) + grace]``."""
    end = failure.time if failure.end is None else max(failure.end, failure.time)
    return failure.time - horizon_s, end + grace_s


def _gpu_matches(
    alerts: Sequence[Alert],
    events: Sequence[XidEvent],
    starts: FloatArray,
    window_lo: FloatArray,
    window_hi: FloatArray,
    first_alert: np.ndarray,
) -> list[bool | None]:
    """Per failure: did a matching alert sit on the failure's own GPU (None: no GPU/no match)."""
    result: list[bool | None] = [None] * len(events)
    by_gpu = _group([(a.node, a.gpu) for a in alerts])
    wanted = [i for i, f in enumerate(events) if f.gpu is not None and first_alert[i] >= 0]
    for key, event_idx in _group([(events[i].node, events[i].gpu) for i in wanted]).items():
        fidx = np.asarray([wanted[j] for j in event_idx], dtype=np.int64)
        if key not in by_gpu:
            for i in fidx:
                result[int(i)] = False
            continue
        first, stop = _SortedStarts(starts, by_gpu[key]).window(window_lo[fidx], window_hi[fidx])
        for i, found in zip(fidx, stop > first, strict=True):
            result[int(i)] = bool(found)
    return result


def _other_xids(
    alerts: Sequence[Alert],
    starts: FloatArray,
    matched: np.ndarray,
    others: Sequence[XidEvent],
    horizon_s: float,
    grace_s: float,
) -> list[int | None]:
    """Per alert: the XID of the earliest of ``others`` whose window (the matching rule) holds
    the alert's start, for unmatched alerts; None otherwise."""
    result: list[int | None] = [None] * len(alerts)
    unmatched = _group([a.node if not m else None for a, m in zip(alerts, matched, strict=True)])
    for node, event_idx in _group([ev.node for ev in others]).items():
        if node not in unmatched:  # matched alerts are grouped under None, no node's name
            continue
        group = _SortedStarts(starts, unmatched[node])
        events = sorted((others[i] for i in event_idx), key=lambda e: e.time)
        lo, hi = np.array([_window(ev, horizon_s, grace_s) for ev in events]).T
        for ev, first, stop in zip(events, *group.window(lo, hi), strict=True):
            for k in group.indices[first:stop].tolist():
                result[k] = ev.xid if result[k] is None else result[k]
    return result


def describe_other_xids(evaluation: Evaluation) -> str:
    """One sentence on the false positives at an XID that is not a failure (``other_xid``),
    for the replay summary and the report; "" when none was."""
    counts = evaluation.other_xids()
    if not counts:
        return ""
    listed = ", ".join(f"XID {x}: {n}" for x, n in counts.items())
    return (
        f"false positives at an XID rules/xid.yaml does not count as a failure: "
        f"{sum(counts.values())} ({listed}); the GPU flagged went on to lose its application"
    )


def failure_sources(failures: Iterable[XidEvent]) -> list[tuple[str, int]]:
    """(source, failures) in name order: which input first reported each failure episode
    (events file, kernel log, the dump's gauge), so a user sees their events loaded."""
    return sorted(Counter(ev.source or "data" for ev in failures).items())
