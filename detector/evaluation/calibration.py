"""Choosing alert thresholds from history with known failures, and the calibration file.

The search (``calibrate``): the driver supplies ``evaluate_at(threshold)``, which re-runs alert
episodes over recorded fused scores at that threshold and evaluates them against the failures.
Among candidate thresholds whose false positives per day stay within the budget, pick the one
that catches the most failures, then the most caught *before* the failure, then raises the fewest
false positives. What still ties is a stretch of thresholds the history cannot tell apart; of
those the one nearest the configured threshold wins (the one in force without calibration), so
calibration moves the threshold only as far as the history gives reason to; without a configured
threshold the highest wins (fewer alerts). Taking the top of such a stretch puts the threshold
at the edge where the next failure would no longer be caught early: on held-out data that gave
up early catches and minutes of lead for no false positive fewer (bench/RESULTS.md, "Detection"
and "Robustness"). FP/day is monotone non-increasing in the threshold for a fixed episode
logic, so the within-budget thresholds are a suffix of the sorted candidates: its start is found
by bisection (log2 n evaluations) and only that suffix is scanned. A scanned point over budget
(the monotonicity assumption broken, e.g. by episode splitting) is skipped, never chosen.

When nothing can be caught within the budget (a healthy history, or failures no threshold
detects) there is no evidence to trade against, so the budget the operator accepted is spent:
the lowest threshold whose FP/day is within it. When no candidate meets the budget at all, the
highest candidate is returned with ``within_budget=False`` and the caller decides.

``calibration_from_result`` builds the calibration file's model (``detector.config``'s
``Calibration``, which config/calibration_file.py reads and writes; this stage does no I/O).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

import numpy as np

from ..config import Achieved, Calibration, FittedOn
from ..model import FloatArray

WEIGHT_CLIP = (0.25, 4.0)


@dataclass(frozen=True, slots=True)
class CalibrationPoint:
    """What the alerts at one threshold achieved on the history."""

    threshold: float
    detected: int
    detected_before: int
    false_positives: int
    fp_per_day: float


@dataclass(frozen=True, slots=True)
class CalibrationResult:
    """The chosen point, how it was chosen, and every point evaluated (by threshold)."""

    point: CalibrationPoint
    mode: Literal["best", "budget", "over-budget"]
    within_budget: bool
    fp_budget_per_day: float
    evaluated: tuple[CalibrationPoint, ...]


def calibrate(
    evaluate_at: Callable[[float], CalibrationPoint],
    candidates: Sequence[float],
    *,
    fp_budget_per_day: float,
    failures: int | None = None,
    early_first: bool = False,
    configured: float | None = None,
) -> CalibrationResult:
    """Pick a threshold from ``candidates`` (module docstring has the objective).

    ``early_first`` ranks failures caught before their XID ahead of failures caught at all: the
    right objective when failure XIDs alert by themselves (the daemon's ``alert_on_xid``), so
    every failure is caught at its XID whatever the threshold and the threshold's only job is
    to catch them earlier.

    ``failures=0`` says the history is healthy: the suffix scan is skipped and the budget
    boundary returned directly. Each threshold is evaluated at most once.

    ``configured``: the threshold in force without calibration; of thresholds equal in catches
    and false positives the nearest to it is chosen (module docstring).
    """
    if not math.isfinite(fp_budget_per_day) or fp_budget_per_day < 0:
        raise ValueError(f"fp_budget_per_day must be finite and >= 0, got {fp_budget_per_day}")
    thresholds = sorted({float(c) for c in candidates})
    if not thresholds:
        raise ValueError("no candidate thresholds")
    cache: dict[int, CalibrationPoint] = {}

    def at(i: int) -> CalibrationPoint:
        if i not in cache:
            cache[i] = evaluate_at(thresholds[i])
        return cache[i]

    def within(point: CalibrationPoint) -> bool:
        return point.fp_per_day <= fp_budget_per_day

    lo, hi = 0, len(thresholds)  # invariant: first within-budget index is in [lo, hi]
    while lo < hi:
        mid = (lo + hi) // 2
        if within(at(mid)):
            hi = mid
        else:
            lo = mid + 1
    if lo == len(thresholds):
        return _result(at(len(thresholds) - 1), "over-budget", False, fp_budget_per_day, cache)
    boundary = at(lo)
    if failures == 0:
        return _result(boundary, "budget", True, fp_budget_per_day, cache)
    feasible = [p for p in (at(i) for i in range(lo, len(thresholds))) if within(p)]
    best = max(feasible, key=lambda p: (*caught(p, early_first), *_tie_break(p, configured)))
    if best.detected == 0:
        return _result(boundary, "budget", True, fp_budget_per_day, cache)
    return _result(best, "best", True, fp_budget_per_day, cache)


def caught(point: CalibrationPoint, early_first: bool) -> tuple[int, int]:
    """The objective's first two ranks: failures caught, then caught before the failure (or the
    other way round with ``early_first``); callers add their own tie-breaker."""
    if early_first:
        return (point.detected_before, point.detected)
    return (point.detected, point.detected_before)


def _tie_break(point: CalibrationPoint, configured: float | None) -> tuple[float, ...]:
    """After the catches: fewer false positives, then nearer the configured threshold (when
    given), then the higher threshold."""
    nearness = () if configured is None else (-abs(point.threshold - configured),)
    return (-point.fp_per_day, *nearness, point.threshold)


def _result(
    point: CalibrationPoint,
    mode: Literal["best", "budget", "over-budget"],
    within_budget: bool,
    budget: float,
    cache: Mapping[int, CalibrationPoint],
) -> CalibrationResult:
    evaluated = tuple(sorted(cache.values(), key=lambda p: p.threshold))
    return CalibrationResult(point, mode, within_budget, budget, evaluated)


def candidate_thresholds(scores: FloatArray, n: int = 64, grid: int = 19) -> FloatArray:
    """Sorted, distinct thresholds in (0, 1): up to ``n`` from the upper tail of ``scores`` and
    an even grid of ``grid`` (0.05 ... 0.95 by default).

    The tail fractions run log-spaced from 1/2 down to 1/len(scores), the last candidate being
    the maximum score, because an FP/day budget of a few alerts a day lives in the extreme tail:
    linear quantiles would waste most candidates where every threshold alerts constantly. But
    fused scores are 0 most of the time, so the tail quantiles crowd at the top and can jump
    over the middle of the scale (0.26, then 0.6, in a 4-day replay of 32 nodes), where the
    best threshold may lie: the even grid keeps every stretch of the scale up to the maximum
    score examined. NaN is ignored.
    """
    finite = scores[np.isfinite(scores)]
    if finite.size == 0:
        raise ValueError("no finite scores to take thresholds from")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    smallest_tail = max(1.0 / finite.size, 1e-12)
    probabilities = 1.0 - np.geomspace(0.5, min(0.5, smallest_tail), n)
    probabilities[-1] = 1.0  # the last candidate is the maximum score itself
    levels = np.quantile(finite, probabilities)
    even = np.linspace(0.0, 1.0, grid + 2)[1:-1]
    even = even[even <= levels[-1]]  # above the maximum score nothing would ever alert
    eps = 1e-9  # keep strictly inside (0, 1): 0 would alert always, 1 never
    return np.unique(np.clip(np.concatenate([levels, even]), eps, 1.0 - eps)).astype(np.float64)


def fit_signal_weights(
    signal_hits: Mapping[str, tuple[int, int]],
    prior: Mapping[str, float],
    *,
    strength: float = 10.0,
) -> dict[str, float]:
    """Reweight signals by how often alerts they led were real: prior x smoothed likelihood ratio.

    ``signal_hits[s] = (tp, fp)``: times ``s`` led a true-positive / a false-positive alert. With
    ``base`` the overall share of true alerts, a signal's odds of leading a true alert are
    smoothed with a Beta(strength*base, strength*(1-base)) prior (``strength`` pseudo-alerts at
    the base rate), then divided by the base odds: a signal no better than average gets 1, one
    seen once gets little, and the ratio is clipped to [0.25, 4] so no signal can dominate or
    vanish on a handful of labels. Weight = prior[s] (1.0 when absent) x that ratio. With no true
    or no false alerts at all there is nothing to contrast, and the prior comes back unchanged.
    """
    for signal, (tp, fp) in signal_hits.items():
        if tp < 0 or fp < 0:
            raise ValueError(f"negative hit counts for {signal!r}: {(tp, fp)}")
    for signal, weight in prior.items():
        if not (math.isfinite(weight) and weight > 0):
            raise ValueError(f"prior weight for {signal!r} must be finite and > 0, got {weight}")
    signals = sorted(set(prior) | set(signal_hits))
    total_tp = sum(tp for tp, _ in signal_hits.values())
    total_fp = sum(fp for _, fp in signal_hits.values())
    if total_tp == 0 or total_fp == 0:
        return {s: float(prior.get(s, 1.0)) for s in signals}
    base = total_tp / (total_tp + total_fp)
    base_odds = total_tp / total_fp
    weights: dict[str, float] = {}
    for s in signals:
        tp, fp = signal_hits.get(s, (0, 0))
        odds = (tp + strength * base) / (fp + strength * (1.0 - base))
        ratio = min(max(odds / base_odds, WEIGHT_CLIP[0]), WEIGHT_CLIP[1])
        weights[s] = float(prior.get(s, 1.0)) * ratio
    return weights


def describe_weights(weights: Mapping[str, float], shown: int = 4) -> str:
    """``n (lowest ... highest)`` for terminals and reports: how many signal weights, and the
    ``shown`` furthest below and above (all of them when there are few)."""
    ranked = sorted(weights.items(), key=lambda kv: (kv[1], kv[0]))
    listed = ranked if len(ranked) <= 2 * shown else [*ranked[:shown], *ranked[-shown:]]
    return f"{len(ranked)} (" + ", ".join(f"{s} x{w:.2f}" for s, w in listed) + ")"


def calibration_from_result(
    result: CalibrationResult,
    *,
    dump: str,
    days: float,
    failures: int,
    signal_weights: Mapping[str, float] | None = None,
    created: datetime | None = None,
) -> Calibration:
    """Build the file model from a search result and what it was fitted on."""
    point = result.point
    return Calibration(
        threshold=point.threshold,
        signal_weights=None if signal_weights is None else dict(signal_weights),
        fp_budget_per_day=result.fp_budget_per_day,
        fitted_on=FittedOn(dump=dump, days=days, failures=failures),
        achieved=Achieved(
            detected=point.detected,
            detected_before=point.detected_before,
            fp_per_day=point.fp_per_day,
        ),
        created=created or datetime.now(UTC),
    )
