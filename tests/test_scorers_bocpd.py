"""Bayesian online changepoint scorer (detector/scorers/bocpd.py): the run-length posterior
against a plain per-series reference of Adams & MacKay's recursion, and what it catches."""

from __future__ import annotations

import math

import numpy as np
import pytest

from detector.errors import ConfigError
from detector.model import FloatArray
from detector.scorers.bocpd import BayesianChangePoint
from detector.scorers.registry import build, grid_layout
from detector.scorers.zscore import RobustEWBaseline

TICK_S = 10.0


def run(scorer: BayesianChangePoint, x: FloatArray, times: FloatArray | None = None) -> FloatArray:
    """Scores of every tick (ticks x columns) on a one-signal grid of x.shape[1] nodes."""
    layout = grid_layout(x.shape[1], 1, ("level",))
    times = np.arange(x.shape[0]) * TICK_S if times is None else times
    return np.stack([scorer.update(float(t), row, layout) for t, row in zip(times, x, strict=True)])


def reference_posterior(
    u: list[float], times: list[float], expected_run_s: float, prior_sd: float, half_life_s: float
) -> list[tuple[float, float, float]]:
    """Adams & MacKay's recursion for one series, one run per possible start, no truncation:
    runs as (probability, observations, sum), newest first; the oldest run (the one the
    series was in when scoring began) forgets with the half-life, as the scorer's settled run
    does."""
    runs = [(1.0, 0.0, 0.0)]
    last = None
    for ui, t in zip(u, times, strict=True):
        dt = 0.0 if last is None else t - last
        last = t
        hazard = 1.0 - math.exp(-dt / expected_run_s)
        fade = 2.0 ** (-dt / half_life_s)
        p0, n0, s0 = runs[-1]
        runs[-1] = (p0, n0 * fade, s0 * fade)
        grown, evidence = [], 0.0
        for p, n, s in runs:
            precision = n + 1.0 / prior_sd**2
            var = 1.0 + 1.0 / precision
            density = math.exp(-((ui - s / precision) ** 2) / (2 * var)) / math.sqrt(
                2 * math.pi * var
            )
            evidence += p * density
            grown.append((p * density * (1.0 - hazard), n + 1.0, s + ui))
        runs = [(evidence * hazard, 1.0, ui), *grown]
        total = sum(p for p, _, _ in runs)
        runs = [(p / total, n, s) for p, n, s in runs]
    return runs


def test_posterior_equals_the_plain_recursion_until_runs_are_merged() -> None:
    """Before any run reaches the oldest slot, every slot's probability, count and sum are
    the untruncated recursion's (same standardized values, same irregular clock)."""
    params = {"half_life_s": 600.0, "warmup": 10, "expected_run_s": 200.0, "prior_sd": 1.5}
    rng = np.random.default_rng(5)
    x = rng.normal(size=(35, 1))
    x[22:, 0] += 3.0  # a shift inside the window
    times = np.cumsum(rng.exponential(TICK_S, size=35))
    scorer = BayesianChangePoint(**params, runs=40)
    run(scorer, x, times)
    baseline = RobustEWBaseline(600.0, 10, 4.0, 1e-3, 1e-9)
    u, when = [], []
    for t, row in zip(times, x, strict=True):
        z, scored = baseline.step(float(t), row)
        if scored[0]:
            u.append(float(np.clip(z[0], -4.0, 4.0)))
            when.append(float(t))
    expected = reference_posterior(
        u, when, params["expected_run_s"], params["prior_sd"], params["half_life_s"]
    )
    young, settled = expected[:-1], expected[-1]
    assert len(young) == 25  # 35 ticks, 10 of warm-up: the oldest slot is still unshared
    probs = np.exp(scorer.log_p[0])
    np.testing.assert_allclose(probs[: len(young)], [p for p, _, _ in young], rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(probs[-1], settled[0], rtol=1e-9, atol=1e-15)
    assert np.all(probs[len(young) : -1] == 0.0)
    np.testing.assert_allclose(scorer.n[0, : len(young)], [n for _, n, _ in young], rtol=1e-12)
    np.testing.assert_allclose(scorer.s[0, : len(young)], [s for _, _, s in young], rtol=1e-9)
    np.testing.assert_allclose(scorer.n[0, -1], settled[1], rtol=1e-12)
    np.testing.assert_allclose(scorer.s[0, -1], settled[2], rtol=1e-9, atol=1e-12)


def test_a_two_sigma_shift_is_caught_and_dated_while_noise_stays_quiet() -> None:
    """200 noisy columns, one shifts by 2 sigmas at tick 300: it scores >= 4 within 30
    observations, dated within 3 ticks of the shift; no other column reaches 2."""
    rng = np.random.default_rng(6)
    x = rng.normal(size=(400, 200))
    x[300:, 17] += 2.0
    scorer = BayesianChangePoint(half_life_s=3000.0, warmup=20, expected_run_s=86400.0)
    scores = run(scorer, x)
    assert scores[300:330, 17].max() >= 4.0
    assert np.delete(scores, 17, axis=1).max() < 2.0
    since = scorer.time_since_change(399 * TICK_S)
    assert abs(since[17] - 99 * TICK_S) <= 3 * TICK_S
    assert np.isinf(np.delete(since, 17)).all()


def test_one_spike_is_not_a_change() -> None:
    """A lone 10-sigma spike on a quiet column scores 0: the next ordinary value sinks the
    run it started."""
    x = np.random.default_rng(7).normal(size=(400, 1))
    x[300, 0] += 10.0
    scores = run(BayesianChangePoint(half_life_s=3000.0, warmup=20), x)
    assert scores.max() == 0.0


def test_direction_decides_which_shift_scores() -> None:
    """A column whose bad direction is down ignores the same shift upward."""
    x = np.random.default_rng(8).normal(size=(400, 1))
    x[300:, 0] += 2.0
    layout = grid_layout(1, 1, ("level",), directions={"level": -1})
    up, down = BayesianChangePoint(warmup=20), BayesianChangePoint(warmup=20)
    scores_up = [up.update(i * TICK_S, row, layout)[0] for i, row in enumerate(x)]
    scores_down = [down.update(i * TICK_S, row, layout)[0] for i, row in enumerate(-x)]
    assert max(scores_up) == 0.0
    assert max(scores_down) >= 2.0


def test_a_learnt_change_does_not_alarm_again_while_the_baseline_catches_up() -> None:
    """After the shift's run becomes the settled one, the slow baseline's catching-up (its
    z sinking back towards 0 over hours) is followed by the settled run, not read as a
    second change."""
    x = np.random.default_rng(9).normal(size=(3000, 1))
    x[300:, 0] += 2.0
    scores = run(BayesianChangePoint(half_life_s=3000.0, warmup=20), x)[:, 0]
    assert scores[300:340].max() >= 3.0
    assert scores[400:].max() < 1.0


def test_registry_builds_it_and_bad_parameters_are_named() -> None:
    """The registry knows it by name; impossible parameters raise ConfigError naming them."""
    assert isinstance(build("bocpd", {"runs": 16}), BayesianChangePoint)
    for bad, word in (
        ({"expected_run_s": 0.0}, "expected_run_s"),
        ({"prior_sd": -1.0}, "prior_sd"),
        ({"runs": 1}, "runs"),
        ({"clip": 0.0}, "clip"),
    ):
        with pytest.raises(ConfigError, match=word):
            BayesianChangePoint(**bad)  # type: ignore[arg-type]
