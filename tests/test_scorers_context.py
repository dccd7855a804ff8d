"""ContextNovelty (detector/scorers/context.py): novel contexts of quantized values."""

from __future__ import annotations

import numpy as np
import pytest

from detector.errors import ConfigError, StateError
from detector.model import FloatArray
from detector.scorers.base import ColumnLayout
from detector.scorers.context import ContextNovelty, normal_tail_quantile
from detector.scorers.registry import grid_layout

LAYOUT = grid_layout(1, 2, ("gpu_temp",), (), cohorts=1)  # two GPU columns


def scores_of(scorer: ContextNovelty, x: FloatArray, layout: ColumnLayout = LAYOUT) -> FloatArray:
    """Scores of every tick (ticks x columns), one tick every 10 s."""
    return np.stack([scorer.update(10.0 * i, row, layout) for i, row in enumerate(x)])


def cycle(ticks: int, period: int = 8) -> FloatArray:
    """A sawtooth 0..period-1 repeated: every context recurs once learnt."""
    return (np.arange(ticks) % period).astype(np.float64)


def test_normal_tail_quantile_matches_the_normal_table() -> None:
    """P(N > z) = 0.05, 0.001, 1e-6 give 1.645, 3.090, 4.753 (to 1e-3); p >= 1/2 gives 0."""
    z = normal_tail_quantile(np.array([0.05, 0.001, 1e-6, 0.5, 0.9]))
    np.testing.assert_allclose(z, [1.645, 3.090, 4.753, 0.0, 0.0], atol=1e-3)


def test_a_learnt_cycle_scores_zero() -> None:
    """Once a repeating pattern has gone round, nothing in it is novel: every score is 0."""
    x = np.stack([cycle(300), 5.0 * cycle(300, period=5)], axis=1)
    scores = scores_of(ContextNovelty(), x)
    assert np.array_equal(np.zeros((280, 2)), scores[20:])


def test_first_break_of_a_cycle_scores_and_its_repeat_scores_less() -> None:
    """A break of a long-learnt cycle scores > 3; the same break again later is familiar."""
    x = np.stack([cycle(2000), cycle(2000)], axis=1)
    x[1500, 0] = 7.0  # a 7 where 4 is due: in range, unseen transition 3 -> 7
    x[1700, 0] = 7.0  # 1700 % 8 == 4: the very break of tick 1500 again
    scores = scores_of(ContextNovelty(), x)
    assert scores[1500, 0] > 3.0
    assert scores[1700, 0] < scores[1500, 0]
    assert scores[:, 1].max() == 0.0  # the untouched twin column never fires


def test_gaussian_noise_is_calibrated_by_its_own_novelty_rate() -> None:
    """On noise (new long contexts all the time) scores stay low: P(z > 3) < 1 %, none > 5."""
    rng = np.random.default_rng(0)
    layout = grid_layout(10, 4, ("gpu_temp",), (), cohorts=1)
    x = rng.normal(size=(3000, len(layout)))
    scores = scores_of(ContextNovelty(), x, layout)[200:]
    assert (scores > 3.0).mean() < 0.01
    assert scores.max() < 5.0


def test_hashed_memory_catches_a_break_with_long_contexts() -> None:
    """Orders whose keys exceed the table go through the hash and still find the break."""
    scorer = ContextNovelty(orders=7, table_bits=2**16)
    assert not scorer._direct  # 10**7 keys cannot index 65,536 bits directly
    x = np.stack([cycle(1500), cycle(1500)], axis=1)
    x[1200, 0] = 1.0
    scores = scores_of(scorer, x)
    assert scores[1200, 0] > 3.0
    assert scores[100:1200].max() == 0.0


@pytest.mark.parametrize(
    "kwargs",
    [{"levels": 0}, {"orders": 0}, {"table_bits": 1000}, {"rate_half_life": 0.0}, {"warmup": -1}],
)
def test_bad_configuration_raises_config_error(kwargs: dict[str, float]) -> None:
    """Impossible parameters are refused at construction, naming the parameter."""
    with pytest.raises(ConfigError, match=next(iter(kwargs))):
        ContextNovelty(**kwargs)  # type: ignore[arg-type]


def test_state_with_a_wrong_memory_shape_is_refused() -> None:
    """A state dict whose bit table does not match the configuration raises StateError."""
    scorer = ContextNovelty()
    scores_of(scorer, np.stack([cycle(50), cycle(50)], axis=1))
    state = scorer.state_dict()
    state["memory"] = state["memory"][:, :10]
    with pytest.raises(StateError, match="memory"):
        ContextNovelty().load_state_dict(state)
