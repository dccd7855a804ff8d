"""AnomalyLikelihood: any scorer's output calibrated against each column's own history."""

from __future__ import annotations

import math

import numpy as np
import pytest

from detector.errors import ConfigError
from detector.model import ColumnLayout, FloatArray
from detector.scorers.likelihood import AnomalyLikelihood, surprisal_bits
from detector.scorers.registry import grid_layout
from detector.scorers.zscore import RobustZScore

TICK_S = 10.0


class Replay:
    """Fake inner scorer: returns prepared raw scores, one row per call (NaN inputs -> 0)."""

    name = "replay"

    def __init__(self, raw: FloatArray) -> None:
        self.raw = raw
        self.tick = 0

    def update(self, t: float, x: FloatArray, layout: ColumnLayout) -> FloatArray:
        row = np.where(np.isfinite(x), self.raw[self.tick], 0.0)
        self.tick += 1
        return row

    def state_dict(self) -> dict[str, np.ndarray]:
        return {"tick": np.array([float(self.tick)])}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.tick = int(state["tick"][0])


def run_raw(raw: FloatArray, **kwargs: float) -> FloatArray:
    """Likelihood scores of prepared raw inner scores (ticks x columns)."""
    layout = grid_layout(1, raw.shape[1], ("value",))
    scorer = AnomalyLikelihood(Replay(raw), short_half_life_s=35.0, long_half_life_s=30000.0)
    x = np.zeros(raw.shape[1])
    return np.stack([scorer.update(i * TICK_S, x, layout) for i in range(raw.shape[0])])


def test_surprisal_bits_matches_the_exact_normal_tail() -> None:
    """-log2 erfc(z / sqrt 2) within 0.05 % for z in [0, 8], finite far beyond."""
    z = np.linspace(0.0, 8.0, 401)
    exact = np.array([-math.log2(math.erfc(v / math.sqrt(2.0))) for v in z])
    np.testing.assert_allclose(surprisal_bits(z), exact, rtol=5e-4, atol=1e-3)
    assert np.isfinite(surprisal_bits(np.array([50.0, 1e6]))).all()


def test_gaussian_noise_through_a_z_score_is_calibrated() -> None:
    """Calibrated inner z-scores on noise: the likelihood is rarely above 4, never above 6."""
    rng = np.random.default_rng(0)
    layout = grid_layout(1, 200, ("value",))
    scorer = AnomalyLikelihood(RobustZScore(half_life_s=30000, warmup=20))
    x = rng.normal(size=(2500, 200))
    out = np.stack([scorer.update(i * TICK_S, row, layout) for i, row in enumerate(x)])[500:]
    assert np.mean(out > 4.0) < 1e-3
    assert out.max() < 6.0


def test_bursty_and_quiet_columns_alarm_equally_rarely() -> None:
    """Raw scores from a heavy-tailed column alarm ~100x more than a calibrated one; after
    the likelihood, their rates above 4 are within a factor of 5 of each other."""
    rng = np.random.default_rng(1)
    quiet = np.abs(rng.normal(size=(4000, 100)))
    bursty = np.abs(rng.standard_t(2, size=(4000, 100))) * 2.0
    assert np.mean(bursty > 5.0) > 100 * np.mean(quiet > 5.0)
    out = run_raw(np.hstack([quiet, bursty]))[1000:]
    rate_quiet = np.mean(out[:, :100] > 4.0)
    rate_bursty = np.mean(out[:, 100:] > 4.0)
    assert rate_bursty < 5 * max(rate_quiet, 1e-4)


def test_sustained_surprise_outscores_a_single_blip() -> None:
    """Five ticks at z = 4 in a row outscore one tick at z = 8 (averaging is the point)."""
    rng = np.random.default_rng(2)
    raw = np.abs(rng.normal(size=(1500, 2)))
    raw[1200, 0] = 8.0
    raw[1200:1205, 1] = 4.0
    out = run_raw(raw)
    assert out[1200:1215, 1].max() > out[1200:1215, 0].max()
    assert out[1200:1215, 1].max() > 5.0


def test_inner_warmup_zeros_stay_out_of_the_history() -> None:
    """The first ``skip`` raw scores do not count: a column that starts with a long run of
    zeros (an inner warm-up) is not called anomalous when real scores begin."""
    rng = np.random.default_rng(3)
    raw = np.abs(rng.normal(size=(800, 50)))
    raw[:20] = 0.0
    out = run_raw(raw)
    assert out[:300].max() < 5.0


def test_state_carries_the_inner_scorer() -> None:
    """state_dict holds the inner scorer's arrays under 'inner.' and restores them."""
    scorer = AnomalyLikelihood(Replay(np.zeros((10, 1))))
    layout = grid_layout(1, 1, ("value",))
    for i in range(3):
        scorer.update(i * TICK_S, np.zeros(1), layout)
    state = scorer.state_dict()
    assert np.array_equal(np.array([3.0]), state["inner.tick"])
    fresh = AnomalyLikelihood(Replay(np.zeros((10, 1))))
    fresh.load_state_dict(state)
    assert 3 == fresh.inner.tick  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"short_half_life_s": 0.0},
        {"short_half_life_s": 100.0, "long_half_life_s": 50.0},
        {"skip": -1},
        {"full_surprise_z": 0.0},
    ],
)
def test_bad_parameters_raise_config_error(kwargs: dict[str, float]) -> None:
    """Nonsensical parameters are refused with ConfigError."""
    with pytest.raises(ConfigError):
        AnomalyLikelihood(Replay(np.zeros((1, 1))), **kwargs)  # type: ignore[arg-type]
