"""Threshold calibration: the budgeted search, candidate thresholds, weights, the file."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detector.config.calibration_file import load_calibration, save_calibration
from detector.errors import ConfigError
from detector.evaluation.calibration import (
    Calibration,
    CalibrationPoint,
    calibrate,
    calibration_from_result,
    candidate_thresholds,
    fit_signal_weights,
)
from detector.evaluation.matching import evaluate
from detector.model import Alert, XidEvent


class Table:
    """A fake evaluate_at over a fixed table; remembers which thresholds were asked for."""

    def __init__(self, rows: list[tuple[float, int, int, float]]) -> None:
        self.rows = {thr: CalibrationPoint(thr, d, b, round(fp * 3), fp) for thr, d, b, fp in rows}
        self.asked: list[float] = []

    def __call__(self, threshold: float) -> CalibrationPoint:
        self.asked.append(threshold)
        return self.rows[threshold]


#            threshold, detected, detected_before, fp_per_day
HISTORY = [
    (0.50, 9, 8, 40.0),
    (0.60, 8, 7, 9.0),
    (0.70, 7, 6, 3.0),  # lowest within a budget of 3
    (0.80, 7, 6, 1.0),  # same catch, fewer alerts: the tie goes here
    (0.90, 6, 6, 0.3),
    (0.95, 2, 2, 0.0),
]


def test_chosen_threshold_obeys_the_budget_and_catches_the_most() -> None:
    """Within 3 FP/day the most failures caught is 7; of the tied 0.7 and 0.8, 0.8 wins."""
    result = calibrate(Table(HISTORY), [row[0] for row in HISTORY], fp_budget_per_day=3.0)
    assert (result.point.threshold, result.mode, result.within_budget) == (0.80, "best", True)
    assert result.point.fp_per_day <= 3.0


def test_detected_before_breaks_ties_in_detected() -> None:
    """Equal detection counts are decided by how many were caught before the failure."""
    rows = [(0.5, 5, 1, 2.0), (0.6, 5, 4, 1.0), (0.7, 5, 2, 0.5)]
    result = calibrate(Table(rows), [0.5, 0.6, 0.7], fp_budget_per_day=2.0)
    assert result.point.threshold == 0.6


def test_a_looser_budget_buys_more_recall() -> None:
    """Raising the budget to 10 FP/day lets the search pick the 8-failure threshold."""
    result = calibrate(Table(HISTORY), [row[0] for row in HISTORY], fp_budget_per_day=10.0)
    assert (result.point.threshold, result.point.detected) == (0.60, 8)


def test_healthy_history_takes_the_lowest_threshold_within_budget() -> None:
    """With no failures the budget is spent: lowest threshold with FP/day <= budget."""
    rows = [(t, 0, 0, fp) for t, _, _, fp in HISTORY]
    table = Table(rows)
    result = calibrate(table, [row[0] for row in rows], fp_budget_per_day=3.0, failures=0)
    assert (result.point.threshold, result.mode) == (0.70, "budget")
    assert len(table.asked) <= math.ceil(math.log2(len(rows))) + 1  # bisection only, no scan
    unknown = calibrate(Table(rows), [row[0] for row in rows], fp_budget_per_day=3.0)
    assert (unknown.point.threshold, unknown.mode) == (0.70, "budget")


def test_no_candidate_within_budget_returns_the_highest_flagged() -> None:
    """When even the highest threshold is over budget it is returned, marked over budget."""
    rows = [(0.5, 3, 3, 9.0), (0.9, 1, 1, 4.0)]
    result = calibrate(Table(rows), [0.9, 0.5, 0.9], fp_budget_per_day=1.0)
    assert (result.point.threshold, result.mode, result.within_budget) == (
        0.9,
        "over-budget",
        False,
    )


def test_each_threshold_is_evaluated_once() -> None:
    """The driver's expensive re-run happens at most once per candidate."""
    table = Table(HISTORY)
    result = calibrate(table, [row[0] for row in HISTORY], fp_budget_per_day=3.0)
    assert len(table.asked) == len(set(table.asked))
    assert [p.threshold for p in result.evaluated] == sorted(table.asked)


