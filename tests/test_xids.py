"""XID truth: sticky-gauge extraction, err_code series, windowed counts, episodes, verdicts."""

from __future__ import annotations

import numpy as np

from detector.config.rules import load_xid_catalog
from detector.model import FloatArray, Labels, XidEvent
from detector.pipeline.xids import GAP_SOURCE, XidExtractor, dedupe_episodes, is_failure
from detector.series.index import SeriesIndex

CATALOG = load_xid_catalog()
GAUGE = "DCGM_FI_DEV_XID_ERRORS"


def labels(gpu: str, node: str = "n1", **extra: str) -> Labels:
    base = {"Hostname": node, "gpu": gpu, "UUID": f"GPU-{node}-{gpu}", **extra}
    return tuple(sorted(base.items()))


class Feed:
    """Frames for an XidExtractor: each tick maps (metric, labels) -> value."""

    def __init__(self) -> None:
        self.index = SeriesIndex()
        self.extractor = XidExtractor(self.index, CATALOG)

    def tick(self, t: float, values: dict[tuple[str, Labels], float]) -> list[XidEvent]:
        cols = {key: self.index.add(*key) for key in values}
        frame: FloatArray = np.full(len(self.index), np.nan)
        for key, value in values.items():
            frame[cols[key]] = value
        return self.extractor.update(t, frame)


def codes(events: list[XidEvent]) -> list[tuple[float, str, str | None, int]]:
    return [(e.time, e.node, e.gpu, e.xid) for e in events]


def test_sticky_gauge_fires_on_change_only() -> None:
    """A change to a nonzero code is an event; the same value again or a drop to 0 is not."""
    feed = Feed()
    g0 = (GAUGE, labels("0"))
    seen = []
    for t, value in [(0, 0.0), (30, 0.0), (60, 79.0), (90, 79.0), (120, 0.0), (150, 79.0)]:
        seen += feed.tick(t, {g0: value})
    assert [(60.0, "n1", "0", 79), (150.0, "n1", "0", 79)] == codes(seen)


def test_pre_existing_value_is_a_baseline() -> None:
    """A nonzero value at the first sight of a node is history, not a new event."""
    feed = Feed()
    g3 = (GAUGE, labels("3"))
    assert [] == feed.tick(0, {g3: 48.0})
    assert [] == feed.tick(30, {g3: 48.0})
    assert [(60.0, "n1", "3", 94)] == codes(feed.tick(60, {g3: 94.0}))


def test_gap_does_not_refire() -> None:
    """A series that vanishes and returns with the same code does not fire again."""
    feed = Feed()
    g1 = (GAUGE, labels("1"))
    feed.tick(0, {g1: 0.0})
    assert [(30.0, "n1", "1", 13)] == codes(feed.tick(30, {g1: 13.0}))
    assert [] == feed.tick(60, {})
    assert [] == feed.tick(90, {g1: 13.0})


def test_new_err_code_series_is_an_event_with_its_label_code() -> None:
    """Newer builds: a new err_code series on a watched node fires with the label's code."""
    feed = Feed()
    other = (GAUGE, labels("0", err_code="31", err_msg="MMU fault"))
    assert [] == feed.tick(0, {other: 31.0})
    fresh = (
        GAUGE,
        labels(
            "2",
            err_code="154",
            err_msg="GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
        ),
    )
    events = feed.tick(30, {other: 31.0, fresh: 1.0})
    assert [(30.0, "n1", "2", 154)] == codes(events)
    assert events[0].message.startswith("GPU recovery action changed")
    assert is_failure(events[0], CATALOG)


def test_windowed_count_fires_on_increase() -> None:
    """DCGM_EXP_XID_ERRORS_COUNT{xid} fires when the count rises, not when it falls back."""
    feed = Feed()
    key = ("DCGM_EXP_XID_ERRORS_COUNT", labels("5", xid="74"))
    seen = []
    for t, value in [(0, 0.0), (30, 1.0), (60, 1.0), (90, 0.0), (120, 2.0)]:
        seen += feed.tick(t, {key: value})
    assert [(30.0, "n1", "5", 74), (120.0, "n1", "5", 74)] == codes(seen)


def test_blank_sentinel_is_ignored() -> None:
    """The DCGM blank value is not an XID code."""
    feed = Feed()
    key = (GAUGE, labels("0"))
    feed.tick(0, {key: 0.0})
    assert [] == feed.tick(30, {key: 9223372036854775794.0})


def test_extractor_state_round_trip() -> None:
    """A restarted extractor does not re-fire the sticky value it had already seen."""
    feed = Feed()
    key = (GAUGE, labels("0"))
    feed.tick(0, {key: 0.0})
    feed.tick(30, {key: 79.0})
    restarted = XidExtractor(feed.index, CATALOG)
    restarted.load_state_dict(feed.extractor.state_dict())
    frame: FloatArray = np.full(len(feed.index), np.nan)
    frame[feed.index.column_of(*key)] = 79.0
    assert [] == restarted.update(60, frame)
    frame[feed.index.column_of(*key)] = 48.0
    assert [48] == [e.xid for e in restarted.update(90, frame)]


def test_dedupe_merges_repeats_within_window() -> None:
    """Repeats of one code on one GPU within the window form one episode with an end."""
    events = [XidEvent(t, "n1", "0", 79, source="dcgm") for t in (0.0, 100.0, 350.0, 1000.0)]
    events.append(XidEvent(50.0, "n1", "1", 79))
    got = dedupe_episodes(events, CATALOG, window_s=300)
    assert [(0.0, "0", 350.0), (50.0, "1", None), (1000.0, "0", None)] == [
        (e.time, e.gpu, e.end) for e in got
    ]
    assert "dcgm" == got[0].source


