"""CountBurst: Poisson surprise for rare-event counters (ECC, PCIe replay, IB errors)."""

from __future__ import annotations

import numpy as np
import pytest

from detector.scorers.counts import CountBurst
from detector.scorers.registry import grid_layout

LAYOUT = grid_layout(1, 4, ("ecc",))
TICK = 30.0


def feed(scorer: CountBurst, counts: np.ndarray) -> np.ndarray:
    """counts: ticks x columns of events per tick; fed as per-second rates."""
    return np.stack([scorer.update(i * TICK, row / TICK, LAYOUT) for i, row in enumerate(counts)])


def test_burst_on_a_quiet_counter_scores_high_while_single_events_do_not() -> None:
    """A burst of 8 errors on a counter that is almost always 0 is surprising; one error is not."""
    counts = np.zeros((400, 4))
    counts[300, 1] = 1.0
    counts[350, 2] = 8.0
    scores = feed(CountBurst(warmup_s=600), counts)
    assert scores[300, 1] < 3.0
    assert scores[350, 2] > 6.0
    assert 0.0 == scores[:, [0, 3]].max()


def test_a_steady_busy_rate_is_learnt_and_scores_nothing() -> None:
    """Poisson traffic at its usual rate is normal; the same counter tripling its rate is not."""
    rng = np.random.default_rng(0)
    counts = rng.poisson(20.0, size=(600, 4)).astype(float)
    counts[550:, 3] = rng.poisson(60.0, size=50)
    scores = feed(CountBurst(warmup_s=3600), counts)
    assert np.percentile(scores[200:550], 99.9) < 4.0
    assert scores[555:, 3].min() > 4.0


def test_the_learnt_rate_moves_little_during_a_burst() -> None:
    """Learning clips a burst, so a second burst right after the first still scores high."""
    counts = np.zeros((400, 4))
    counts[300:303, 0] = 10.0
    scores = feed(CountBurst(warmup_s=600), counts)
    assert scores[302, 0] > 0.8 * scores[300, 0]


def test_the_first_tick_after_a_long_gap_is_not_a_burst() -> None:
    """Six hours of a steady 20/tick counter arriving in one tick after a gap (the exporter was
    unreachable), at a rate 3% above the learnt one, is no burst; the same 3% on an ordinary
    tick is not either, while a real burst after the gap still is."""
    rng = np.random.default_rng(4)
    scorer = CountBurst(warmup_s=3600)
    t = 0.0
    for _ in range(600):
        scorer.update(t, rng.poisson(20.0, 4) / TICK, LAYOUT)
        t += TICK
    gap = 6 * 3600.0
    events = rng.poisson(20.0 * gap / TICK * 1.03, 4).astype(float)
    events[3] += 5000.0  # a burst of 5000 errors somewhere in the gap
    scores = scorer.update(t - TICK + gap, events / gap, LAYOUT)
    assert scores[:3].max() < 3.0
    assert scores[3] > 5.0


def test_an_overdispersed_counter_is_judged_at_its_own_spread() -> None:
    """Real error and retransmission counters are burstier than Poisson. Counts with four times
    the Poisson variance (negative binomial, 20 a tick): after a day, under 1% of ticks reach
    z 3 (a Poisson model flags ~7%: measured 6.8% before dispersion was learnt), while a
    fivefold burst still scores above 4; Poisson traffic keeps a dispersion of ~1."""
    rng = np.random.default_rng(1)
    layout = grid_layout(50, 1, ("c",))
    overdispersed, poisson = CountBurst(), CountBurst()
    p = 0.25  # variance / mean = 1 / p
    high: list[float] = []
    for i in range(2 * 5760):
        k = rng.negative_binomial(20.0 * p / (1 - p), p, 50).astype(float)
        burst = i == 2 * 5760 - 1
        if burst:
            k[:10] *= 5.0
        z = overdispersed.update(15.0 * i, k / 15.0, layout)
        poisson.update(15.0 * i, rng.poisson(20.0, 50) / 15.0, layout)
        if 5760 <= i and not burst:
            high.append(float((z >= 3.0).mean()))
    assert float(np.mean(high)) < 0.01
    assert float(np.median(z[:10])) > 4.0
    for scorer, low, high_phi in ((overdispersed, 2.5, 5.0), (poisson, 0.9, 1.1)):
        prior = scorer.dispersion_prior_n
        phi = (scorer.spread + prior) / (scorer.spread_n + prior)
        assert low < float(np.median(phi)) < high_phi


def test_a_state_saved_before_dispersion_was_learnt_still_loads() -> None:
    """A saved state without the spread and burst arrays (older versions) loads with none
    learnt, and the scorer carries on from the rate it had."""
    rng = np.random.default_rng(2)
    scorer = CountBurst(warmup_s=600)
    feed(scorer, rng.poisson(5.0, size=(100, 4)).astype(float))
    optional = ("spread", "spread_n", "bursts", "burst_zsum", "run_cut", "run_zh", "last_burst")
    old = {k: v for k, v in scorer.state_dict().items() if k not in optional}
    restored = CountBurst(warmup_s=600)
    restored.load_state_dict(old)
    assert 0.0 == float(restored.spread_n.sum())
    np.testing.assert_array_equal(restored.events, scorer.events)
    z = restored.update(100 * TICK, np.array([5.0, 5.0, 5.0, 50.0]) / TICK, LAYOUT)
    assert z[3] > 6.0
    assert z[:3].max() < 3.0


def test_a_flapping_counter_is_discounted_while_a_first_burst_counts_in_full() -> None:
    """A link that errors in isolated clumps every 20 minutes (a flapping port: never a GPU
    failure) scores its first clump in full, then less and less, below the level at which one
    signal alone raises an alert (z ~8); a quiet counter's first clump, at the end of the same
    day, still scores in full."""
    counts = np.zeros((2880, 4))
    counts[200::40, 0] = 20.0
    counts[2870, 1] = 20.0
    scores = feed(CountBurst(), counts)
    flaps = scores[200::40, 0]
    assert flaps[0] > 8.0
    assert flaps[0] == pytest.approx(scores[2870, 1], rel=0.05)
    assert np.all(np.diff(flaps[:10]) < 0)
    assert flaps[-10:].max() < 4.0


def test_a_sustained_burst_is_not_discounted_by_its_own_ticks() -> None:
    """A run of consecutive burst ticks (a failing device's errors piling up) is discounted
    only by bursts before the run: on a quiet counter it scores exactly as without
    habituation, tick for tick."""
    counts = np.zeros((500, 4))
    counts[300:330, 2] = 8.0
    counts[380, 2] = 8.0  # a second, separate burst 25 minutes later is discounted
    scores = feed(CountBurst(), counts)
    plain = feed(CountBurst(habituation_n=1e300), counts)
    np.testing.assert_array_equal(scores[:331], plain[:331])
    assert scores[300:330, 2].min() > 4.0
    assert scores[380, 2] < plain[380, 2]


def test_a_burst_far_beyond_the_habitual_ones_keeps_its_excess() -> None:
    """Habituation discounts a flapping column's bursts up to their usual size only: after a
    day of clumps of 20 errors, another clump of 20 scores low, one of 400 (a failing link,
    not the flapping one) still scores high."""
    counts = np.zeros((2890, 4))
    counts[200:2880:40, :2] = 20.0
    counts[2885, 0] = 20.0
    counts[2885, 1] = 400.0
    scores = feed(CountBurst(), counts)
    assert scores[2885, 0] < 4.0
    assert scores[2885, 1] > 8.0
