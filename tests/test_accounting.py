"""Live TP/FP accounting: scripted sequences, agreement with replay's evaluate, restarts."""

from __future__ import annotations

import json

import numpy as np
import pytest

from detector.evaluation.accounting import LiveAccounting
from detector.evaluation.matching import evaluate
from detector.model import Alert, XidEvent

T0 = 1_700_000_000.0
H, G = 3600.0, 300.0


def alert(node: str, start: float) -> Alert:
    return Alert(node, None, start, None, 0.9, ("gpu_temp",))


def xid(node: str, t: float, end: float | None = None) -> XidEvent:
    return XidEvent(t, node, "0", 79, end)


def test_alert_before_failure_is_true_positive_with_lead_time() -> None:
    """An XID 20 minutes after an alert on its node detects it 'before', lead 1200 s."""
    acc = LiveAccounting(H, G)
    acc.update(T0, started=[alert("n1", T0)])
    detections = acc.update(T0 + 1200, failures=[xid("n1", T0 + 1200)])
    assert [1200.0] == [d.lead_time_s for d in detections]
    snap = acc.snapshot(T0 + 1200)
    assert (1, 1, 0, 0, 0) == (
        snap.true_positives,
        snap.detected_before,
        snap.detected_after,
        snap.false_positives,
        snap.missed,
    )


def test_alert_within_grace_after_failure_detects_it_after() -> None:
    """An alert 2 minutes after the XID (grace 5 min) detects it 'after', lead -120 s."""
    acc = LiveAccounting(H, G)
    acc.update(T0, failures=[xid("n1", T0)])
    detections = acc.update(T0 + 120, started=[alert("n1", T0 + 120)])
    assert [-120.0] == [d.lead_time_s for d in detections]
    snap = acc.snapshot(T0 + 10 * H)
    assert (1, 0, 1, 0, 0) == (
        snap.true_positives,
        snap.detected_before,
        snap.detected_after,
        snap.false_positives,
        snap.missed,
    )


def test_failure_without_alert_in_grace_is_missed_and_late_alert_is_false_positive() -> None:
    """No alert by end + grace: missed; an alert after that window is a false positive."""
    acc = LiveAccounting(H, G)
    acc.update(T0, failures=[xid("n1", T0, end=T0 + 600)])
    assert 0 == acc.snapshot(T0 + 600 + G).missed  # window still open (end + grace)
    acc.update(T0 + 600 + G + 1)
    assert 1 == acc.snapshot(T0 + 600 + G + 1).missed
    acc.update(T0 + 1000, started=[alert("n1", T0 + 1000)])
    assert 0 == acc.snapshot(T0 + 1000 + H).false_positives  # horizon not yet passed
    snap = acc.snapshot(T0 + 1001 + H)
    assert (1, 0, 1) == (snap.false_positives, snap.true_positives, snap.missed)


def test_failure_on_another_node_does_not_match() -> None:
    """Matching is per node: an XID on n2 leaves the alert on n1 a false positive."""
    acc = LiveAccounting(H, G)
    acc.update(T0, started=[alert("n1", T0)])
    acc.update(T0 + 60, failures=[xid("n2", T0 + 60)])
    snap = acc.snapshot(T0 + 2 * H)
    assert (1, 1, 0) == (snap.false_positives, snap.missed, snap.true_positives)


def test_fp_per_day_is_rolling_over_seven_days() -> None:
    """FP/day divides false positives decided in the last 7 days by the days covered."""
    day = 86400.0
    acc = LiveAccounting(H, G)
    for d in range(10):  # two false positives a day for 10 days
        acc.update(T0 + d * day, started=[alert("n1", T0 + d * day), alert("n2", T0 + d * day)])
        if d == 2:  # decided so far: days 0 and 1 (at the next tick), over 2 days covered
            assert 2.0 == acc.snapshot(T0 + 2 * day).fp_per_day
    # At day 9.5 the window is (2.5, 9.5]: decisions at days 3..9 and 9.5, over 7 days.
    assert pytest.approx(16 / 7) == acc.snapshot(T0 + 9.5 * day).fp_per_day
    # At day 20 the last decisions (day 9.5) have left the window.
    assert 0.0 == acc.snapshot(T0 + 20 * day).fp_per_day
    assert 20 == acc.snapshot(T0 + 20 * day).false_positives


