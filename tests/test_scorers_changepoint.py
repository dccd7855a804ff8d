"""ChangePoint: sustained shifts and drifts alarm, lone spikes do not, re-baselining after."""

from __future__ import annotations

import numpy as np

from detector.model import FloatArray
from detector.scorers.changepoint import ChangePoint
from detector.scorers.registry import grid_layout
from detector.scorers.zscore import RobustZScore

TICK_S = 15.0
START = 600  # ticks of clean history before anything is planted (2.5 h)
LAYOUT = grid_layout(1, 0, (), ("value",))


def series(ticks: int, seed: int) -> FloatArray:
    return 100.0 + np.random.default_rng(seed).normal(size=ticks)


def scores_of(scorer: ChangePoint | RobustZScore, x: FloatArray) -> FloatArray:
    return np.array([scorer.update(i * TICK_S, np.array([v]), LAYOUT)[0] for i, v in enumerate(x)])


def first_tick(mask: FloatArray) -> int | None:
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.shape[0] else None


def test_one_sigma_shift_alarms_within_minutes_where_zscore_stays_quiet() -> None:
    """A sustained +1 sigma step reaches the alarm level within ~10 minutes."""
    x = series(START + 200, seed=0)
    x[START:] += 1.0
    cp = ChangePoint()
    cp_scores = scores_of(cp, x)
    z_scores = scores_of(RobustZScore(), x)
    alarm = first_tick(cp_scores[START:] >= cp.alarm_z)
    assert alarm is not None
    assert alarm * TICK_S <= 600.0
    assert np.isfinite(cp.time_since_change(len(x) * TICK_S)[0])
    assert np.mean(z_scores[START:] > 4.0) < 0.02


def test_a_lone_five_sigma_spike_does_not_alarm() -> None:
    """One 5-sigma point adds at most (clip - k) sigmas: scored well below the alarm level."""
    x = series(START + 50, seed=1)
    x[START] += 5.0
    cp = ChangePoint()
    scores = scores_of(cp, x)
    assert scores[START] < 0.5 * cp.alarm_z
    assert np.isinf(cp.time_since_change(len(x) * TICK_S)[0])


def test_a_slow_drift_is_caught_long_before_the_zscore_notices() -> None:
    """A ramp of 0.3 sigma per hour (each point within noise) alarms; the z-score lags."""
    ticks = START + 2000
    x = series(ticks, seed=2)
    x[START:] += np.arange(ticks - START) * (0.3 / 240)
    cp = ChangePoint()
    cp_alarm = first_tick(scores_of(cp, x)[START:] >= cp.alarm_z)
    z_alarm = first_tick(scores_of(RobustZScore(), x)[START:] >= 4.0)
    assert cp_alarm is not None
    assert z_alarm is None or z_alarm > 2 * cp_alarm


def test_after_a_change_the_new_level_becomes_the_baseline() -> None:
    """A 3-sigma step alarms once, then scores settle: the change is not re-alarmed for hours."""
    x = series(START + 1500, seed=3)
    x[START:] += 3.0
    cp = ChangePoint()
    scores = scores_of(cp, x)
    end = len(x) * TICK_S
    since = cp.time_since_change(end)[0]
    first = first_tick(scores[START:] >= cp.alarm_z)
    assert first is not None
    assert since >= end - (START + first + 60) * TICK_S  # no repeated alarm after settling
    assert abs(cp.baseline.mean[0] - 103.0) < 0.5
    assert np.median(scores[-300:]) < 2.0


def test_the_alarm_score_is_held_and_fades_with_its_half_life() -> None:
    """After a change the score decays by half every hold_half_life_s (CUSUM itself reset)."""
    x = np.full(START + 400, 100.0) + np.random.default_rng(4).normal(size=START + 400) * 1e-3
    x[START:] += 1.0  # a 1000-sigma step: alarms at once, then the series is flat again
    cp = ChangePoint(hold_half_life_s=600.0)
    scores = scores_of(cp, x)
    change_tick = START + first_tick(scores[START:] >= cp.alarm_z)  # type: ignore[operator]
    later = change_tick + 40  # 600 s later
    assert abs(scores[later] - scores[change_tick] / 2) < 0.05 * scores[change_tick]


def test_direction_limits_the_score_but_changes_are_still_recorded() -> None:
    """A drop on an 'only increases matter' column scores 0 yet restarts time_since_change."""
    layout = grid_layout(1, 0, (), ("temp", "any"), directions={"temp": 1})
    x = series(START + 100, seed=5)
    x[START:] -= 3.0
    cp = ChangePoint()
    scores = np.array([cp.update(i * TICK_S, np.array([v, v]), layout) for i, v in enumerate(x)])
    assert scores[START:, 1].max() >= cp.alarm_z
    assert scores[START:, 0].max() < 0.5 * cp.alarm_z
    assert np.isfinite(cp.time_since_change(len(x) * TICK_S)).all()


def test_a_change_the_direction_ignores_leaves_the_baseline_alone() -> None:
    """A link state (5) that flaps up (6) in clumps, scored only downwards: a clump detects an
    up-change, but moving the baseline to it made the return to 5 a down-change that alarmed
    (bench/robustness.py found it on a flapping node). The baseline stays; a real drop to 3
    still alarms, and a column scoring both sides still re-baselines."""
    layout = grid_layout(1, 0, (), ("down", "both"), directions={"down": -1})
    x = np.full(4 * START, 5.0)
    flaps = np.random.default_rng(1).random(x.shape[0]) < 0.01
    flaps[START : START + 8 : 2] = True  # a clump: four flaps in eight ticks
    x[flaps] = 6.0
    drop = 3 * START
    x[drop:] = 3.0
    cp = ChangePoint()
    scores = np.array([cp.update(i * TICK_S, np.array([v, v]), layout) for i, v in enumerate(x)])
    assert scores[START:drop, 0].max() < 1.0
    assert scores[START:drop, 1].max() >= cp.alarm_z  # both sides: the clump itself alarms
    assert scores[drop:, 0].max() >= cp.alarm_z
