"""RobustZScore: oracle agreement (river, definition), robustness, shifts, bursts, warm-up."""

from __future__ import annotations

import numpy as np
import pytest
from river import stats

from detector.errors import ConfigError, StateError
from detector.model import FloatArray
from detector.scorers.base import ColumnLayout
from detector.scorers.registry import grid_layout
from detector.scorers.zscore import RobustZScore


def flat_layout(n: int, direction: int = 0) -> ColumnLayout:
    """n node-level columns of one signal."""
    layout = grid_layout(n, 0, (), ("value",), directions={"value": direction})
    return layout


def feed(scorer: RobustZScore, x: FloatArray, times: FloatArray | None = None) -> FloatArray:
    layout = flat_layout(x.shape[1])
    ts = np.arange(x.shape[0], dtype=float) if times is None else times
    return np.stack([scorer.update(float(t), row, layout) for t, row in zip(ts, x, strict=True)])


def test_mean_agrees_with_river_ewmean_after_burn_in() -> None:
    """Unclipped, no warm-up: the EW mean equals river's EWMean once initialisation fades."""
    rng = np.random.default_rng(0)
    n, ticks, half_life = 6, 400, 10.0
    x = rng.normal(size=(ticks, n)) * rng.uniform(0.1, 100, n) + rng.uniform(-1e6, 1e6, n)
    scorer = RobustZScore(half_life_s=half_life, warmup=0, clip=np.inf)
    oracle = [stats.EWMean(fading_factor=1 - 0.5 ** (1 / half_life)) for _ in range(n)]
    layout = flat_layout(n)
    for i, row in enumerate(x):
        scorer.update(float(i), row, layout)
        for j, m in enumerate(oracle):
            m.update(float(row[j]))
        if i >= 300:  # the two initialisations differ by d**i ~ 1e-9 of the range by now
            river_mean = np.array([m.get() for m in oracle])
            np.testing.assert_allclose(scorer.baseline.mean, river_mean, rtol=0, atol=1e-6)


def reference_mean_var(
    times: FloatArray, values: FloatArray, half_life: float
) -> tuple[float, float]:
    """The definition, two-pass in float64: weights 0.5 ** ((t_now - t_i) / half_life)."""
    w = 0.5 ** ((times[-1] - times) / half_life)
    mean = float(np.sum(w * values) / np.sum(w))
    return mean, float(np.sum(w * (values - mean) ** 2) / np.sum(w))


def test_mean_and_variance_match_the_weighted_definition_with_gaps_and_nans() -> None:
    """Irregular gaps, NaNs and a 1e9 offset: state equals the weighted definition per series."""
    rng = np.random.default_rng(1)
    n, ticks, half_life = 4, 250, 30.0
    times = np.cumsum(rng.exponential(10.0, ticks))
    x = 1e9 + rng.normal(size=(ticks, n)) * np.array([1.0, 5.0, 0.01, 300.0])
    x[rng.random(x.shape) < 0.2] = np.nan
    scorer = RobustZScore(half_life_s=half_life, warmup=0, clip=np.inf)
    layout = flat_layout(n)
    for i, (t, row) in enumerate(zip(times, x, strict=True)):
        scorer.update(float(t), row, layout)
        if i < 3:
            continue
        for j in range(n):
            seen = ~np.isnan(x[: i + 1, j])
            mean, var = reference_mean_var(times[: i + 1][seen], x[: i + 1, j][seen], half_life)
            assert scorer.baseline.mean[j] == pytest.approx(mean, rel=1e-14, abs=1e-6)
            # x carries ~1e-7 absolute rounding at 1e9: relative to sigma 0.01 that is 1e-5
            assert scorer.baseline.var[j] == pytest.approx(var, rel=1e-4)


def warmed(n: int = 3, ticks: int = 300, seed: int = 2) -> tuple[RobustZScore, FloatArray]:
    scorer = RobustZScore(half_life_s=100.0, warmup=20)
    x = 50.0 + np.random.default_rng(seed).normal(size=(ticks, n))
    feed(scorer, x)
    return scorer, x