def test_bad_arguments_are_rejected() -> None:
    """An empty candidate list or a negative/NaN budget is a caller bug."""
    with pytest.raises(ValueError, match="candidate"):
        calibrate(Table([]), [], fp_budget_per_day=1.0)
    with pytest.raises(ValueError, match="fp_budget_per_day"):
        calibrate(Table(HISTORY), [0.5], fp_budget_per_day=float("nan"))


def _brute_force(
    points: list[CalibrationPoint], budget: float, configured: float | None = None
) -> CalibrationPoint:
    feasible = [p for p in points if p.fp_per_day <= budget]
    if not feasible:
        return max(points, key=lambda p: p.threshold)
    top = max((p.detected, p.detected_before) for p in feasible)
    tied = [p for p in feasible if (p.detected, p.detected_before) == top]
    fewest = min(p.fp_per_day for p in tied)
    tied = [p for p in tied if p.fp_per_day == fewest]
    if configured is not None:
        nearest = min(abs(p.threshold - configured) for p in tied)
        tied = [p for p in tied if abs(p.threshold - configured) == nearest]
    best = max(tied, key=lambda p: p.threshold)
    return best if best.detected > 0 else min(feasible, key=lambda p: p.threshold)


#           threshold, detected, detected_before, fp_per_day: 0.5-0.8 catch the same, 0.8 alone
#           with fewer false positives
STRETCH = [(0.4, 6, 5, 2.0), (0.5, 6, 4, 0.5), (0.6, 6, 4, 0.5), (0.7, 6, 4, 0.5), (0.8, 6, 4, 0.3)]


@pytest.mark.parametrize(
    ("fp_at_08", "configured", "chosen"),
    [
        (0.3, 0.6, 0.8),  # fewer false positives outrank nearness
        (0.5, 0.6, 0.6),  # a stretch the history cannot tell apart: stay at the configured one
        (0.5, 0.62, 0.6),
        (0.5, 0.65, 0.7),  # equally near: the higher
        (0.5, 0.2, 0.5),  # configured below the stretch: its lower end
        (0.5, 0.95, 0.8),  # above it: its upper end
        (0.5, None, 0.8),  # nothing configured: the highest
    ],
)
def test_ties_go_to_fewer_false_positives_then_nearest_the_configured_threshold(
    fp_at_08: float, configured: float | None, chosen: float
) -> None:
    """Thresholds equal in catches: the fewest false positives, then nearest the configured."""
    rows = [*STRETCH[:-1], (0.8, 6, 4, fp_at_08)]
    result = calibrate(
        Table(rows), [r[0] for r in rows], fp_budget_per_day=1.0, configured=configured
    )
    assert (result.point.threshold, result.mode) == (chosen, "best")


@settings(max_examples=300, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.integers(0, 5), st.integers(0, 4), st.integers(0, 4)
        ),  # fp drop, detected, before
        min_size=1,
        max_size=40,
    ),
    start_fp=st.integers(0, 60),
    budget=st.integers(0, 40),
    configured=st.one_of(st.none(), st.floats(0.0, 1.0)),
)
def test_search_matches_brute_force_on_monotone_fp(
    steps: list[tuple[int, int, int]], start_fp: int, budget: int, configured: float | None
) -> None:
    """On any FP/day non-increasing in threshold the search picks what exhaustive search picks."""
    points, fp = [], float(start_fp)
    for i, (drop, detected, before) in enumerate(steps):
        fp = max(fp - drop, 0.0)
        points.append(CalibrationPoint(i / 64 + 0.01, detected, min(before, detected), 0, fp))
    table = {p.threshold: p for p in points}
    result = calibrate(
        table.__getitem__, list(table), fp_budget_per_day=float(budget), configured=configured
    )
    assert result.point == _brute_force(points, float(budget), configured)


