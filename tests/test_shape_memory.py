"""PhaseShapeMemory: the recent stretch's shape against the shapes this time of day showed."""

from __future__ import annotations

import numpy as np
import pytest

from detector.errors import ConfigError
from detector.model import FloatArray
from detector.scorers.registry import grid_layout
from detector.scorers.shape_memory import PhaseShapeMemory

STEP_S = 300.0  # NAB's and a typical scrape archive's 5-minute rows
DAY = int(86400 / STEP_S)


def daily(days: int, columns: int = 1, noise: float = 0.3, seed: int = 0) -> FloatArray:
    """A daily wave (rows x columns): low at night, a broad peak in the afternoon, plus noise."""
    rng = np.random.default_rng(seed)
    phase = 2 * np.pi * np.arange(days * DAY) / DAY
    wave = 10.0 + 5.0 * np.sin(phase - np.pi / 2)
    return wave[:, None] + noise * rng.normal(size=(days * DAY, columns))


def run(scorer: PhaseShapeMemory, x: FloatArray, step_s: float = STEP_S) -> FloatArray:
    layout = grid_layout(1, x.shape[1], ("v",))
    return np.stack([scorer.update(i * step_s, row, layout) for i, row in enumerate(x)])


def test_a_day_whose_middle_stays_flat_scores_high() -> None:
    """A day whose middle stays flat at the day's mean scores >= 5 while it lasts; the
    ordinary days before it, once learnt, stay below 3."""
    x = daily(9)
    start = 8 * DAY + DAY // 3
    x[start : start + DAY // 3, 0] = 10.0
    scores = run(PhaseShapeMemory(), x)
    assert scores[start : start + DAY // 3, 0].max() >= 5.0
    assert scores[3 * DAY : 8 * DAY, 0].max() < 3.0


def test_weekday_and_weekend_shapes_are_both_remembered() -> None:
    """Weekends with their own shape (flat all day) surprise at first, then become one of the
    remembered shapes: the fourth weekend scores far less than the first."""
    x = daily(28, noise=0.3)
    for week in range(4):
        saturday = (7 * week + 5) * DAY
        x[saturday : saturday + 2 * DAY, 0] = 10.0 + 0.3 * np.random.default_rng(week).normal(
            size=2 * DAY
        )
    scores = run(PhaseShapeMemory(), x)
    first = scores[5 * DAY : 7 * DAY, 0].max()
    fourth = scores[26 * DAY : 28 * DAY, 0].max()
    assert first >= 4.0
    assert fourth < first / 2


def test_noise_is_calibrated() -> None:
    """On Gaussian noise (40 columns, 30 days) a close scores above 4 less than once in 1000
    and never above 6."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(30 * DAY, 40))
    scores = run(PhaseShapeMemory(), x)
    closes = scores[10 * DAY :][np.arange(20 * DAY) % 9 == 0]
    assert np.mean(closes > 4.0) < 1e-3
    assert scores.max() < 6.0


def test_scores_only_on_ticks_that_close_a_block() -> None:
    """Only the first tick of each 45-minute block can score (one verdict per window)."""
    x = daily(6)
    x[5 * DAY + 100 : 5 * DAY + 160, 0] = 10.0
    scorer = PhaseShapeMemory()
    scores = run(scorer, x)[:, 0]
    block = np.floor(np.arange(x.shape[0]) * STEP_S / scorer.block_s)
    closing = np.concatenate(([False], np.diff(block) > 0))
    assert np.any(scores > 0)
    assert np.all(scores[~closing] == 0.0)


def test_hourly_rows_fill_their_blocks_and_still_catch_a_broken_day() -> None:
    """Rows coarser than a block (hourly, blocks of 45 min) are carried over the empty blocks;
    a flat afternoon on day 12 still scores >= 4 and the days before stay below 3."""
    hours = np.arange(13 * 24)
    x = 10.0 + 5.0 * np.sin(2 * np.pi * hours / 24 - np.pi / 2)
    x = x + 0.3 * np.random.default_rng(5).normal(size=hours.size)
    x[12 * 24 + 10 : 12 * 24 + 18] = 10.0
    scores = run(PhaseShapeMemory(), x[:, None], step_s=3600.0)[:, 0]
    assert scores[12 * 24 + 10 : 12 * 24 + 20].max() >= 4.0
    assert scores[4 * 24 : 12 * 24].max() < 3.0


def test_an_outage_longer_than_a_window_restarts_the_window() -> None:
    """After a 12-hour gap nothing scores until 8 new blocks (6 hours) have filled the window."""
    x = daily(8)
    scorer = PhaseShapeMemory()
    layout = grid_layout(1, 1, ("v",))
    times = np.arange(x.shape[0]) * STEP_S
    times[6 * DAY :] += 12 * 3600.0
    scores = np.array(
        [scorer.update(float(t), r, layout)[0] for t, r in zip(times, x, strict=True)]
    )
    refill = int(8 * scorer.block_s / STEP_S)
    assert np.all(scores[6 * DAY : 6 * DAY + refill] == 0.0)
    assert np.any(scores[6 * DAY + refill : 7 * DAY] > 0.0)


def test_the_dispersion_channel_sees_a_stretch_gone_quiet_at_its_usual_level() -> None:
    """Days noisy by day and quiet by night; on day 9 the afternoon goes quiet at its usual
    level: with the dispersion channel it scores a z unit above anything the ordinary days
    scored (quiet nights included), without it it stays below 1.5."""
    x = daily(10, noise=0.0)
    hour = (np.arange(x.shape[0]) % DAY) / (DAY / 24)
    loud = (hour >= 8) & (hour < 20)
    noise = np.random.default_rng(7).normal(size=x.shape[0]) * np.where(loud, 1.5, 0.2)
    x[:, 0] += noise
    quiet = slice(9 * DAY + DAY // 2, 9 * DAY + DAY // 2 + DAY // 4)
    x[quiet, 0] -= noise[quiet]
    with_dispersion = run(PhaseShapeMemory(dispersion=True), x)[:, 0]
    without = run(PhaseShapeMemory(), x)[:, 0]
    assert with_dispersion[quiet].max() > with_dispersion[3 * DAY : 9 * DAY].max() + 1.0
    assert without[quiet].max() < 1.5


@pytest.mark.parametrize(
    "params",
    [
        {"period_s": 0.0},
        {"phases": 0},
        {"width": 0},
        {"prototypes": 0},
        {"vigilance": 0.0},
        {"learn_periods": 0},
        {"floor": 0.0},
    ],
)
def test_bad_parameters_raise_config_error(params: dict[str, float]) -> None:
    """Nonsense parameters are refused with a ConfigError naming the scorer."""
    with pytest.raises(ConfigError, match="shape memory"):
        PhaseShapeMemory(**params)  # type: ignore[arg-type]