def test_an_outlier_barely_moves_the_mean_and_leaves_the_variance() -> None:
    """A 1000-sigma spike moves the mean by at most clip·sigma/weight and not the variance."""
    scorer, _ = warmed()
    mean, var = scorer.baseline.mean.copy(), scorer.baseline.var.copy()
    sigma, weight = scorer.baseline.sigma(), scorer.baseline.w_mean * 0.5 ** (1 / 100) + 1
    score = scorer.update(300.0, np.array([50.0 + 1000.0, 50.0, 50.0]), flat_layout(3))
    assert score[0] == 50.0  # capped
    assert abs(scorer.baseline.mean[0] - mean[0]) <= 4.0 * sigma[0] / weight[0] + 1e-12
    assert var[0] == scorer.baseline.var[0]


def test_a_level_shift_scores_high_then_is_absorbed() -> None:
    """A 6-sigma step scores ~6 at once, stays flagged for a while, then becomes the norm."""
    rng = np.random.default_rng(3)
    x = 50.0 + rng.normal(size=(1500, 1))
    x[300:] += 6.0
    scores = feed(RobustZScore(half_life_s=100.0, warmup=20), x)[:, 0]
    assert scores[300] > 4.5
    assert np.median(scores[300:320]) > 4.0
    assert np.median(scores[1200:]) < 1.5


def test_a_flat_series_that_turns_noisy_relearns() -> None:
    """Variance frozen by 'anomalous' points re-learns once its evidence has faded."""
    x = np.full((1500, 1), 5.0)
    x[200:, 0] += np.random.default_rng(4).normal(size=1300)
    scores = feed(RobustZScore(half_life_s=50.0, warmup=20), x)[:, 0]
    assert np.median(scores[200:220]) > 20.0
    assert np.mean(scores[1000:] > 4.0) < 0.01


def test_a_rate_burst_on_a_counter_rate_scores_high() -> None:
    """Poisson rates of ~100/s that triple for 5 ticks score far above their noise."""
    rng = np.random.default_rng(5)
    rates = rng.poisson(100.0, size=(400, 1)).astype(float)
    rates[350:355] = rng.poisson(300.0, size=(5, 1))
    scores = feed(RobustZScore(half_life_s=200.0, warmup=20), rates)[:, 0]
    assert scores[350:355].min() > 10.0
    assert scores[30:350].max() < 5.0


def test_direction_folds_the_sign() -> None:
    """Direction +1 ignores drops, -1 ignores rises, 0 scores both."""
    scorer = RobustZScore(half_life_s=100.0, warmup=5)
    layout = grid_layout(1, 0, (), ("up", "down", "both"), directions={"up": 1, "down": -1})
    rng = np.random.default_rng(6)
    for i in range(50):
        scorer.update(float(i), 10.0 + rng.normal(size=3), layout)
    drop = scorer.update(50.0, np.full(3, 0.0), layout)
    assert drop[0] == 0.0
    assert drop[1] > 5.0
    assert drop[2] > 5.0


def test_warmup_scores_zero_until_enough_observations() -> None:
    """The first `warmup` observations of a column score 0, the next one can score."""
    x = np.zeros((12, 1))
    x[::2] = 1.0
    x[10] = 100.0
    scores = feed(RobustZScore(half_life_s=100.0, warmup=10), x)[:, 0]
    assert np.array_equal(np.zeros(10), scores[:10])
    assert scores[10] > 10.0


def test_long_silence_restarts_warmup() -> None:
    """After ~20 half-lives without data the history is forgotten and warm-up starts again."""
    scorer, _ = warmed(n=1)
    layout = flat_layout(1)
    assert scorer.update(30 * 100.0 + 300, np.array([1e6]), layout)[0] == 0.0


def test_bad_parameters_and_state_raise_project_errors() -> None:
    """Invalid parameters raise ConfigError; an incomplete state raises StateError."""
    with pytest.raises(ConfigError, match="half_life_s"):
        RobustZScore(half_life_s=0.0)
    scorer, _ = warmed()
    state = scorer.state_dict()
    del state["var"]
    with pytest.raises(StateError, match="var"):
        RobustZScore().load_state_dict(state)
