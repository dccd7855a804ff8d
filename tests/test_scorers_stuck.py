"""StuckRun: a moving column that repeats one value for longer than ever before is stuck."""

from __future__ import annotations

import numpy as np
import pytest

from detector.errors import ConfigError
from detector.model import FloatArray
from detector.scorers.registry import build, grid_layout
from detector.scorers.stuck import StuckRun

ONE = grid_layout(1, 1, ("value",))


def feed(scorer: StuckRun, values: list[float]) -> FloatArray:
    return np.array([scorer.update(float(i), np.array([v]), ONE)[0] for i, v in enumerate(values)])


def noise(n: int, seed: int = 0) -> list[float]:
    """A moving column: continuous values never repeat exactly."""
    return [float(v) for v in 50.0 + np.random.default_rng(seed).normal(size=n)]


def test_a_frozen_gauge_fires_once_after_min_run_repeats() -> None:
    """After 100 noisy values, the 101st repeated 10 more times fires on the 10th repeat only."""
    values = noise(101)
    out = feed(StuckRun(min_run=10, warmup=100, alarm_z=6.0), values + [values[-1]] * 30)
    assert [110] == np.flatnonzero(out).tolist()
    assert 6.0 == out[110]


def test_a_column_that_never_moved_is_constant_not_stuck() -> None:
    """A column constant since its first value scores 0 however long it stays so."""
    assert 0.0 == feed(StuckRun(warmup=5), [3.0] * 500).max()


def test_runs_on_record_raise_the_bar_to_twice_the_longest() -> None:
    """A sparse counter whose zeros come in runs of 30 fires only on a run of 60 (2 x 30)."""
    burst = [0.0] * 31 + [1.0]  # 30 repeats of 0, then a change
    history = burst * 10
    quiet = feed(StuckRun(min_run=10, warmup=100), [*history, *[0.0] * 50, 1.0])
    assert 0.0 == quiet.max()
    out = feed(StuckRun(min_run=10, warmup=100), [*history, *[0.0] * 70])
    assert [len(history) + 60] == np.flatnonzero(out).tolist()


def test_a_gap_neither_extends_nor_breaks_a_run() -> None:
    """NaN inside a frozen stretch scores 0; the run resumes counting after it."""
    values = noise(101)
    frozen = [values[-1]] * 5 + [float("nan")] * 7 + [values[-1]] * 5
    out = feed(StuckRun(min_run=10, warmup=100), values + frozen)
    assert [101 + 16] == np.flatnonzero(out).tolist()  # 10th repeat: 5 before the gap, 5 after


def test_a_new_run_after_a_change_can_fire_again() -> None:
    """After the value changes, a second freeze that doubles the record fires again."""
    values = noise(101)
    first = [values[-1]] * 12  # fires at its 10th repeat; record becomes 12
    moving = noise(5, seed=1)
    second = [moving[-1]] * 30  # needs 24 repeats (2 x 12)
    out = feed(StuckRun(min_run=10, warmup=100), values + first + moving + second)
    start = 101 + 12 + 5
    assert [110, start + 23] == np.flatnonzero(out).tolist()


def test_bad_parameters_raise_config_error() -> None:
    """min_run < 1, ratio < 1, negative warm-up and an alarm beyond the cap are refused."""
    for kwargs in ({"min_run": 0}, {"ratio": 0.5}, {"warmup": -1}, {"alarm_z": 80.0}):
        with pytest.raises(ConfigError):
            StuckRun(**kwargs)  # type: ignore[arg-type]


def test_registry_builds_it_by_name() -> None:
    """Config files can name it: build('stuck', ...) gives a StuckRun with those parameters."""
    scorer = build("stuck", {"min_run": 5})
    assert isinstance(scorer, StuckRun)
    assert 5 == scorer.min_run
