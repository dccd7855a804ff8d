"""Matching alerts to failures: the ARCHITECTURE.md matching rule and report JSON contract."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detector.evaluation.matching import evaluate
from detector.model import Alert, XidEvent
from detector.sim import FAULT_TRACE

T = 1_700_000_000.0  # a failure time; every offset below is exact in float64
DAY = 86400.0
SPAN = {"start": T - DAY, "end": T + DAY}  # two days covered


def _alert(start: float, node: str = "n1", gpu: str | None = None, *signals: str) -> Alert:
    return Alert(node, gpu, start, start + 120.0, 0.9, signals or ("xid_edge",))


def _failure(time: float = T, node: str = "n1", gpu: str | None = None, **kw: object) -> XidEvent:
    return XidEvent(time, node, gpu, int(kw.get("xid", 79)), kw.get("end"))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("offset", "matches"),
    [
        (-3600.0, True),  # exactly time - horizon
        (-3601.0, False),  # one second earlier
        (0.0, True),
        (300.0, True),  # exactly time + grace (no end)
        (301.0, False),  # one second after time + grace
    ],
)
def test_window_edges_without_end(offset: float, matches: bool) -> None:
    """The window is [time - 3600, time + 300], both ends included, by default."""
    result = evaluate([_alert(T + offset)], [_failure()], **SPAN)
    assert result.failures[0].detected is matches
    assert result.alerts[0].matched is matches


@pytest.mark.parametrize(("offset", "matches"), [(1000.0 + 300.0, True), (1000.0 + 301.0, False)])
def test_window_closes_at_end_plus_grace(offset: float, matches: bool) -> None:
    """A failure with an end keeps matching until end + grace, not after."""
    result = evaluate([_alert(T + offset)], [_failure(end=T + 1000.0)], **SPAN)
    assert result.failures[0].detected is matches


def test_horizon_and_grace_are_configurable() -> None:
    """Custom horizon and grace move both edges of the window."""
    alerts = [
        _alert(T - 600.0),
        _alert(T - 601.0, "n2"),
        _alert(T + 60.0, "n3"),
        _alert(T + 61.0, "n4"),
    ]
    failures = [_failure(node=n) for n in ("n1", "n2", "n3", "n4")]
    result = evaluate(alerts, failures, horizon_s=600.0, grace_s=60.0, **SPAN)
    assert [row.detected for row in result.failures] == [True, False, True, False]


def test_alert_on_another_node_is_a_false_positive() -> None:
    """Matching is per node: an alert elsewhere neither detects nor matches."""
    result = evaluate([_alert(T - 60.0, node="n2")], [_failure(node="n1")], **SPAN)
    assert result.summary.detected == 0
    assert result.summary.false_positives == 1
    assert result.alerts[0].matched is False


def test_gpu_alert_matches_any_gpu_of_the_node_and_reports_which() -> None:
    """A GPU alert matches a failure on its node; gpu_matched says if it was the same GPU."""
    failures = [_failure(node="a", gpu="3"), _failure(node="b", gpu="3"), _failure(node="c")]
    alerts = [_alert(T - 10.0, "a", "5"), _alert(T - 10.0, "b", "5"), _alert(T - 5.0, "b", "3")]
    alerts.append(_alert(T - 10.0, "c", "1"))
    result = evaluate(alerts, failures, **SPAN)
    assert [row.detected for row in result.failures] == [True, True, True]
    assert [row.gpu_matched for row in result.failures] == [False, True, None]


def test_fp_per_day_divides_unmatched_alerts_by_days_covered() -> None:
    """Three unmatched alerts over a two-day span are 1.5 false positives per day."""
    alerts = [_alert(T - 60.0), _alert(T - 20_000.0), _alert(T + 5_000.0), _alert(T + 9_000.0)]
    summary = evaluate(alerts, [_failure()], **SPAN).summary
    assert (summary.false_positives, summary.days, summary.fp_per_day) == (3, 2.0, 1.5)
    assert summary.precision == 0.25


def test_lead_time_is_from_the_earliest_matching_alert() -> None:
    """lead_time_s = failure time - earliest matching alert start; later alerts do not count."""
    result = evaluate(
        [_alert(T - 50.0), _alert(T - 900.0), _alert(T + 100.0)], [_failure()], **SPAN
    )
    assert result.failures[0].lead_time_s == 900.0
    assert result.failures[0].first_alert == _alert(T - 900.0)
    assert result.summary.false_positives == 0


def test_alert_after_the_failure_detects_it_late_with_negative_lead() -> None:
    """An alert within the grace detects the failure, but not before it: lead time negative."""
    summary = evaluate([_alert(T + 120.0)], [_failure()], **SPAN).summary
    assert (summary.detected, summary.detected_before_failure) == (1, 0)
    assert summary.lead_time_s.median == -120.0
    assert summary.share_before == 0.0


def test_alert_at_the_failure_time_is_not_before_it() -> None:
    """Detected before failure needs the alert to start strictly before the failure time."""
    summary = evaluate([_alert(T)], [_failure()], **SPAN).summary
    assert (summary.detected, summary.detected_before_failure) == (1, 0)


def test_lead_time_quartiles_over_detected_failures() -> None:
    """p25/median/p75 are linear-interpolated quartiles of detected failures' lead times."""
    leads = [100.0, 200.0, 300.0, 400.0, 500.0]
    nodes = [f"n{i}" for i in range(len(leads))]
    alerts = [_alert(T - lead, node) for lead, node in zip(leads, nodes, strict=True)]
    failures = [_failure(node=node) for node in nodes] + [_failure(node="missed")]
    summary = evaluate(alerts, failures, **SPAN).summary
    lead = summary.lead_time_s
    assert (lead.p25, lead.median, lead.p75) == (200.0, 300.0, 400.0)
    assert (summary.failures, summary.detected, summary.detected_before_failure) == (6, 5, 5)
    assert summary.recall == pytest.approx(5 / 6)


