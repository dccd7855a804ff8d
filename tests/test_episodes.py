"""Episodes: ok -> pending -> firing -> resolved, hysteresis, cooldown, NaN, growth, state."""

from __future__ import annotations

import numpy as np

from detector.loop.episodes import COOLING, FIRING, OK, PENDING, EpisodeParams, Episodes

PARAMS = EpisodeParams(
    threshold=0.8, clear_ratio=0.5, min_duration_s=60.0, cooldown_s=300.0, clear_duration_s=0.0
)


def run(episodes: Episodes, scores: list[float], step: float = 30.0, t0: float = 0.0) -> list[str]:
    """Feed one entity's scores tick by tick; return 'start'/'end'/'' per tick."""
    out = []
    for i, s in enumerate(scores):
        ch = episodes.update(t0 + i * step, np.array([s]))
        out.append("start" if ch.started.size else "end" if ch.ended.size else "")
    return out


def test_fires_only_after_staying_above_threshold_for_min_duration() -> None:
    """Pending at the crossing, firing once min_duration_s has elapsed, start = that moment."""
    ep = Episodes(PARAMS)
    events = run(ep, [0.1, 0.9, 0.9, 0.9, 0.9])
    assert ["", "", "", "start", ""] == events
    assert FIRING == ep.state[0]
    assert 90.0 == ep.start[0]  # crossed at 30, fired at 30 + 60


def test_short_excursion_drops_back_to_ok_without_alert() -> None:
    """A crossing shorter than min_duration_s goes pending then back to ok, never fires."""
    ep = Episodes(PARAMS)
    events = run(ep, [0.9, 0.9, 0.5, 0.9, 0.9, 0.1])
    assert "start" not in events
    assert OK == ep.state[0]


def test_pending_restarts_its_clock_after_dropping() -> None:
    """Time spent pending before a dip does not count toward the next crossing."""
    ep = Episodes(PARAMS)
    # above at 0, 30; dip at 60; above again from 90: fires at 90 + 60 = 150, not earlier
    events = run(ep, [0.9, 0.9, 0.1, 0.9, 0.9, 0.9])
    assert ["", "", "", "", "", "start"] == events


def test_no_minimum_fires_on_the_crossing_tick() -> None:
    """With no minimum (0 s, one observation) the first tick at threshold starts the alert."""
    ep = Episodes(EpisodeParams(threshold=0.5, min_duration_s=0.0, min_observations=1))
    assert ["", "start"] == run(ep, [0.2, 0.5])


def test_hysteresis_keeps_firing_between_clear_level_and_threshold() -> None:
    """Firing survives scores below threshold but above threshold * clear_ratio (0.4)."""
    ep = Episodes(PARAMS)
    events = run(ep, [0.9, 0.9, 0.9, 0.7, 0.5, 0.41, 0.39])
    assert ["", "", "start", "", "", "", "end"] == events
    assert COOLING == ep.state[0]


def test_an_alert_ends_only_after_staying_below_clear_for_clear_duration() -> None:
    """With clear_duration_s = 60 a single low tick (a lost scrape) or a tick without data
    does not end a firing alert; staying below the clear level for 60 s does, at that tick."""
    ep = Episodes(
        EpisodeParams(threshold=0.8, clear_ratio=0.5, min_duration_s=0.0, min_observations=1)
    )
    events = run(ep, [0.9, 0.1, 0.9, 0.1, np.nan, 0.9, 0.1, 0.1, 0.1])
    assert ["start", "", "", "", "", "", "", "", "end"] == events  # 180 -> 240: 60 s below
    assert COOLING == ep.state[0]
    restored = Episodes(ep.params)
    restored.load_state_dict({k: v for k, v in ep.state_dict().items() if k != "clear_since"})
    assert np.isnan(restored.clear_since).all()  # a state saved before it existed loads


