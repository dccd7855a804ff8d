"""Fitting a calibration from replayed history: the alert threshold, and signal weights where
the labels allow.

Two passes over the same history (``fit_calibration``):

1. Replay with the rules' weights, fit the threshold (``fit_threshold``).
2. Where there are failures to learn from, credit and blame signals: re-run the alert episodes
   over the recorded scores at a looser operating point (the lowest threshold within
   ``WEIGHT_FIT_FP_FACTOR`` times the budget, so there are enough alerts to compare signals;
   at the budget itself a good detector raises only a handful of false alerts), count per
   signal how often it led an alert that matched a failure and one that did not, and turn the
   counts into weight multipliers (``calibration.fit_signal_weights``: smoothed likelihood
   ratio, clipped to [0.25, 4]). New weights move every score, so the threshold found in pass
   1 no longer applies: replay again with the weights and fit the threshold anew.

The weights are kept only when the weighted pass does strictly better on the history than the
unweighted one (more failures caught before the XID, then caught at all, then fewer false
positives per day, the calibration objective's order) while within the budget; otherwise
the file carries no weights and says so. That comparison is in-sample, so it is a guard
against weights that hurt, not a promise: the held-out tests check what carries over.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from ..evaluation import (
    CalibrationPoint,
    CalibrationResult,
    calibrate,
    candidate_thresholds,
    caught,
    fit_signal_weights,
)
from ..loop import EpisodeParams
from .run import ReplayResult, evaluate_at_threshold

WEIGHT_FIT_FP_FACTOR = 10.0  # looser operating point whose alerts the weights learn from
XID_SIGNAL_PREFIX = "xid_"  # forced XID alerts: the failure itself, not a precursor

# A replay of the history with the given weight multipliers (None: the rules' weights alone),
# recorded (``record_scores=True``) so thresholds can be re-evaluated without re-scoring.
ReplayFn = Callable[[Mapping[str, float] | None], ReplayResult]


@dataclass(frozen=True, slots=True)
class Fitted:
    """What ``fit_calibration`` compared and chose."""

    unweighted: CalibrationResult  # pass 1: the rules' weights
    unweighted_result: ReplayResult
    signal_hits: dict[str, tuple[int, int]]  # (led a matched alert, led an unmatched alert)
    tried_weights: dict[str, float]  # the multipliers pass 2 tried (empty: none tried)
    weighted: CalibrationResult | None = None  # pass 2, when weights were tried
    weighted_result: ReplayResult | None = None
    kept: bool = False  # pass 2 did better: its weights and threshold are the ones chosen

    @property
    def threshold(self) -> CalibrationResult:
        return self.weighted if self.kept and self.weighted is not None else self.unweighted

    @property
    def result(self) -> ReplayResult:
        """The replay the chosen threshold was fitted on."""
        chosen = self.weighted_result if self.kept else None
        return chosen if chosen is not None else self.unweighted_result

    @property
    def signal_weights(self) -> dict[str, float] | None:
        """The weights the file carries (None: none)."""
        return self.tried_weights if self.kept else None


def fit_threshold(
    result: ReplayResult,
    base: EpisodeParams,
    fp_per_day: float,
    horizon_s: float,
    grace_s: float,
    *,
    early_first: bool = True,
    anchored: bool = True,
) -> CalibrationResult:
    """Calibrate the alert threshold on a replay recorded with ``record_scores=True``: within
    ``fp_per_day``, the most failures caught before their XID, then caught at all (with
    ``early_first=False``: caught at all first), then the fewest false positives, then the
    nearest to ``base.threshold``, the configured one (``anchored=False``: the highest, the
    former rule, which bench/detection.py --pairs compares). Early first is right when failure
    XIDs alert by themselves, as they do by default."""
    failures = len(result.failures)
    return _search(result, base, fp_per_day, horizon_s, grace_s, failures, early_first, anchored)


def _search(
    result: ReplayResult,
    base: EpisodeParams,
    fp_per_day: float,
    horizon_s: float,
    grace_s: float,
    failures: int,
    early_first: bool,
    anchored: bool = True,
) -> CalibrationResult:
    """``calibration.calibrate`` over the recorded scores' candidate thresholds, each evaluated
    by re-running the alert episodes at it (no re-scoring)."""
    finite = result.node_scores[np.isfinite(result.node_scores)]

    def point_at(threshold: float) -> CalibrationPoint:
        params = dataclasses.replace(base, threshold=threshold)
        s = evaluate_at_threshold(result, params, horizon_s, grace_s).summary
        return CalibrationPoint(
            threshold, s.detected, s.detected_before_failure, s.false_positives, s.fp_per_day
        )

    # The configured threshold is always a candidate: the tail grid can step over the narrow
    # band where it catches one more failure early, and calibrating must never do worse than
    # not calibrating.
    return calibrate(
        point_at,
        [*candidate_thresholds(finite).tolist(), base.threshold],
        fp_budget_per_day=fp_per_day,
        failures=failures,
        early_first=early_first,
        configured=base.threshold if anchored else None,
    )


def signal_hits(
    result: ReplayResult,
    base: EpisodeParams,
    fp_per_day: float,
    horizon_s: float,
    grace_s: float,
) -> dict[str, tuple[int, int]]:
    """Per signal, alerts it led that matched a failure / did not, at the looser operating
    point (module docstring). Forced XID alerts name no precursor and are not counted."""
    if result.lead_signal.size == 0:
        raise ValueError("the replay recorded no leading signals (record_scores=True needed)")
    if not np.isfinite(result.node_scores).any():
        return {}
    # failures=0: only the budget boundary, the lowest threshold within the looser budget
    loose = _search(result, base, fp_per_day * WEIGHT_FIT_FP_FACTOR, horizon_s, grace_s, 0, False)
    params = dataclasses.replace(base, threshold=loose.point.threshold)
    hits = evaluate_at_threshold(result, params, horizon_s, grace_s).signal_hits()
    return {s: h for s, h in hits.items() if not s.startswith(XID_SIGNAL_PREFIX)}


def fit_calibration(
    replay: ReplayFn,
    base: EpisodeParams,
    fp_per_day: float,
    horizon_s: float,
    grace_s: float,
    *,
    early_first: bool = True,
    fit_weights: bool = True,
) -> Fitted:
    """Threshold and, where labels allow, signal weights for the history ``replay`` replays
    (module docstring). ``replay`` is called once, or twice when weights are tried."""
    first = replay(None)
    unweighted = fit_threshold(first, base, fp_per_day, horizon_s, grace_s, early_first=early_first)
    hits: dict[str, tuple[int, int]] = {}
    if fit_weights and first.failures:
        hits = signal_hits(first, base, fp_per_day, horizon_s, grace_s)
    weights = {s: w for s, w in fit_signal_weights(hits, {}).items() if w != 1.0}
    if not weights:
        return Fitted(unweighted, first, hits, {})
    second = replay(weights)
    weighted = fit_threshold(second, base, fp_per_day, horizon_s, grace_s, early_first=early_first)

    def rank(point: CalibrationPoint) -> tuple[float, ...]:
        return (*caught(point, early_first), -point.fp_per_day)

    kept = weighted.within_budget and rank(weighted.point) > rank(unweighted.point)
    return Fitted(unweighted, first, hits, weights, weighted, second, kept)
