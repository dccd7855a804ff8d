"""CountBurst: Poisson surprise for rare-event counters (ECC, PCIe replay, IB errors)."""

from __future__ import annotations

import numpy as np

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