@settings(max_examples=200, deadline=None)
@given(
    drops=st.lists(st.integers(0, 3), min_size=1, max_size=50),
    budget=st.integers(0, 30),
    told=st.booleans(),
)
def test_healthy_search_finds_the_exact_budget_boundary(
    drops: list[int], budget: int, told: bool
) -> None:
    """With nothing to catch, bisection lands on the lowest threshold within budget."""
    fps = 60.0 - np.cumsum(drops)
    points = [CalibrationPoint(i / 64 + 0.01, 0, 0, 0, max(fp, 0.0)) for i, fp in enumerate(fps)]
    table = {p.threshold: p for p in points}
    result = calibrate(
        table.__getitem__, list(table), fp_budget_per_day=budget, failures=0 if told else None
    )
    assert result.point == _brute_force(points, float(budget))


@settings(max_examples=200, deadline=None)
@given(
    fps=st.lists(st.floats(0, 20), min_size=1, max_size=30),
    detected=st.lists(st.integers(0, 3), min_size=30, max_size=30),
)
def test_never_picks_an_over_budget_point_when_fp_is_not_monotone(
    fps: list[float], detected: list[int]
) -> None:
    """Even if FP/day is not monotone, a point reported within budget is within budget."""
    points = [CalibrationPoint(i / 32 + 0.01, detected[i], 0, 0, fp) for i, fp in enumerate(fps)]
    table = {p.threshold: p for p in points}
    result = calibrate(table.__getitem__, list(table), fp_budget_per_day=5.0)
    assert (result.point.fp_per_day <= 5.0) == result.within_budget


def test_candidates_are_sorted_distinct_upper_tail_values_in_open_unit_interval() -> None:
    """Thresholds come from the upper tail, reach the maximum score, and stay inside (0, 1)."""
    rng = np.random.default_rng(3)
    scores = np.concatenate([rng.beta(1.0, 20.0, 200_000), [1.0, np.nan]])
    thresholds = candidate_thresholds(scores, n=64, grid=0)
    assert 30 <= thresholds.size <= 64
    assert np.all(np.diff(thresholds) > 0)
    assert thresholds[0] > 0.0
    assert thresholds[-1] < 1.0
    assert thresholds[0] >= np.nanmedian(scores)
    assert thresholds[-1] == pytest.approx(1.0)
    # Log-spaced tails: half the candidates sit in the top 0.5% of scores.
    assert np.sum(thresholds >= np.nanquantile(scores, 0.995)) >= thresholds.size // 2


def test_candidates_leave_no_stretch_of_the_scale_unexamined() -> None:
    """Fused scores are 0 most of the time, so the tail quantiles crowd at the top and can jump
    over the middle of the scale; with the even grid no gap inside [0.05, 0.95] is wider than
    0.05, and every tail candidate is still there."""
    rng = np.random.default_rng(4)
    scores = np.zeros(100_000)
    scores[:200] = rng.uniform(0.0, 1.0, 200) ** 0.2  # a few episodes, most of them high
    tail = candidate_thresholds(scores, grid=0)
    assert np.diff(tail[(tail > 0.05) & (tail < 0.95)]).max() > 0.1  # the tail alone jumps
    thresholds = candidate_thresholds(scores)
    assert set(tail.tolist()) <= set(thresholds.tolist())
    inside = thresholds[(thresholds >= 0.05 - 1e-12) & (thresholds <= 0.95 + 1e-12)]
    assert np.diff(inside).max() <= 0.05 + 1e-12
    assert inside[0] == pytest.approx(0.05)
    assert inside[-1] == pytest.approx(0.95)


def test_candidates_need_finite_scores() -> None:
    """All-NaN or empty scores give no thresholds: a ValueError, not garbage."""
    with pytest.raises(ValueError, match="finite"):
        candidate_thresholds(np.array([np.nan, np.nan]))


def test_signal_weights_follow_the_smoothed_likelihood_ratio() -> None:
    """Signals leading true alerts gain weight, false-alarm leaders lose it, within [0.25, 4]x."""
    hits = {"xid_edge": (30, 0), "nfs_backlog": (0, 60), "temp": (10, 30), "lonely": (1, 0)}
    prior = {"xid_edge": 1.0, "nfs_backlog": 2.0, "temp": 1.0, "power": 0.5}
    weights = fit_signal_weights(hits, prior)
    assert weights["xid_edge"] == 4.0  # clipped up
    assert weights["nfs_backlog"] == 0.5  # clipped down: 2.0 x 0.25
    assert weights["power"] == 0.5  # no evidence: prior unchanged
    assert 1.0 < weights["lonely"] < 2.0  # one hit moves it, but only a little
    # temp: base 41/131; odds (10 + 10b) / (30 + 10(1-b)) over base odds 41/90.
    base = 41 / 131
    assert weights["temp"] == pytest.approx(((10 + 10 * base) / (30 + 10 * (1 - base))) / (41 / 90))


