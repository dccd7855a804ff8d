"""SeasonalProfile (detector/scorers/seasonal.py): a value unusual for this time of day."""

from __future__ import annotations

import numpy as np
import pytest

from detector.errors import ConfigError, StateError
from detector.model import FloatArray
from detector.scorers.base import ColumnLayout
from detector.scorers.registry import grid_layout
from detector.scorers.seasonal import SeasonalProfile

LAYOUT = grid_layout(1, 2, ("gpu_temp",), (), cohorts=1)  # two GPU columns
STEP_S = 300.0  # 5-minute samples: 288 a day, 12 per hourly bin
DAY = 288


def scores_of(
    scorer: SeasonalProfile, x: FloatArray, layout: ColumnLayout = LAYOUT
) -> tuple[FloatArray, FloatArray]:
    """Scores and learnt flags of every tick (ticks x columns), one tick every 5 minutes."""
    scores, learnt = [], []
    for i, row in enumerate(x):
        scores.append(scorer.update(STEP_S * i, row, layout))
        learnt.append(scorer.learnt.copy())
    return np.stack(scores), np.stack(learnt)


def daily_load(days: int, seed: int) -> FloatArray:
    """A busy day / quiet night profile (20 at night, 80 by day) with a little noise."""
    hour = (np.arange(days * DAY) * STEP_S / 3600.0) % 24.0
    rng = np.random.default_rng(seed)
    return np.where((hour >= 8) & (hour < 20), 80.0, 20.0) + rng.normal(size=hour.shape)


def test_the_daily_rise_is_ordinary_once_learnt() -> None:
    """A level change that happens every morning scores ~0 from the third day on."""
    x = np.stack([daily_load(6, seed=0), daily_load(6, seed=1)], axis=1)
    scores, learnt = scores_of(SeasonalProfile(), x)
    assert learnt[3 * DAY :].all()
    assert scores[3 * DAY :].max() < 1.0


def test_the_day_level_at_night_scores_high() -> None:
    """The same value that is normal at noon scores high at 2 a.m.; the other column is quiet."""
    x = np.stack([daily_load(6, seed=2), daily_load(6, seed=3)], axis=1)
    night = 5 * DAY + 24  # 02:00 of day 6
    x[night, 0] = 80.0
    scores, _ = scores_of(SeasonalProfile(), x)
    assert scores[night, 0] >= 10.0
    assert scores[night, 1] < 1.0


def test_a_daily_spike_becomes_part_of_the_profile() -> None:
    """A spike that recurs at 03:10 every day scores < 1 once its hour is learnt (the hour's
    envelope includes it); a spike twice as high at the same time still scores high."""
    x = np.stack([daily_load(8, seed=4), daily_load(8, seed=5)], axis=1)
    spikes = [d * DAY + 38 for d in range(8)]  # 03:10
    x[spikes, 0] = 200.0
    x[spikes[-1], 1] = 200.0  # the other column has no such habit
    x[spikes[-1], 0] = 400.0
    scores, learnt = scores_of(SeasonalProfile(), x)
    assert learnt[spikes[1:], 0].all()
    assert scores[spikes[1:-1], 0].max() < 1.0
    assert scores[spikes[-1], 0] >= 5.0
    assert scores[spikes[-1], 1] >= 10.0


def test_unlearnt_hours_score_zero_and_report_not_learnt() -> None:
    """Before a bin has been visited on two separate days its values score 0, learnt False."""
    x = np.stack([daily_load(2, seed=6)] * 2, axis=1)
    x[DAY - 10, 0] = 500.0  # day 1: nothing to compare with yet
    scores, learnt = scores_of(SeasonalProfile(), x)
    assert not learnt[:DAY].any()
    assert scores[:DAY].max() == 0.0
    assert learnt[2 * DAY :].all()  # day 2 learns each hour on its first sample
    assert learnt[DAY : 2 * DAY].mean() > 0.9


def test_direction_folds_the_score() -> None:
    """An 'up' column ignores values below its hour's envelope and scores those above it."""
    layout = grid_layout(1, 2, ("gpu_temp",), (), cohorts=1)
    up = ColumnLayout(
        signal=layout.signal,
        node=layout.node,
        gpu=layout.gpu,
        cohort=layout.cohort,
        direction=np.ones(2, dtype=np.int64),
        signal_names=layout.signal_names,
        node_names=layout.node_names,
    )
    x = np.stack([daily_load(5, seed=7), daily_load(5, seed=8)], axis=1)
    noon = 4 * DAY + 144
    x[noon, 0] = 0.0
    x[noon, 1] = 200.0
    scores, _ = scores_of(SeasonalProfile(), x, up)
    assert scores[noon, 0] == 0.0
    assert scores[noon, 1] >= 10.0


@pytest.mark.parametrize(
    "kwargs",
    [{"period_s": 0.0}, {"bins": 0}, {"half_life_periods": 0.0}, {"warmup_periods": 0}],
)
def test_bad_configuration_raises_config_error(kwargs: dict[str, float]) -> None:
    """A non-positive period, bin count, half-life or warm-up is refused at construction."""
    with pytest.raises(ConfigError):
        SeasonalProfile(**kwargs)  # type: ignore[arg-type]


def test_state_with_other_bins_raises_state_error() -> None:
    """A state saved with 24 bins is refused by a 12-bin profile, naming the array."""
    saved = SeasonalProfile()
    scores_of(saved, np.stack([daily_load(1, seed=9)] * 2, axis=1))
    with pytest.raises(StateError, match="mean"):
        SeasonalProfile(bins=12).load_state_dict(saved.state_dict())
