"""RangeNovelty: a value beyond the column's all-time range (plus a tolerance) is an anomaly."""

from __future__ import annotations

import numpy as np
import pytest

from detector.errors import ConfigError
from detector.model import ColumnLayout, FloatArray
from detector.scorers.novelty import RangeNovelty
from detector.scorers.registry import grid_layout

UP = grid_layout(1, 1, ("value",), directions={"value": 1})
BOTH = grid_layout(1, 1, ("value",))


def feed(scorer: RangeNovelty, values: list[float], layout: ColumnLayout) -> FloatArray:
    return np.array(
        [scorer.update(float(i), np.array([v]), layout)[0] for i, v in enumerate(values)]
    )


def history() -> list[float]:
    """30 values spanning exactly [0, 10]."""
    return [float(v % 11) for v in range(30)]


def test_new_extreme_fires_once_then_belongs_to_the_range() -> None:
    """12 after a [0, 10] history scores alarm_z + 3 tolerance widths; repeating it scores 0."""
    out = feed(RangeNovelty(tolerance=0.05, alarm_z=6.0), [*history(), 12.0, 12.0], BOTH)
    assert 0.0 == out[:30].max()
    assert 6.0 + (2.0 - 0.5) / 0.5 == pytest.approx(out[30])
    assert 0.0 == out[31]


def test_within_tolerance_is_silent() -> None:
    """10.4 and -0.4 are within 5 % of a width-10 range: no score."""
    out = feed(RangeNovelty(), [*history(), 10.4, -0.4], BOTH)
    assert 0.0 == out.max()


def test_direction_up_ignores_a_new_minimum() -> None:
    """A column that is only bad upwards does not alarm on a new low."""
    out = feed(RangeNovelty(), [*history(), -20.0, 30.0], UP)
    assert 0.0 == out[30]
    assert out[31] > 6.0


def test_warmup_and_flat_history_never_score() -> None:
    """Before warmup values, and while every value was equal, nothing is novel."""
    assert 0.0 == feed(RangeNovelty(warmup=20), [0.0, 10.0, 100.0, 1000.0], BOTH).max()
    assert 0.0 == feed(RangeNovelty(warmup=5), [3.0] * 10 + [4.0], BOTH).max()


def test_huge_excursion_is_capped() -> None:
    """A jump of twelve orders of magnitude scores the cap, not inf."""
    out = feed(RangeNovelty(), [*history(), 1e12], BOTH)
    assert 50.0 == out[30]


@pytest.mark.parametrize("kwargs", [{"tolerance": 0.0}, {"warmup": 0}, {"alarm_z": 0.0}])
def test_bad_parameters_raise_config_error(kwargs: dict[str, float]) -> None:
    """Nonsensical parameters are refused with ConfigError."""
    with pytest.raises(ConfigError):
        RangeNovelty(**kwargs)  # type: ignore[arg-type]