def test_signal_weights_keep_the_prior_without_contrast() -> None:
    """With no false (or no true) alerts at all nothing can be learned: prior returned."""
    assert fit_signal_weights({"a": (5, 0)}, {"a": 1.5, "b": 1.0}) == {"a": 1.5, "b": 1.0}
    with pytest.raises(ValueError, match="negative"):
        fit_signal_weights({"a": (-1, 2)}, {})


def _calibration() -> Calibration:
    result = calibrate(Table(HISTORY), [row[0] for row in HISTORY], fp_budget_per_day=3.0)
    return calibration_from_result(
        result,
        dump="cluster-week.om.gz",
        days=7.0,
        failures=10,
        signal_weights={"xid_edge": 2.0, "temp": 0.5},
        created=datetime(2024, 5, 1, 12, 0, tzinfo=UTC),
    )


@pytest.mark.parametrize("name", ["calibration.json", "calibration.yaml"])
def test_calibration_file_round_trip(tmp_path: Path, name: str) -> None:
    """save then load gives the same calibration, in JSON or YAML."""
    calibration = _calibration()
    save_calibration(tmp_path / name, calibration)
    assert load_calibration(tmp_path / name) == calibration
    assert not list(tmp_path.glob("*.tmp"))


def test_calibration_file_has_the_documented_shape(tmp_path: Path) -> None:
    """The JSON file carries version, threshold, budget, fitted_on, achieved, created."""
    save_calibration(tmp_path / "c.json", _calibration())
    document = json.loads((tmp_path / "c.json").read_text())
    assert document["version"] == 1
    assert document["threshold"] == 0.8
    assert document["fitted_on"] == {"dump": "cluster-week.om.gz", "days": 7.0, "failures": 10}
    assert document["achieved"] == {"detected": 7, "detected_before": 6, "fp_per_day": 1.0}
    assert document["created"].startswith("2024-05-01T12:00:00")


def test_a_field_nothing_reads_is_refused_not_ignored(tmp_path: Path) -> None:
    """Unknown fields (e.g. per-entity-kind thresholds, which the detector does not have) are
    an error naming the field, so a hand-edited file cannot be silently half applied."""
    document = _calibration().model_dump(mode="json", exclude_none=True)
    document["per_entity_kind"] = {"gpu": 0.85}
    path = tmp_path / "c.json"
    path.write_text(json.dumps(document))
    with pytest.raises(ConfigError, match="per_entity_kind"):
        load_calibration(path)


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d.pop("threshold"), "'threshold'"),
        (lambda d: d.update(threshold=1.5), "'threshold'"),
        (lambda d: d.update(threshold="high"), "'threshold'"),
        (lambda d: d.update(version=2), "'version'"),
        (lambda d: d["fitted_on"].update(days=0), "'fitted_on.days'"),
        (lambda d: d["signal_weights"].update(temp=-1.0), "'signal_weights.temp'"),
        (lambda d: d.update(created="2024-05-01T12:00:00"), "'created'"),
        (lambda d: d.update(thresold=0.5), "'thresold'"),
    ],
)
def test_bad_calibration_file_names_file_and_field(
    tmp_path: Path, mutate: object, field: str
) -> None:
    """Each invalid field raises ConfigError naming the file and the field path."""
    path = tmp_path / "c.json"
    save_calibration(path, _calibration())
    document = json.loads(path.read_text())
    mutate(document)  # type: ignore[operator]
    path.write_text(json.dumps(document))
    with pytest.raises(ConfigError) as caught:
        load_calibration(path)
    assert str(caught.value).startswith(f"{path}: invalid calibration")
    assert field in str(caught.value)


