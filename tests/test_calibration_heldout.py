"""Calibration holds its false-positive budget on data it never saw: fit the threshold on one
simulated cluster history, replay another (different seed: other workload, failures, noise)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from detector.config.load import load_config
from detector.loop import TickLoop
from detector.loop.episodes import EpisodeParams
from detector.replay.fitting import fit_calibration, fit_threshold
from detector.replay.run import ReplayResult, evaluate_at_threshold, run_replay, simulated_frames
from detector.series.index import SeriesIndex
from detector.sim import Scenario, SimulatedCluster

BUDGET = 2.0  # false positives per day


def history(
    seed: int, weights: Mapping[str, float] | None = None, failure_count: int = 4
) -> ReplayResult:
    scenario = dataclasses.replace(
        Scenario.demo(), nodes=16, days=1.0, seed=seed, failure_count=failure_count
    )
    cluster = SimulatedCluster(scenario)
    index = SeriesIndex()
    pipeline = TickLoop.from_config(load_config(None, env={}), index, signal_weights=weights)
    frames = simulated_frames(cluster, index)
    return run_replay(pipeline, frames, events=cluster.events(), record_scores=True)


def test_threshold_fitted_on_one_history_stays_near_budget_on_another() -> None:
    """In-sample the budget holds exactly; held-out it stays within 2x the budget, and the
    held-out threshold still alerts less than the uncalibrated default."""
    base = EpisodeParams(0.6, 0.8, 60.0, 900.0)
    fitted = fit_threshold(history(21), base, BUDGET, 3600.0, 300.0)
    assert fitted.within_budget
    assert fitted.point.fp_per_day <= BUDGET
    held_out = history(22)
    at_fitted = evaluate_at_threshold(
        held_out, dataclasses.replace(base, threshold=fitted.point.threshold), 3600.0, 300.0
    ).summary
    at_default = evaluate_at_threshold(held_out, base, 3600.0, 300.0).summary
    assert at_fitted.fp_per_day <= 2 * BUDGET
    assert at_fitted.false_positives <= at_default.false_positives
    assert at_fitted.detected >= 1


def test_signal_weights_and_threshold_fitted_on_one_history_stay_near_budget_on_another() -> None:
    """Weights are fitted where the labels allow (a history whose failures have precursor
    alerts, and false alerts); whatever the fit keeps, replaying another history with its
    weights and threshold stays within 2x the budget and still catches failures."""
    base = EpisodeParams(0.6, 0.8, 60.0, 900.0)
    fitted = fit_calibration(lambda w: history(21, w, 15), base, BUDGET, 3600.0, 300.0)
    assert fitted.tried_weights
    assert all(0.25 <= w <= 4.0 for w in fitted.tried_weights.values())
    assert fitted.threshold.within_budget
    held_out = history(22, fitted.signal_weights, 15)
    params = dataclasses.replace(base, threshold=fitted.threshold.point.threshold)
    summary = evaluate_at_threshold(held_out, params, 3600.0, 300.0).summary
    assert summary.fp_per_day <= 2 * BUDGET
    assert summary.detected >= 1