def test_cooldown_ignores_crossings_then_allows_a_new_episode() -> None:
    """After resolving, crossings within cooldown_s raise nothing; later ones alert again."""
    ep = Episodes(PARAMS)
    first = run(ep, [0.9, 0.9, 0.9, 0.1])  # fires at 60, resolves at 90, cools until 390
    assert ["", "", "start", "end"] == first
    during = run(ep, [0.95] * 5, t0=120.0)  # 120..240, all inside the cooldown
    assert "start" not in during
    assert COOLING == ep.state[0]
    after = run(ep, [0.95] * 4, t0=390.0)  # cooled at 390: pending, fires at 450
    assert ["", "", "start", ""] == after
    assert 450.0 == ep.start[0]


def test_nan_score_holds_every_state() -> None:
    """A tick with no data changes neither pending nor firing (nor resolves), and is no
    observation towards firing."""
    ep = Episodes(PARAMS)
    run(ep, [0.9], t0=0.0)
    run(ep, [np.nan, np.nan], t0=30.0)
    assert PENDING == ep.state[0]
    run(ep, [0.9], t0=90.0)  # pending since 0, now 90 >= 60, but only 2 ticks with data
    assert PENDING == ep.state[0]
    run(ep, [0.9], t0=120.0)
    assert FIRING == ep.state[0]
    events = run(ep, [np.nan] * 3, t0=150.0)
    assert ["", "", ""] == events
    assert FIRING == ep.state[0]


def test_slow_samples_need_min_observations_as_well_as_min_duration() -> None:
    """At 60 s samples, two ticks above (60 s apart: min_duration_s met) do not fire: a clump
    split across two scrapes is two observations; the third tick does, at that tick."""
    ep = Episodes(PARAMS)
    assert ["", "", "start"] == run(ep, [0.9, 0.9, 0.9], step=60.0)
    assert 120.0 == ep.start[0]
    ep = Episodes(PARAMS)
    assert ["", "", ""] == run(ep, [0.9, 0.9, 0.1], step=60.0)
    assert OK == ep.state[0]
    one = Episodes(EpisodeParams(threshold=0.8, min_duration_s=60.0, min_observations=2))
    assert ["", "start"] == run(one, [0.9, 0.9], step=60.0)


def test_a_state_saved_before_the_observation_count_loads_and_counts_afresh() -> None:
    """A pending entity restored from a state without ``seen_above`` counts its ticks anew."""
    ep = Episodes(PARAMS)
    run(ep, [0.9, 0.9])
    restored = Episodes(PARAMS)
    restored.load_state_dict({k: v for k, v in ep.state_dict().items() if k != "seen_above"})
    assert PENDING == restored.state[0]
    assert ["", "", "start"] == run(restored, [0.9, 0.9, 0.9], t0=60.0)


def test_peak_tracks_the_highest_score_of_the_episode() -> None:
    """peak/peak_time follow the maximum while pending/firing; a new episode resets it."""
    ep = Episodes(PARAMS)
    run(ep, [0.85, 0.95, 0.9, 0.99, 0.6, 0.1])
    assert 0.99 == ep.peak[0]
    assert 90.0 == ep.peak_time[0]
    run(ep, [0.82, 0.83, 0.84], t0=1000.0)
    assert 0.84 == ep.peak[0]


def test_new_peak_reports_entities_whose_peak_rose() -> None:
    """EpisodeChanges.new_peak names active entities whose peak rose this tick, only those."""
    ep = Episodes(PARAMS, 3)
    ep.update(0.0, np.array([0.9, 0.1, 0.85]))
    ch = ep.update(30.0, np.array([0.95, 0.9, 0.8]))
    assert [0, 1] == ch.new_peak.tolist()


def test_entities_are_independent_and_vectorized() -> None:
    """Each entity follows its own clock in one update call."""
    ep = Episodes(PARAMS, 3)
    ep.update(0.0, np.array([0.9, 0.1, 0.9]))
    ep.update(30.0, np.array([0.9, 0.9, 0.1]))
    ch = ep.update(60.0, np.array([0.9, 0.9, 0.9]))
    assert [0] == ch.started.tolist()
    ch = ep.update(90.0, np.array([0.9, 0.9, 0.9]))
    assert [1] == ch.started.tolist()
    assert [0, 1] == ep.firing().tolist()