def test_unreadable_or_malformed_calibration_files(tmp_path: Path) -> None:
    """Missing, non-JSON, non-mapping and duplicate-key files are ConfigErrors naming the
    file (and the line where there is one)."""
    with pytest.raises(ConfigError, match="cannot read"):
        load_calibration(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text('{\n  "threshold": 0.5,\n  oops\n}')
    with pytest.raises(ConfigError, match=r"broken\.json:3: not valid JSON"):
        load_calibration(broken)
    listed = tmp_path / "list.yaml"
    listed.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_calibration(listed)
    twice = tmp_path / "twice.yaml"  # read like every YAML file people write: strictly
    twice.write_text("threshold: 0.5\nthreshold: 0.9\n")
    with pytest.raises(
        ConfigError, match=r"twice\.yaml:2:\d+: invalid YAML: duplicate key 'threshold'"
    ):
        load_calibration(twice)


def test_calibrate_over_real_evaluation_picks_the_exhaustive_optimum() -> None:
    """Driven through evaluation.evaluate on episode alerts, the search equals exhaustive search."""
    rng = np.random.default_rng(11)
    times = np.arange(0.0, 7 * 86400.0, 60.0)
    nodes = [f"n{i:02d}" for i in range(12)]
    scores = rng.beta(1.0, 12.0, (len(nodes), times.size))
    failures = []
    for k, node_index in enumerate(rng.choice(len(nodes), 6, replace=False)):
        at = 86400.0 * (k + 1)
        ramp = (times > at - 1800.0 * (k % 3 + 1)) & (times <= at)
        scores[node_index, ramp] = np.maximum(scores[node_index, ramp], 0.55 + 0.07 * k)
        failures.append(XidEvent(at, nodes[node_index], None, 79))

    def alerts_at(threshold: float) -> list[Alert]:
        alerts = []
        for row, node in zip(scores, nodes, strict=True):
            edges = np.diff(np.concatenate([[0], (row >= threshold).astype(np.int8), [0]]))
            for a, b in zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1), strict=True):
                alerts.append(Alert(node, None, times[a], times[b - 1], float(row[a:b].max()), ()))
        return alerts

    def evaluate_at(threshold: float) -> CalibrationPoint:
        s = evaluate(alerts_at(threshold), failures, start=0.0, end=float(times[-1]) + 60).summary
        return CalibrationPoint(
            threshold, s.detected, s.detected_before_failure, s.false_positives, s.fp_per_day
        )

    candidates = candidate_thresholds(scores.ravel(), n=24)
    result = calibrate(evaluate_at, candidates, fp_budget_per_day=2.0, failures=len(failures))
    exhaustive = _brute_force([evaluate_at(float(t)) for t in candidates], 2.0)
    assert result.point == exhaustive
    assert result.mode == "best"
    assert result.point.detected >= 1


def test_early_first_prefers_catching_failures_before_their_xid() -> None:
    """With early_first, a threshold catching 3 failures early beats one catching 5 at the XID."""
    table = {
        0.5: CalibrationPoint(0.5, 5, 3, 1, 0.5),
        0.9: CalibrationPoint(0.9, 6, 0, 0, 0.0),
    }
    early = calibrate(table.__getitem__, list(table), fp_budget_per_day=1.0, early_first=True)
    plain = calibrate(table.__getitem__, list(table), fp_budget_per_day=1.0)
    assert 0.5 == early.point.threshold
    assert 0.9 == plain.point.threshold


def test_bad_calibration_file_speaks_like_the_config_loader(tmp_path: Path) -> None:
    """A misspelt key is an unknown key with the likely one suggested; a missing key is
    required, with who writes it; a wrong type says what it must be and what it got."""
    path = tmp_path / "c.json"
    save_calibration(path, _calibration())
    document = json.loads(path.read_text())
    document["thresh"] = document.pop("threshold")
    document["fp_budget_per_day"] = "lots"
    path.write_text(json.dumps(document))
    with pytest.raises(ConfigError) as caught:
        load_calibration(path)
    message = str(caught.value)
    assert "field 'thresh': unknown key (did you mean 'threshold'?)" in message
    assert "field 'threshold': required" in message
    assert "('detector calibrate' writes every required key)" in message
    assert "field 'fp_budget_per_day': must be a valid number" in message
    assert "(got 'lots')" in message
    assert "Input should be" not in message
