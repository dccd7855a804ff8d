"""TelemetryHealth: targets down, vanished GPUs, missing series, slow scrapes; the rest scores 0."""

from __future__ import annotations

import numpy as np
import pytest

from detector.scorers.health import (
    KIND_DEFICIT,
    KIND_EXCESS,
    KIND_LOGZ,
    KIND_UP,
    TelemetryHealth,
    health_kind,
)
from detector.scorers.registry import grid_layout

TICK_S = 15.0
LAYOUT = grid_layout(
    3,
    8,
    ("gpu_temp",),
    (
        "health_up",
        "health_gpu_count",
        "health_series_missing_fraction",
        "health_scrape_duration",
    ),
    directions={"health_scrape_duration": 1},
)
WIDTH = 8 + 4  # columns per node
UP, COUNT, MISSING, DURATION = 8, 9, 10, 11  # offsets within a node


def nominal(ticks: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.tile(np.r_[np.full(8, 60.0), 1.0, 8.0, 0.0, 0.2], (ticks, 3))
    x[:, :8] += rng.normal(size=(ticks, 8))
    dur = np.arange(3) * WIDTH + DURATION
    x[:, dur] = 0.2 * np.exp(0.05 * rng.normal(size=(ticks, 3)))
    return x


def run(x: np.ndarray, scorer: TelemetryHealth | None = None) -> np.ndarray:
    s = scorer or TelemetryHealth()
    return np.stack([s.update(i * TICK_S, row, LAYOUT) for i, row in enumerate(x)])


def test_signal_names_pick_the_mechanism() -> None:
    """up, *_count, *_fraction and other health_ names map to their kinds; others to 0."""
    assert KIND_UP == health_kind("health_up")
    assert KIND_DEFICIT == health_kind("health_gpu_count")
    assert KIND_EXCESS == health_kind("health_series_missing_fraction")
    assert KIND_LOGZ == health_kind("health_scrape_duration")
    assert 0 == health_kind("gpu_temp")


def test_a_target_down_scores_down_z_and_a_partial_one_scales() -> None:
    """up=0 scores down_z at once; up=0.5 (half the target's exporters) scores half."""
    x = nominal(60)
    x[50:, 1 * WIDTH + UP] = 0.0
    x[50:, 2 * WIDTH + UP] = 0.5
    scores = run(x)
    assert np.array_equal(np.full(10, 10.0), scores[50:, 1 * WIDTH + UP])
    assert np.array_equal(np.full(10, 5.0), scores[50:, 2 * WIDTH + UP])
    assert scores[:50, UP::WIDTH].max() == 0.0


def test_a_vanished_gpu_scores_full_and_fades_once_it_is_the_new_normal() -> None:
    """8 -> 7 GPUs is a full-strength score; after several memory half-lives it fades."""
    x = nominal(400)
    x[100:, COUNT] = 7.0
    scores = run(x, TelemetryHealth(memory_half_life_s=600.0))
    assert scores[100, COUNT] == 10.0
    assert scores[100:120, COUNT].min() > 5.0
    assert scores[-1, COUNT] < 0.5
    assert scores[:, WIDTH + COUNT].max() == 0.0


def test_a_node_that_starts_with_seven_gpus_is_not_flagged() -> None:
    """The expected GPU count is learnt from the column itself, not assumed."""
    x = nominal(50)
    x[:, COUNT] = 7.0
    assert run(x)[:, COUNT].max() == 0.0


def test_a_jump_in_missing_series_scales_with_the_fraction() -> None:
    """5% of series missing scores down_z · 0.05 / full_fraction; 50% saturates."""
    x = nominal(60)
    x[40:, MISSING] = 0.05
    x[40:, WIDTH + MISSING] = 0.5
    scores = run(x)
    assert scores[40, MISSING] == pytest.approx(10.0 * 0.05 / 0.125)
    assert scores[40, WIDTH + MISSING] == 10.0


def test_rising_scrape_duration_scores_on_a_log_scale() -> None:
    """A scrape that takes 3x longer than usual is a clear robust-z surprise on log1p."""
    x = nominal(200)
    x[150:, DURATION] = 0.6
    scores = run(x)
    assert scores[150, DURATION] > 10.0
    assert scores[30:150, DURATION::WIDTH].max() < 5.0


def test_a_few_ms_stall_of_a_fast_scrape_is_noise_a_slowdown_to_seconds_is_not() -> None:
    """A local exporter answering in 2.5 ms with µs jitter, stalled to 5.1 ms for one scrape by
    a busy host, stays below the fusion's z0 of 3 (log_floor); the same scrape slowing to
    1 s (a DCGM call blocked on a bad GPU) is far beyond it."""
    rng = np.random.default_rng(1)
    x = nominal(200)
    dur = np.arange(3) * WIDTH + DURATION
    x[:, dur] = 0.0025 + 2e-6 * rng.normal(size=(200, 3))
    x[150, DURATION] = 0.0051
    x[170:, WIDTH + DURATION] = 1.0
    scores = run(x)
    assert scores[150, DURATION] < 3.0
    assert scores[170, WIDTH + DURATION] > 20.0
    # without the floor the stall is the 50-sigma deviant the floor is there for
    assert run(x, TelemetryHealth(log_floor=1e-5))[150, DURATION] >= 50.0  # the cap


def test_non_health_columns_always_score_zero() -> None:
    """GPU temperature columns are for the other scorers: this one leaves them at 0."""
    x = nominal(100)
    x[50:, 3] += 40.0
    scores = run(x)
    gpu_cols = np.flatnonzero(LAYOUT.gpu >= 0)
    assert scores[:, gpu_cols].max() == 0.0