def test_entity_count_grows_with_the_score_vector() -> None:
    """New entities start ok; existing ones keep their state."""
    ep = Episodes(PARAMS, 1)
    ep.update(0.0, np.array([0.9]))
    ep.update(30.0, np.array([0.9, 0.9]))
    ch = ep.update(60.0, np.array([0.9, 0.9, 0.9]))
    assert [0] == ch.started.tolist()
    assert [FIRING, PENDING, PENDING] == ep.state.tolist()


def test_shorter_score_vector_treats_absent_entities_as_no_data() -> None:
    """Scores for fewer entities than known: the missing tail holds its state (like NaN)."""
    ep = Episodes(PARAMS, 2)
    ep.update(0.0, np.array([0.9, 0.9]))
    ep.update(30.0, np.array([0.9]))
    ch = ep.update(60.0, np.array([0.9]))
    assert [0] == ch.started.tolist()
    assert [FIRING, PENDING] == ep.state.tolist()


def test_state_dict_round_trip_continues_identically() -> None:
    """A restored copy behaves exactly like the original from then on."""
    rng = np.random.default_rng(3)
    scores = rng.uniform(0.0, 1.0, size=(80, 4))
    a = Episodes(PARAMS)
    for i in range(40):
        a.update(i * 30.0, scores[i])
    b = Episodes(PARAMS)
    b.load_state_dict(a.state_dict())
    for i in range(40, 80):
        ca, cb = a.update(i * 30.0, scores[i]), b.update(i * 30.0, scores[i])
        assert ca.started.tolist() == cb.started.tolist()
        assert ca.ended.tolist() == cb.ended.tolist()
    for key, value in a.state_dict().items():
        np.testing.assert_array_equal(value, b.state_dict()[key])


def test_state_dict_is_a_copy() -> None:
    """Mutating the live machine after saving does not change the saved state."""
    ep = Episodes(PARAMS, 1)
    saved = ep.state_dict()
    ep.update(0.0, np.array([0.9]))
    assert OK == saved["state"][0]


def test_new_forced_run_on_a_long_firing_entity_starts_a_new_episode() -> None:
    """A failure XID on a node whose alert has fired for over restart_after_s ends that
    episode and opens a new one at once; a recent alert is kept (it may be the precursor)."""
    params = EpisodeParams(
        threshold=0.5, min_duration_s=0.0, restart_after_s=600.0, min_observations=1
    )
    ep = Episodes(params, 2)
    ep.update(0.0, np.array([0.9, 0.9]))  # both fire at t=0
    quiet = np.array([False, False])
    for t in range(30, 900, 30):
        ep.update(float(t), np.array([0.9, 0.9]), quiet)
    # node 0: XID at 900 (fired 900 s ago -> restart); node 1: no XID
    changes = ep.update(900.0, np.array([0.9, 0.9]), np.array([True, False]))
    assert [0] == changes.ended.tolist()
    assert [0.0] == changes.ended_start.tolist()
    assert [0] == changes.started.tolist()
    assert 900.0 == ep.start[0]
    assert 0.0 == ep.start[1]
    # the XID held on the next tick is not a new run: no second restart
    again = ep.update(930.0, np.array([0.9, 0.9]), np.array([True, False]))
    assert ([], []) == (again.ended.tolist(), again.started.tolist())
    # a recent episode (fired 300 s ago) is kept when an XID arrives
    ep2 = Episodes(params, 1)
    ep2.update(0.0, np.array([0.9]))
    kept = ep2.update(300.0, np.array([0.9]), np.array([True]))
    assert ([], []) == (kept.ended.tolist(), kept.started.tolist())