def test_live_accounting_agrees_with_replay_evaluation() -> None:
    """On a random sequence fed tick by tick, the final numbers equal evaluate()'s."""
    rng = np.random.default_rng(7)
    step, ticks = 15.0, 2000  # 8.3 hours
    nodes = [f"n{i}" for i in range(4)]

    def at(k: int) -> float:
        return T0 + step * k

    failures = [xid(str(rng.choice(nodes)), at(int(rng.integers(240, ticks)))) for _ in range(12)]
    alerts = [alert(str(rng.choice(nodes)), at(int(rng.integers(ticks)))) for _ in range(25)]
    # Alerts shortly after (within grace) and well before some failures.
    alerts += [alert(f.node, f.time + step * int(rng.integers(1, 20))) for f in failures[:4]]
    alerts += [alert(f.node, f.time - step * int(rng.integers(1, 240))) for f in failures[4:8]]
    acc = LiveAccounting(H, G)
    for k in range(ticks + int((H + G) / step) + 2):
        t = T0 + step * k
        acc.update(
            t,
            started=[a for a in alerts if a.start == t],
            failures=[f for f in failures if f.time == t],
        )
    end = T0 + step * (ticks + int((H + G) / step) + 2)
    live = acc.snapshot(end)
    ref = evaluate(alerts, failures, start=T0, end=end, horizon_s=H, grace_s=G).summary
    assert ref.detected > ref.detected_before_failure > 3  # before, after and missed
    assert ref.failures > ref.detected
    assert ref.false_positives > 3
    assert len(alerts) == live.alerts
    assert ref.detected == live.detected_before + live.detected_after
    assert ref.detected_before_failure == live.detected_before
    assert ref.failures - ref.detected == live.missed
    assert ref.false_positives == live.false_positives
    assert len(alerts) - ref.false_positives == live.true_positives
    ref_leads = sorted(
        r.lead_time_s
        for r in evaluate(alerts, failures, start=T0, end=end, horizon_s=H, grace_s=G).failures
        if r.lead_time_s is not None
    )
    assert ref_leads == sorted(live.lead_times_s)


def test_state_round_trips_through_json_and_continues_identically() -> None:
    """A restart from state_dict (through JSON) gives the same numbers as no restart."""
    a, b = LiveAccounting(H, G), LiveAccounting(H, G)
    script = [
        (T0, [alert("n1", T0)], []),
        (T0 + 60, [alert("n2", T0 + 60)], [xid("n3", T0 + 60)]),
        (T0 + 900, [], [xid("n1", T0 + 900)]),
        (T0 + 5000, [alert("n3", T0 + 5000)], []),
        (T0 + 9000, [], []),
    ]
    for i, (t, started, fails) in enumerate(script):
        a.update(t, started, fails)
        if i == 2:
            restored = LiveAccounting(H, G)
            restored.load_state_dict(json.loads(json.dumps(b.state_dict())))
            b = restored
        b.update(t, started, fails)
    assert a.snapshot(T0 + 9000) == b.snapshot(T0 + 9000)
    assert 1 == b.snapshot(T0 + 9000).true_positives


def test_bad_state_is_rejected_with_a_clear_error() -> None:
    """A state of another version or shape raises ValueError naming the problem."""
    acc = LiveAccounting()
    for bad, words in [({"version": 9}, "version"), ({"version": 1}, "malformed")]:
        with pytest.raises(ValueError, match=words):
            acc.load_state_dict(bad)
