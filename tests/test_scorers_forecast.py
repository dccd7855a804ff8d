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
    ],
)
def test_bad_parameters_raise_config_error(kwargs: dict[str, object]) -> None:
    """Nonsensical parameters are refused with ConfigError naming the parameter."""
    with pytest.raises(ConfigError):
        ForecastError(**kwargs)  # type: ignore[arg-type]
