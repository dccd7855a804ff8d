"""The contract every scorer honours (detector/scorers/base.py), one suite parametrized over all.

Each case builds a scorer with test-sized time constants (``scale`` multiplies every time
parameter, for the time-invariance check) and plants the kind of anomaly that scorer is for.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from detector.model import FloatArray
from detector.scorers.base import SCORE_CAP, ColumnLayout, Scorer, update_columns
from detector.scorers.bocpd import BayesianChangePoint
from detector.scorers.changepoint import ChangePoint
from detector.scorers.context import ContextNovelty
from detector.scorers.counts import CountBurst
from detector.scorers.forecast import ForecastError
from detector.scorers.health import TelemetryHealth
from detector.scorers.likelihood import AnomalyLikelihood
from detector.scorers.novelty import RangeNovelty
from detector.scorers.own_past import OwnPast
from detector.scorers.peers import PeerDeviation
from detector.scorers.registry import grid_layout
from detector.scorers.seasonal import SeasonalProfile
from detector.scorers.shape_memory import PhaseShapeMemory
from detector.scorers.stuck import StuckRun
from detector.scorers.window_memory import WindowMemory
from detector.scorers.zscore import RobustZScore

GPU_SIGNALS = ("gpu_temp", "gpu_power")
NODE_SIGNALS = (
    "node_load",
    "health_up",
    "health_gpu_count",
    "health_scrape_duration",
    "health_series_missing_fraction",
)
TICK_S = 10.0
PLANT_AT = 200


def layout_for(nodes: int) -> ColumnLayout:
    """6 nodes x 8 GPUs x 2 GPU signals + 5 node signals (health included), 2 cohorts."""
    return grid_layout(nodes, 8, GPU_SIGNALS, NODE_SIGNALS, cohorts=2)


LAYOUT = layout_for(6)


def column(layout: ColumnLayout, signal: str, node: int, gpu: int = -1) -> int:
    """Index of one column of a grid layout."""
    sid = layout.signal_names.index(signal)
    hit = np.flatnonzero((layout.signal == sid) & (layout.node == node) & (layout.gpu == gpu))
    return int(hit[0])


def normal_stream(layout: ColumnLayout, ticks: int, seed: int) -> FloatArray:
    """Healthy telemetry: Gaussian noise around per-signal levels, health columns nominal."""
    rng = np.random.default_rng(seed)
    level = {"gpu_temp": 60.0, "gpu_power": 500.0, "node_load": 20.0}
    noise = {"gpu_temp": 1.0, "gpu_power": 10.0, "node_load": 2.0}
    names = [layout.signal_names[s] for s in layout.signal]
    base = np.array([level.get(n, 0.0) for n in names])
    sd = np.array([noise.get(n, 0.0) for n in names])
    x = base + rng.normal(size=(ticks, len(layout))) * sd
    x[:, layout.signal == layout.signal_names.index("health_up")] = 1.0
    x[:, layout.signal == layout.signal_names.index("health_gpu_count")] = 8.0
    dur = layout.signal == layout.signal_names.index("health_scrape_duration")
    x[:, dur] = 0.2 * np.exp(0.05 * rng.normal(size=(ticks, int(dur.sum()))))
    x[:, layout.signal == layout.signal_names.index("health_series_missing_fraction")] = 0.0
    return x


@dataclass(frozen=True)
class Case:
    """One scorer under contract: how to build it and which anomaly it must separate."""

    name: str
    make: Callable[[float], Scorer]  # time scale -> scorer
    target: int  # the planted column
    plant: Callable[[FloatArray], None]  # edits the stream (ticks x columns) in place
    min_score: float  # the planted column must reach at least this


def _spike(x: FloatArray) -> None:
    x[PLANT_AT, column(LAYOUT, "gpu_temp", 1, 3)] += 10.0


def _shift(x: FloatArray) -> None:
    x[PLANT_AT:, column(LAYOUT, "gpu_temp", 1, 3)] += 2.0


def _lone_gpu(x: FloatArray) -> None:
    x[PLANT_AT:, column(LAYOUT, "gpu_power", 2, 5)] += 80.0


def _burst(x: FloatArray) -> None:
    x[PLANT_AT, column(LAYOUT, "gpu_temp", 1, 3)] += 30.0


def _jump(x: FloatArray) -> None:
    x[PLANT_AT:, column(LAYOUT, "gpu_temp", 1, 3)] += 6.0


def _pattern_break(x: FloatArray) -> None:
    """A column cycling 60..67 breaks its cycle once, staying inside its range."""
    target = column(LAYOUT, "gpu_temp", 1, 3)
    x[:, target] = 60.0 + np.arange(x.shape[0]) % 8
    x[PLANT_AT, target] = 67.0


def _freeze(x: FloatArray) -> None:
    """A moving column repeats its last value from PLANT_AT on (a frozen gauge)."""
    target = column(LAYOUT, "gpu_temp", 1, 3)
    x[PLANT_AT:, target] = x[PLANT_AT - 1, target]


def _day_breaks(x: FloatArray) -> None:
    """A column with a daily wave ('day' of 48 ticks) stays at its mean for half a day:
    every value inside the column's range, the shape of the day new."""
    target = column(LAYOUT, "gpu_temp", 1, 3)
    x[:, target] = (
        60.0 + 5.0 * np.sin(2 * np.pi * np.arange(x.shape[0]) / 48) + 0.5 * (x[:, target] - 60.0)
    )
    x[PLANT_AT : PLANT_AT + 24, target] = 60.0