def test_undefined_ratios_are_none_and_null_in_json() -> None:
    """With no failures recall and lead times are None; with no alerts precision is None."""
    no_failures = evaluate([_alert(T)], [], **SPAN)
    assert no_failures.summary.recall is None
    assert no_failures.summary.lead_time_s.median is None
    assert no_failures.summary.precision == 0.0
    no_alerts = evaluate([], [_failure()], **SPAN).to_json()
    assert no_alerts["summary"]["precision"] is None
    assert no_alerts["summary"]["recall"] == 0.0
    assert '"precision": null' in json.dumps(no_alerts, allow_nan=False)


def test_report_json_has_exactly_the_contract_keys() -> None:
    """to_json has the contract's keys (plus the documented additive ones) and is valid JSON."""
    report = evaluate([_alert(T - 60.0, "n1", "2", "temp", "power")], [_failure(gpu="2")], **SPAN)
    document = report.to_json()
    assert set(document) == {"summary", "failures", "alerts", "signals_first"}
    assert set(document["summary"]) == {
        "failures", "detected", "detected_before_failure", "recall", "precision",
        "false_positives", "fp_per_day", "days", "lead_time_s", "share_before",
        "failures_out_of_span", "false_positives_at_other_xids",
    }  # fmt: skip
    assert set(document["summary"]["lead_time_s"]) == {"p25", "median", "p75"}
    assert document["failures"] == [
        {"time": T, "node": "n1", "gpu": "2", "xid": 79, "detected": True,
         "lead_time_s": 60.0, "gpu_matched": True}
    ]  # fmt: skip
    assert document["alerts"] == [
        {"node": "n1", "gpu": "2", "start": T - 60.0, "end": T + 60.0, "peak_score": 0.9,
         "signals": ["temp", "power"], "matched": True, "other_xid": None}
    ]  # fmt: skip
    assert json.loads(json.dumps(document, allow_nan=False)) == document


def test_signals_first_counts_top_signals_per_xid() -> None:
    """signals_first tallies, per XID code, the top signals of each failure's earliest alert."""
    alerts = [
        _alert(T - 600.0, "a", None, "temp", "power"),
        _alert(T - 60.0, "a", None, "ignored_later_alert"),
        _alert(T - 300.0, "b", None, "temp"),
        _alert(T - 300.0, "c", None, "nvlink_errors"),
    ]
    failures = [_failure(node="a"), _failure(node="b"), _failure(node="c", xid=74)]
    result = evaluate(alerts, failures, **SPAN)
    assert result.signals_first == {74: {"nvlink_errors": 1}, 79: {"temp": 2, "power": 1}}
    assert result.to_json()["signals_first"]["79"] == {
        "detected": 2,
        "signals": {"temp": 2, "power": 1},
    }


