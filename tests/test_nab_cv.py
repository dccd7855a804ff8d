"""NAB cross-validation (bench/nab_cv.py) and the fusion pieces it selects among (bench/nab.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/ is scripts, not installed

from bench import nab_cv as cv

nab = cv.nab
score = cv.nab_score
STANDARD = score.CostMatrix(tp=1.0, fp=0.11, fn=1.0)
NAMES = [f"{cat}/f{i}.csv" for cat, count in (("a", 5), ("b", 6), ("c", 1)) for i in range(count)]


@pytest.mark.parametrize("split", ["parity", "blocks"])
def test_folds_are_balanced_within_each_category_and_order_free(split: str) -> None:
    """Each category's files split evenly (odd counts: one more in one fold), whatever order."""
    folds = cv.fold_of(NAMES, split)
    for cat, count in (("a", 5), ("b", 6), ("c", 1)):
        ones = sum(k for n, k in zip(NAMES, folds, strict=True) if n.startswith(cat + "/"))
        assert abs(count - 2 * ones) <= (1 if split == "parity" else 2)
    shuffled = NAMES[::-1]
    assert cv.fold_of(shuffled, split) == folds[::-1]


def test_the_two_splits_differ() -> None:
    """The blocks split is not the parity split (a second, different partition)."""
    assert cv.fold_of(NAMES, "parity") != cv.fold_of(NAMES, "blocks")


def _file(name: str, detections: dict[int, float], windows: tuple[tuple[int, int], ...]) -> object:
    scores = np.zeros(200)
    for row, value in detections.items():
        scores[row] = value
    return score.FileRows(name, scores, windows)


def test_subset_scores_combine_to_the_corpus_score_at_the_same_threshold() -> None:
    """Raw totals of disjoint subsets add; combined() normalizes them like the whole corpus."""
    files = [
        _file("x", {60: 0.9, 150: 0.8}, ((50, 69),)),
        _file("y", {40: 0.7}, ((100, 119),)),
        _file("z", {101: 0.95, 30: 0.6}, ((100, 109), (150, 159))),
    ]
    threshold = 0.75
    parts = [files[:1], files[1:]]
    results = [score.score_at(p, STANDARD, threshold) for p in parts]
    nulls = [score.score_at(p, STANDARD, np.inf).raw for p in parts]
    whole = score.score_at(files, STANDARD, threshold)
    assert cv.combined(results, nulls, STANDARD) == pytest.approx(whole.normalized)


def test_severity_ladder_alerts_once_per_level_of_a_rising_score() -> None:
    """A score creeping from 3 to 6 alerts on every row after the holdoff, but once per
    quarter-octave with the ladder, and each alert carries its level's value."""
    z = np.concatenate((np.zeros(10), np.linspace(3.0, 6.0, 40), np.zeros(10)))
    plain = nab.holdoff(z, 80)
    ladder = nab.holdoff(nab.severity_levels(z, 2**0.25), 80)
    assert np.count_nonzero(plain) == 40
    levels = 2 ** (np.arange(7, 11) / 4)  # 3.36, 4, 4.76, 5.66 (3.0 rounds down to 2.83)
    alerts = ladder[ladder > 0]
    assert alerts.size == levels.size + 1
    assert alerts[1:] == pytest.approx(levels)
    assert np.array_equal(nab.severity_levels(z, 1.0), z)


def _parts(n: int = 300) -> object:
    rng = np.random.default_rng(0)
    lik, rngz, ctx = (np.abs(rng.normal(size=n)) * s for s in (1.0, 0.5, 1.2))
    seasonal = np.where(np.arange(n) < 100, np.inf, np.abs(rng.normal(size=n)) * 2)
    forecast = rng.normal(size=n) * 2
    return nab.Components(lik, rngz, ctx, seasonal, forecast)


def test_fuse_without_gate_and_context_is_the_likelihood_fusion() -> None:
    """Gate floor 1 and context weight 0 give holdoff(max(likelihood, range))."""
    parts = _parts()
    cfg = nab.SeasonalConfig(gate_floor=1.0, holdoff_rows=10)
    expected = nab.holdoff(np.maximum(parts.likelihood, parts.range), 10)
    assert np.array_equal(nab.fuse(parts, cfg, 0.0), expected)


def test_gates_only_ever_discount() -> None:
    """The seasonal gate and the context agreement never raise the fused score (no holdoff)."""
    parts = _parts()
    plain = nab.fuse(parts, nab.SeasonalConfig(gate_floor=1.0, holdoff_rows=0), 2.67)
    gated = nab.fuse(parts, nab.SeasonalConfig(holdoff_rows=0), 2.67)
    agreeing = nab.fuse(parts, nab.SeasonalConfig(holdoff_rows=0, context_agreement_z=2.0), 2.67)
    assert np.all(gated <= plain)
    assert np.all(agreeing <= gated)
    assert np.any(agreeing < gated)
    assert np.array_equal(gated[:100], plain[:100])  # unlearnt hours: gate 1


def test_candidate_names_are_unique_and_cover_the_grid() -> None:
    """Every grid point has its own name; 'noctx' rows do not multiply by context options."""
    grid = cv.candidates(("base",), ("L4O6", "L8O4"), (1.0, 1.19), (0.0, 2.0))
    names = [c.name for c in grid]
    assert len(set(names)) == len(names)
    per_context = len(cv.GATES) * len(cv.HOLDOFFS) * 2
    assert len(grid) == per_context + 2 * per_context * 2
    assert "base:L4O6:g2/0.5:h80" in names