def _node_down(x: FloatArray) -> None:
    x[PLANT_AT:, column(LAYOUT, "health_up", 4)] = 0.0


CASES = [
    Case(
        "zscore",
        lambda s: RobustZScore(half_life_s=300 * s, warmup=10),
        column(LAYOUT, "gpu_temp", 1, 3),
        _spike,
        8.0,
    ),
    Case(
        "changepoint",
        lambda s: ChangePoint(
            half_life_s=3000 * s, warmup=20, memory_half_life_s=600 * s, hold_half_life_s=300 * s
        ),
        column(LAYOUT, "gpu_temp", 1, 3),
        _shift,
        6.0,
    ),
    Case(
        "bocpd",
        lambda s: BayesianChangePoint(half_life_s=3000 * s, warmup=20, expected_run_s=3000 * s),
        column(LAYOUT, "gpu_temp", 1, 3),
        _shift,
        4.0,
    ),
    Case(
        "peers",
        lambda s: PeerDeviation(
            smooth_half_life_s=10 * s, scale_half_life_s=600 * s, baseline_half_life_s=3000 * s
        ),
        column(LAYOUT, "gpu_power", 2, 5),
        _lone_gpu,
        5.0,
    ),
    Case(
        "counts",
        lambda s: CountBurst(
            half_life_s=3000 * s, prior_time_s=30 * s, prior_interval_s=300 * s, warmup_s=500 * s
        ),
        column(LAYOUT, "gpu_temp", 1, 3),
        _burst,
        6.0,
    ),
    Case(
        "health",
        lambda s: TelemetryHealth(memory_half_life_s=3000 * s, log_half_life_s=300 * s, warmup=10),
        column(LAYOUT, "health_up", 4),
        _node_down,
        10.0,
    ),
    Case(
        "forecast",
        lambda s: ForecastError(
            level_half_lives_s=(5 * s, 20 * s, 80 * s), scale_half_life_s=600 * s, warmup=10
        ),
        column(LAYOUT, "gpu_temp", 1, 3),
        _spike,
        8.0,
    ),
    # seasonal twins on a 'day' of 480 s (48 ticks): the profile fades in before the spike
    Case(
        "forecastSeasonal",
        lambda s: ForecastError(
            level_half_lives_s=(5 * s, 20 * s, 80 * s),
            scale_half_life_s=600 * s,
            warmup=10,
            season_period_s=480 * s,
            season_bins=8,
        ),
        column(LAYOUT, "gpu_temp", 1, 3),
        _spike,
        8.0,
    ),
    Case(
        "likelihood",
        lambda s: AnomalyLikelihood(
            ForecastError(level_half_lives_s=(40 * s, 160 * s), scale_half_life_s=3000 * s),
            short_half_life_s=30 * s,
            long_half_life_s=3000 * s,
            warmup=50,
        ),
        column(LAYOUT, "gpu_temp", 1, 3),
        _jump,
        5.0,
    ),
    Case("range", lambda s: RangeNovelty(), column(LAYOUT, "gpu_temp", 1, 3), _spike, 6.0),
    # no clock inside (a sequence of observations), so the time-scale check holds trivially
    Case(
        "context",
        lambda s: ContextNovelty(),
        column(LAYOUT, "gpu_temp", 1, 3),
        _pattern_break,
        2.5,
    ),
    # a 'day' of 480 s in 8 bins: 6 ticks per bin, learnt after 2 of the 5 days before the spike
    Case(
        "seasonal",
        lambda s: SeasonalProfile(period_s=480 * s, bins=8),
        column(LAYOUT, "gpu_temp", 1, 3),
        _spike,
        5.0,
    ),
    # no clock inside either; the cycle of 8 fills two blocks of 4, the break changes one
    Case(
        "window",
        lambda s: WindowMemory(),
        column(LAYOUT, "gpu_temp", 1, 3),
        _pattern_break,
        4.0,
    ),
    # a 'day' of 480 s in 8 phases of 6 ticks, windows of 4 blocks: learnt from day 3
    Case(
        "shape",
        lambda s: PhaseShapeMemory(period_s=480 * s, phases=8, width=4, warmup=8),
        column(LAYOUT, "gpu_temp", 1, 3),
        _day_breaks,
        5.0,
    ),
    Case(
        "shapeDispersion",
        lambda s: PhaseShapeMemory(period_s=480 * s, phases=8, width=4, warmup=8, dispersion=True),
        column(LAYOUT, "gpu_temp", 1, 3),
        _day_breaks,
        5.0,
    ),
    # the NAB preset, durations in observations of one tick, a 'day' of 480 s in 8 bins
    Case(
        "own_past",
        lambda s: OwnPast(observation_s=TICK_S * s, season_period_s=480 * s, season_bins=8),
        column(LAYOUT, "gpu_temp", 1, 3),
        _spike,
        6.0,
    ),
    # no clock inside (runs in observations); noise never repeats, the frozen column does
    Case(
        "stuck",
        lambda s: StuckRun(warmup=50),
        column(LAYOUT, "gpu_temp", 1, 3),
        _freeze,
        6.0,
    ),
]


