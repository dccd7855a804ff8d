"""ForecastError: one-step forecasts from the best of several EW levels, per column."""

from __future__ import annotations

import numpy as np
import pytest

from detector.errors import ConfigError
from detector.model import ColumnLayout, FloatArray
from detector.scorers.forecast import ForecastError
from detector.scorers.registry import grid_layout
from detector.scorers.zscore import RobustZScore

TICK_S = 10.0
LAYOUT = grid_layout(1, 4, ("gpu_temp",))  # 4 columns, direction 0


def scores(scorer: ForecastError | RobustZScore, x: FloatArray, layout: ColumnLayout) -> FloatArray:
    return np.stack([scorer.update(i * TICK_S, row, layout) for i, row in enumerate(x)])


def make() -> ForecastError:
    return ForecastError(level_half_lives_s=(2.5, 10, 40, 160, 640), scale_half_life_s=5000)


@pytest.mark.parametrize("kind", ["white", "walk"])
def test_scores_are_calibrated_z_units(kind: str) -> None:
    """White noise and a random walk both score like |N(0, 1)|: mean ~0.8, rare above 4."""
    rng = np.random.default_rng(1)
    noise = rng.normal(size=(3000, 4)) * 3.0 + 100.0
    x = noise if kind == "white" else np.cumsum(noise - 100.0, axis=0)
    z = scores(make(), x, LAYOUT)[300:]
    assert 0.65 < z.mean() < 0.95
    assert np.mean(z > 4.0) < 1e-3


def test_spike_on_a_wandering_series_stands_out_where_a_mean_z_score_misses_it() -> None:
    """A 10-step spike on a random walk scores >= 8; against the mean it looks ordinary."""
    rng = np.random.default_rng(2)
    x = np.cumsum(rng.normal(size=(2000, 4)), axis=0)
    x[1500, 2] += 10.0
    forecast = scores(make(), x, LAYOUT)
    zscore = scores(RobustZScore(half_life_s=5000), x, LAYOUT)
    assert forecast[1500, 2] >= 8.0
    assert forecast[1500, [0, 1, 3]].max() < 4.0
    assert zscore[1500, 2] < 4.0


def test_heavy_tailed_errors_widen_the_scale_instead_of_alarming_forever() -> None:
    """Student-t(2) noise: the winsorized scale grows, so few ticks exceed 6 sigmas."""
    rng = np.random.default_rng(3)
    x = rng.standard_t(2, size=(4000, 4))
    z = scores(make(), x, LAYOUT)[400:]
    assert np.mean(z > 6.0) < 0.02


@pytest.mark.parametrize(
    "kwargs",
    [
        {"level_half_lives_s": ()},
        {"level_half_lives_s": (0.0, 10.0)},
        {"scale_half_life_s": 0.0},
        {"warmup": 0},
        {"clip": 0.0},
        {"var_floor_abs": 0.0},
        {"season_period_s": -1.0},
        {"season_period_s": 86400.0, "season_bins": 1},
        {"season_period_s": 86400.0, "season_half_life_periods": 0.0},
        {"season_period_s": 86400.0, "season_warmup_periods": 0.5},
    ],
)
def test_bad_parameters_raise_config_error(kwargs: dict[str, object]) -> None:
    """Nonsensical parameters are refused with ConfigError naming the parameter."""
    with pytest.raises(ConfigError, match=list(kwargs)[-1]):  # the last key is the bad one
        ForecastError(**kwargs)  # type: ignore[arg-type]


PERIOD_S = 2400.0  # a 'day' of 240 ticks, 24 bins of 10 ticks


def _rhythm(days: int, seed: int) -> FloatArray:
    """A daily sinusoid (amplitude 30) in unit Gaussian noise, 4 columns."""
    rng = np.random.default_rng(seed)
    t = np.arange(days * 240) * TICK_S
    return 30.0 * np.sin(2 * np.pi * t / PERIOD_S)[:, None] + rng.normal(size=(t.size, 4))


def make_seasonal() -> ForecastError:
    return ForecastError(
        level_half_lives_s=(2.5, 10, 40, 160, 640), scale_half_life_s=5000, season_period_s=PERIOD_S
    )


def test_seasonal_twins_sharpen_spikes_on_a_daily_rhythm() -> None:
    """Spikes of 6 noise sigmas on a daily rhythm score higher once the rhythm is predicted."""
    x = _rhythm(12, seed=5)
    rows = np.random.default_rng(6).choice(np.arange(240 * 6, 240 * 12, 37), size=20, replace=False)
    x[rows, 1] += 6.0
    plain = scores(make(), x, LAYOUT)[rows, 1]
    seasonal = scores(make_seasonal(), x, LAYOUT)[rows, 1]
    assert seasonal.mean() > 1.15 * plain.mean()
    assert np.median(seasonal) > 4.5


def test_seasonal_twins_stay_calibrated() -> None:
    """On a noisy rhythm and on white noise the twins still score like |N(0, 1)|."""
    rhythm = scores(make_seasonal(), _rhythm(10, seed=7), LAYOUT)[240 * 3 :]
    rng = np.random.default_rng(8)
    noise = scores(make_seasonal(), rng.normal(size=(2400, 4)) * 3.0 + 100.0, LAYOUT)[300:]
    for z in (rhythm, noise):
        assert 0.65 < z.mean() < 0.95
        assert np.mean(z > 4.0) < 1e-3


def test_seasonal_twins_keep_state_keys_apart() -> None:
    """With twins the state holds the doubled ladder and the profile; without, neither."""
    x = _rhythm(1, seed=9)
    with_twins, without = make_seasonal(), make()
    scores(with_twins, x, LAYOUT)
    scores(without, x, LAYOUT)
    assert {"level.9", "offset.23", "day_mean"} <= with_twins.state_dict().keys()
    assert not {"level.5", "offset.0", "day_mean"} & without.state_dict().keys()
