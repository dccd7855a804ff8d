"""WindowMemory (detector/scorers/window_memory.py): windows unlike any remembered one."""

from __future__ import annotations

import numpy as np
import pytest

from detector.errors import ConfigError, StateError
from detector.model import FloatArray
from detector.scorers.base import ColumnLayout
from detector.scorers.registry import grid_layout
from detector.scorers.window_memory import WindowMemory

LAYOUT = grid_layout(1, 2, ("gpu_temp",), (), cohorts=1)  # two GPU columns


def scores_of(scorer: WindowMemory, x: FloatArray, layout: ColumnLayout = LAYOUT) -> FloatArray:
    """Scores of every tick (ticks x columns), one tick every 10 s."""
    return np.stack([scorer.update(10.0 * i, row, layout) for i, row in enumerate(x)])


def daily(ticks: int, period: int = 24) -> FloatArray:
    """A smooth periodic profile (a 'day' of ``period`` observations) repeated."""
    return 50.0 + 10.0 * np.sin(2.0 * np.pi * np.arange(ticks) / period)


def test_a_learnt_cycle_scores_zero() -> None:
    """Once a periodic profile has been remembered, its windows are never novel: scores are 0."""
    x = np.stack([daily(1200), daily(1200, period=32)], axis=1)
    scores = scores_of(WindowMemory(), x)
    assert np.array_equal(np.zeros((800, 2)), scores[400:])


def test_a_skipped_beat_scores_high_and_its_repeat_scores_less() -> None:
    """A cycle that goes flat for one period scores high the first time; the same break a
    second time is remembered and scores less; the intact column stays at 0."""
    x = np.stack([daily(2000), daily(2000)], axis=1)
    x[1000:1024, 0] = 50.0
    x[1600:1624, 0] = 50.0
    scores = scores_of(WindowMemory(), x)
    first, second = scores[1000:1060, 0].max(), scores[1600:1660, 0].max()
    assert first >= 4.0
    assert second < first
    assert scores[400:, 1].max() == 0.0


def test_scores_only_when_a_block_completes() -> None:
    """Scores are emitted on a column's every ``block``-th observation, 0 in between."""
    x = np.random.default_rng(1).normal(size=(600, 2))
    x[300:310, 0] += 8.0
    scores = scores_of(WindowMemory(block=5), x)
    between = (np.arange(600) + 1) % 5 != 0
    assert scores[between].max() == 0.0
    assert scores[~between].max() > 0.0


def test_gaussian_noise_rarely_scores() -> None:
    """On 40 white-noise columns a window is never remembered, yet ranked against the column's
    own novelties fewer than 1 block score in 500 exceeds 2 and none exceeds 4."""
    layout = grid_layout(1, 40, ("gpu_temp",), (), cohorts=1)
    x = np.random.default_rng(0).normal(size=(3000, 40))
    scores = scores_of(WindowMemory(), x, layout)[400:]
    blocks = scores[(np.arange(400, 3000) + 1) % 4 == 0]
    assert (blocks > 2.0).mean() < 2e-3
    assert blocks.max() < 4.0


def test_memory_is_bounded_and_keeps_the_category_in_use() -> None:
    """With room for 32 prototypes, a stream of ever-new windows recycles slots, and a pattern
    that keeps coming back is still remembered at the end."""
    rng = np.random.default_rng(2)
    home = daily(32, period=32)  # one period: 8 blocks of 4, exactly one window
    segments = []
    for _ in range(60):  # home, then noise over the same range that never repeats
        segments += [home, rng.uniform(40.0, 60.0, size=32)]
    x = np.stack([np.concatenate(segments)] * 2, axis=1)
    scorer = WindowMemory(block=4, width=8, prototypes=32, warmup=0)
    scores_of(scorer, x)
    reference = WindowMemory(block=4, width=8)
    scores_of(reference, home[:, None].repeat(2, axis=1))
    assert scorer.memory.shape == (2, 32, 8)
    assert (scorer.matches > 0).all()  # every slot filled: ~900 new windows went through 32
    span = scorer.high[0] - scorer.low[0]
    distance = np.abs(scorer.memory[0] - reference.window[0][None, :]).mean(axis=1) / span
    assert distance.min() < scorer.vigilance


def test_columns_are_scored_independently() -> None:
    """Two columns scored together equal each scored alone (vectorized, no cross-talk)."""
    rng = np.random.default_rng(3)
    x = np.stack([daily(800) + rng.normal(size=800), rng.normal(size=800) * 5.0], axis=1)
    x[500:520, 0] = 40.0
    together = scores_of(WindowMemory(), x)
    one = grid_layout(1, 1, ("gpu_temp",), (), cohorts=1)
    for c in range(2):
        alone = scores_of(WindowMemory(), x[:, c : c + 1], one)
        assert np.array_equal(alone[:, 0], together[:, c])


@pytest.mark.parametrize(
    "kwargs",
    [{"block": 0}, {"width": 0}, {"prototypes": 0}, {"vigilance": 0.0}, {"warmup": -1}],
)
def test_bad_configuration_raises_config_error(kwargs: dict[str, float]) -> None:
    """Non-positive sizes, vigilance or a negative warm-up are refused at construction."""
    with pytest.raises(ConfigError):
        WindowMemory(**kwargs)  # type: ignore[arg-type]


def test_state_of_another_shape_raises_state_error() -> None:
    """A state saved with another memory size is refused, naming the array."""
    saved = WindowMemory(prototypes=8)
    scores_of(saved, daily(100)[:, None].repeat(2, axis=1))
    with pytest.raises(StateError, match="memory"):
        WindowMemory(prototypes=16).load_state_dict(saved.state_dict())