def run(scorer: Scorer, x: FloatArray, layout: ColumnLayout, t0: float = 0.0) -> FloatArray:
    """Scores of every tick (ticks x columns)."""
    return np.stack([scorer.update(t0 + i * TICK_S, row, layout) for i, row in enumerate(x)])


@pytest.fixture(params=CASES, ids=[c.name for c in CASES])
def case(request: pytest.FixtureRequest) -> Case:
    return request.param  # type: ignore[no-any-return]


def test_scores_are_finite_bounded_even_with_hostile_inputs(case: Case) -> None:
    """NaN, ±inf, 1e300 and 1e12 + noise inputs never yield NaN/inf or out-of-range scores."""
    x = normal_stream(LAYOUT, 300, seed=1)
    rng = np.random.default_rng(2)
    x[:, 0] = 1e12 + rng.normal(size=300)
    x[::7, 1] = np.nan
    x[::11, 2] = np.inf
    x[::13, 3] = -np.inf
    x[::17, 4] = 1e300
    x[150:, 5] = 1e12  # a jump of twelve orders of magnitude
    x[rng.random(x.shape) < 0.05] = np.nan
    scores = run(case.make(1.0), x, LAYOUT)
    assert np.isfinite(scores).all()
    assert scores.min() >= 0.0
    assert scores.max() <= SCORE_CAP


def test_same_seed_gives_identical_scores(case: Case) -> None:
    """Two fresh scorers fed the same seeded stream return bit-identical scores."""
    x = normal_stream(LAYOUT, 250, seed=3)
    case.plant(x)
    assert np.array_equal(run(case.make(1.0), x, LAYOUT), run(case.make(1.0), x, LAYOUT))


def test_state_round_trip_continues_identically(case: Case) -> None:
    """Restoring state_dict into a fresh scorer continues exactly like the original."""
    x = normal_stream(LAYOUT, 300, seed=4)
    case.plant(x)
    x[np.random.default_rng(5).random(x.shape) < 0.1] = np.nan
    original = case.make(1.0)
    run(original, x[:PLANT_AT], LAYOUT)
    state = copy.deepcopy(original.state_dict())
    assert all(isinstance(v, np.ndarray) for v in state.values())
    restored = case.make(1.0)
    restored.load_state_dict(state)
    t0 = PLANT_AT * TICK_S
    expected = run(original, x[PLANT_AT:], LAYOUT, t0)
    assert np.array_equal(expected, run(restored, x[PLANT_AT:], LAYOUT, t0))


def test_missing_values_score_zero_and_leave_state_alone(case: Case) -> None:
    """NaN columns score 0, and a tick with nothing observed changes no state at all."""
    x = normal_stream(LAYOUT, 250, seed=6)
    case.plant(x)
    scorer = case.make(1.0)
    run(scorer, x[:PLANT_AT], LAYOUT)
    before = copy.deepcopy(scorer.state_dict())
    blank = scorer.update(PLANT_AT * TICK_S, np.full(len(LAYOUT), np.nan), LAYOUT)
    after = scorer.state_dict()
    assert np.array_equal(np.zeros(len(LAYOUT)), blank)
    assert before.keys() == after.keys()
    assert all(np.array_equal(before[k], after[k]) for k in before)
    row = x[PLANT_AT + 1].copy()
    row[case.target] = np.nan
    assert scorer.update((PLANT_AT + 1) * TICK_S, row, LAYOUT)[case.target] == 0.0