def test_signal_hits_count_leading_signal_of_matched_and_unmatched_alerts() -> None:
    """signal_hits gives (led a matched alert, led an unmatched alert) per leading signal."""
    alerts = [_alert(T - 60.0, "a", None, "temp", "power"), _alert(T + 9_000.0, "a", None, "temp")]
    alerts.append(_alert(T + 9_000.0, "b", None, "power"))
    hits = evaluate(alerts, [_failure(node="a")], **SPAN).signal_hits()
    assert hits == {"power": (0, 1), "temp": (1, 1)}


def test_is_failure_filters_events() -> None:
    """Events rejected by is_failure are neither counted nor matched."""
    failures = [_failure(node="a", xid=79), _failure(node="b", xid=13)]
    result = evaluate(
        [_alert(T - 60.0, "b")], failures, is_failure=lambda event: event.xid == 79, **SPAN
    )
    assert (result.summary.failures, result.summary.false_positives) == (1, 1)


def test_empty_span_is_rejected() -> None:
    """A covered span of zero days cannot give FP/day; it is an error, not inf."""
    with pytest.raises(ValueError, match="span"):
        evaluate([], [], start=T, end=T)


def _brute_force(
    alerts: list[Alert], failures: list[XidEvent], horizon: float, grace: float
) -> tuple[list[bool], list[float | None], list[bool | None]]:
    """The matching rule written the obvious O(A*F) way; rows in the evaluator's sort order."""
    alerts = sorted(alerts, key=lambda a: (a.start, a.node))
    failures = sorted(failures, key=lambda f: (f.time, f.node))

    def window(f: XidEvent) -> list[Alert]:
        hi = max(f.end or f.time, f.time) + grace
        return [a for a in alerts if a.node == f.node and f.time - horizon <= a.start <= hi]

    windows = [window(f) for f in failures]
    inside = {id(a) for hits in windows for a in hits}
    matched = [id(a) in inside for a in alerts]
    leads: list[float | None] = []
    gpus: list[bool | None] = []
    for f, hits in zip(failures, windows, strict=True):
        leads.append(f.time - min(a.start for a in hits) if hits else None)
        gpus.append(None if not hits or f.gpu is None else any(a.gpu == f.gpu for a in hits))
    return matched, leads, gpus


def _check_against_brute_force(
    alerts: list[Alert], failures: list[XidEvent], horizon: float, grace: float
) -> None:
    times = [a.start for a in alerts] + [f.time for f in failures] + [0.0]
    # a span covering every alert and failure: each failure is evaluated (none out of span)
    result = evaluate(
        alerts, failures, start=min(times) - 1.0, end=max(times) + DAY, horizon_s=horizon,
        grace_s=grace,
    )  # fmt: skip
    assert 0 == result.summary.out_of_span
    matched, leads, gpus = _brute_force(alerts, failures, horizon, grace)
    assert [row.matched for row in result.alerts] == matched
    assert [row.lead_time_s for row in result.failures] == leads
    assert [row.gpu_matched for row in result.failures] == gpus


_times = st.integers(min_value=0, max_value=40).map(lambda k: 1000.0 + 300.0 * k)
_nodes = st.sampled_from(["a", "b", "c"])
_gpus = st.sampled_from([None, "0", "1"])


@settings(max_examples=200, deadline=None)
@given(
    alerts=st.lists(st.builds(_alert, _times, _nodes, _gpus), max_size=25),
    failures=st.lists(
        st.builds(
            XidEvent,
            time=_times,
            node=_nodes,
            gpu=_gpus,
            xid=st.sampled_from([48, 79]),
            end=st.one_of(st.none(), _times),
        ),
        max_size=12,
    ),
    horizon=st.sampled_from([0.0, 300.0, 3600.0]),
    grace=st.sampled_from([0.0, 300.0]),
)
def test_matches_brute_force_on_random_cases(
    alerts: list[Alert], failures: list[XidEvent], horizon: float, grace: float
) -> None:
    """The sorted/bisect matcher agrees with the O(A*F) rule, including window edges."""
    _check_against_brute_force(alerts, failures, horizon, grace)