def test_xid45_folds_into_preceding_episode() -> None:
    """A 45 soon after another XID on the same GPU is part of it; a lone 45 stays separate."""
    events = [
        XidEvent(0.0, "n1", "0", 48),
        XidEvent(20.0, "n1", "0", 45),
        XidEvent(25.0, "n1", "1", 45),
        XidEvent(5000.0, "n1", "0", 45),
    ]
    got = dedupe_episodes(events, CATALOG)
    assert [(0.0, "0", 48, 20.0), (25.0, "1", 45, None), (5000.0, "0", 45, None)] == [
        (e.time, e.gpu, e.xid, e.end) for e in got
    ]
    assert [True, False, False] == [is_failure(e, CATALOG) for e in got]


def test_recovery_closes_the_open_episode() -> None:
    """After a recovery code, the same XID starts a new episode even within the window."""
    events = [
        XidEvent(0.0, "n1", "0", 74),
        XidEvent(60.0, "n1", "0", 162),
        XidEvent(120.0, "n1", "0", 74),
    ]
    got = dedupe_episodes(events, CATALOG)
    assert [(0.0, 74), (60.0, 162), (120.0, 74)] == [(e.time, e.xid) for e in got]
    assert [True, False, True] == [is_failure(e, CATALOG) for e in got]


def test_is_failure_for_app_faults_and_154_actions() -> None:
    """App faults are not failures; 154 depends on the recovery action its message names."""
    assert not is_failure(XidEvent(0.0, "n", "0", 13), CATALOG)
    assert not is_failure(XidEvent(0.0, "n", "0", 31), CATALOG)
    assert is_failure(XidEvent(0.0, "n", "0", 79), CATALOG)
    x154 = XidEvent(0.0, "n", "0", 154)
    assert is_failure(x154, CATALOG)
    cleared = "GPU recovery action changed from 0x2 (Node Reboot Required) to 0x0 (None)"
    assert not is_failure(XidEvent(0.0, "n", "0", 154, message=cleared), CATALOG)


def test_a_change_seen_after_a_gap_is_stamped_at_the_gap() -> None:
    """The XID happened somewhere in the gap: stamped at its start, ``end`` at the tick that
    saw it (an alert in the gap matches it but is not counted as before it). One lost scrape
    (twice the interval) is no gap."""
    feed = Feed()
    g0, g1 = (GAUGE, labels("0")), (GAUGE, labels("1"))
    for t in (0, 30, 60):
        feed.tick(t, {g0: 0.0, g1: 0.0})
    feed.tick(90, {g1: 0.0})  # g0's scrape lost once
    [late] = feed.tick(120, {g0: 79.0, g1: 0.0})
    assert (late.time, late.end) == (120.0, None)
    for t in range(150, 1200, 30):  # node n1 unobserved for 17.5 min
        assert [] == feed.tick(t, {})
    [gap] = feed.tick(1200, {g0: 79.0, g1: 48.0})
    assert (gap.time, gap.end, gap.gpu, gap.xid) == (120.0, 1200.0, "1", 48)
    assert (late.source, gap.source) == ("dcgm", GAP_SOURCE)


def test_a_new_series_after_its_node_was_unseen_is_stamped_at_the_gap() -> None:
    """A new err_code series on a watched node that was unobserved for a while: the node's
    last observation starts the gap."""
    feed = Feed()
    other = (GAUGE, labels("0", err_code="31", err_msg="MMU fault"))
    for t in (0, 30, 60):
        feed.tick(t, {other: 31.0})
    fresh = (GAUGE, labels("2", err_code="79", err_msg="GPU has fallen off the bus"))
    [event] = feed.tick(600, {other: 31.0, fresh: 79.0})
    assert (event.time, event.end, event.xid) == (60.0, 600.0, 79)


def test_a_restart_keeps_when_each_series_was_last_seen() -> None:
    """The daemon down for 10 minutes: a code changed meanwhile is stamped at the last tick
    before the restart, from the saved state."""
    feed = Feed()
    key = (GAUGE, labels("0"))
    for t in (0, 30, 60):
        feed.tick(t, {key: 0.0})
    restarted = XidExtractor(feed.index, CATALOG)
    restarted.load_state_dict(feed.extractor.state_dict())
    frame: FloatArray = np.full(len(feed.index), np.nan)
    frame[feed.index.column_of(*key)] = 79.0
    [event] = restarted.update(660, frame)
    assert (event.time, event.end) == (60.0, 660.0)


def test_an_exact_time_heads_the_episode_of_an_xid_seen_after_a_gap() -> None:
    """The gauge's XID after a gap only bounds its time; the same code on the same GPU from
    a kernel log or an events file within that span is the episode's time. Outside it, or on
    another GPU, it is not."""
    seen = XidEvent(120.0, "n1", "1", 48, end=1200.0, source=GAP_SOURCE)
    logged = XidEvent(700.0, "n1", "1", 48, source="kernel-log")
    [one] = dedupe_episodes([seen, logged], CATALOG)
    assert (one.time, one.source) == (700.0, "kernel-log")
    other_gpu = XidEvent(700.0, "n1", "2", 48, source="kernel-log")
    assert [120.0, 700.0] == [e.time for e in dedupe_episodes([seen, other_gpu], CATALOG)]
    [alone] = dedupe_episodes([seen], CATALOG)
    assert (alone.time, alone.end) == (120.0, 1200.0)