def test_appended_columns_leave_existing_gpu_scores_unchanged(case: Case) -> None:
    """Columns appended mid-stream grow the output; existing GPU columns score as before."""
    wide = layout_for(8)
    x = normal_stream(wide, 300, seed=7)
    narrow_n = len(LAYOUT)
    grown = case.make(1.0)
    first = run(grown, x[:150, :narrow_n], LAYOUT)
    second = run(grown, x[150:], wide, 150 * TICK_S)
    reference = run(case.make(1.0), x[:, :narrow_n], LAYOUT)
    assert second.shape == (150, len(wide))
    assert np.isfinite(second).all()
    gpu_cols = np.flatnonzero(LAYOUT.gpu >= 0)
    combined = np.concatenate([first, second[:, :narrow_n]])
    assert np.array_equal(reference[:, gpu_cols], combined[:, gpu_cols])


def test_scores_depend_on_elapsed_seconds_not_tick_count(case: Case) -> None:
    """Irregular gaps: stretching the clock and every time constant alike changes nothing
    (except for counts, whose events per tick are dimensionful by nature: see counts.py)."""
    if case.name == "counts":
        return
    x = normal_stream(LAYOUT, 300, seed=8)
    case.plant(x)
    gaps = np.random.default_rng(9).exponential(TICK_S, size=300)
    gaps[100] = 5 * 3600.0  # a five-hour outage
    times = np.cumsum(gaps)
    plain, stretched = case.make(1.0), case.make(3.0)
    for t, row in zip(times, x, strict=True):
        a = plain.update(float(t), row, LAYOUT)
        b = stretched.update(float(3.0 * t), row, LAYOUT)
        assert np.isfinite(a).all()
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9)


def test_planted_anomaly_stands_out_from_noise(case: Case) -> None:
    """The planted column scores high and above every healthy column of the same window."""
    x = normal_stream(LAYOUT, 260, seed=10)
    case.plant(x)
    scores = run(case.make(1.0), x, LAYOUT)
    window = scores[PLANT_AT : PLANT_AT + 30]
    others = np.delete(window, case.target, axis=1)
    assert window[:, case.target].max() >= case.min_score
    assert window[:, case.target].max() > others.max()


@pytest.mark.parametrize("level", [0.0, 1.0, 1e6, 1e12, -5.0])
def test_flat_series_score_zero(case: Case, level: float) -> None:
    """A perfectly flat stream (any magnitude) scores 0 everywhere, never exploding."""
    x = normal_stream(LAYOUT, 120, seed=11)
    values = np.where(LAYOUT.signal < len(GPU_SIGNALS) + 1, level, x[0])
    values[LAYOUT.signal == LAYOUT.signal_names.index("health_scrape_duration")] = 0.2
    flat = np.tile(values, (120, 1))
    scores = run(case.make(1.0), flat, LAYOUT)
    assert np.array_equal(np.zeros_like(scores), scores)


@pytest.mark.parametrize("seed", [21, 22])
def test_scoring_columns_of_a_wider_row_equals_gathering_them(case: Case, seed: int) -> None:
    """update_columns on the full row (random columns, missing values, columns appended
    mid-stream) gives the gathered update's scores and state bit for bit, and writes nothing
    outside its columns."""
    rng = np.random.default_rng(seed)
    wide = layout_for(8)
    narrow_n = len(LAYOUT)
    x = normal_stream(wide, 260, seed=seed)
    case.plant(x)
    x[rng.random(x.shape) < 0.1] = np.nan
    first = np.flatnonzero(rng.random(narrow_n) < 0.6)
    appended = narrow_n + np.flatnonzero(rng.random(len(wide) - narrow_n) < 0.6)
    gathered, direct = case.make(1.0), case.make(1.0)
    for phase, columns in enumerate((first, np.concatenate([first, appended]))):
        layout = wide.subset(columns)
        for i in range(130 * phase, 130 * (phase + 1)):
            t = i * TICK_S
            expected = gathered.update(t, x[i, columns], layout)
            out = np.full(len(wide), -7.0)
            update_columns(direct, t, x[i], columns, layout, out)
            assert np.array_equal(expected, out[columns])
            assert np.array_equal(np.delete(out, columns), np.full(len(wide) - len(columns), -7.0))
        a, b = gathered.state_dict(), direct.state_dict()
        assert a.keys() == b.keys()
        assert all(np.array_equal(a[k], b[k]) for k in a)