def _trace_failures() -> list[XidEvent]:
    """InfiniteHBD fault trace -> XidEvents: days to seconds, start/end paired per node."""
    trace = json.loads(FAULT_TRACE.read_text())
    open_faults: dict[str, float] = {}
    failures: list[XidEvent] = []
    for record in sorted(trace, key=lambda r: r["event_time"]):
        node, t = record["node_id"], 1.6e9 + record["event_time"] * DAY
        if record["event_type"] == "fault_start":
            open_faults[node] = t
        elif node in open_faults:
            failures.append(XidEvent(open_faults.pop(node), node, None, 79, end=t))
    return failures + [XidEvent(t, node, None, 79) for node, t in open_faults.items()]


def test_matches_brute_force_on_the_real_fault_trace() -> None:
    """On the real 584-fault InfiniteHBD trace with seeded alerts, results equal brute force."""
    failures = _trace_failures()
    assert len(failures) > 500
    rng = random.Random(7)
    nodes = sorted({f.node for f in failures})
    alerts = [
        _alert(f.time - rng.uniform(-600.0, 5000.0), f.node) for f in rng.sample(failures, 300)
    ]
    alerts += [_alert(1.6e9 + rng.uniform(0, 348 * DAY), rng.choice(nodes)) for _ in range(400)]
    _check_against_brute_force(alerts, failures, 3600.0, 300.0)


def test_failures_no_alert_of_the_span_could_match_are_not_evaluated() -> None:
    """A failure whose window misses the covered span (events covering more than the dump) is
    no row and no miss, only counted; one just past the end, whose window reaches back into
    the span, is evaluated and caught by an alert before the end; so is one before the start
    whose end (+ grace) reaches into it."""
    start, end = SPAN["start"], SPAN["end"]
    failures = [
        _failure(end + 3 * 3600.0),  # window opens 2 h after the end
        _failure(start - DAY, end=start - 600.0),  # window closed 5 min before the start
        _failure(end + 1800.0, node="n2"),  # window opens 30 min before the end
        _failure(start - 3600.0, node="n3", end=start + 60.0),  # ends inside the span
    ]
    alerts = [_alert(end - 600.0, node="n2"), _alert(start + 30.0, node="n3")]
    ev = evaluate(alerts, failures, **SPAN)
    assert 2 == ev.summary.out_of_span
    assert 2 == ev.summary.failures
    assert [("n3", True), ("n2", True)] == [(r.event.node, r.detected) for r in ev.failures]
    assert 1.0 == ev.summary.recall
    assert 0 == ev.summary.false_positives
    assert 2 == ev.to_json()["summary"]["failures_out_of_span"]


def test_a_false_positive_at_an_xid_that_is_not_a_failure_stays_one_and_names_it() -> None:
    """An unmatched alert that the matching rule would match to an application fault (XID 43,
    which is_failure rejects) is still a false positive, reported with that XID; an alert on
    another node, one outside the window and one matched to a real failure are not."""
    app_fault = _failure(T, "n1", "3", xid=43)
    events = [_failure(T + 2 * DAY / 3, "n3"), app_fault]
    alerts = [
        _alert(T - 600.0, "n1"),  # 10 min before the XID 43: at it
        _alert(T - 600.0, "n2"),  # another node
        _alert(T - 3601.0, "n1"),  # before the window
        _alert(T + 2 * DAY / 3, "n3"),  # matched to n3's failure
    ]
    result = evaluate(alerts, events, **SPAN, is_failure=lambda event: event.xid != 43)
    assert [(row.matched, row.other_xid) for row in result.alerts] == [
        (False, None),
        (False, 43),
        (False, None),
        (True, None),
    ]
    assert 3 == result.summary.false_positives
    assert 1 == result.summary.false_positives_at_other_xids
    assert 1 == result.to_json()["summary"]["false_positives_at_other_xids"]
