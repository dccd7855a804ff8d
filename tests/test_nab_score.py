"""The NAB scorer (bench/nab_score.py) against hand-computed values on small label sets.

Reward curve used for the expected values: sigma(y) = 2 / (1 + e^(5y)) - 1 = -tanh(2.5 y), so
a detection on the first row of a window is worth exactly A_TP (sigma(-1) / sigma(-1)).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from detector.errors import ConfigError

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/ is scripts, not installed

from bench import nab as harness_module
from bench import nab_score as nab

Corpus = tuple[ModuleType, list[Any], dict[str, Any]]  # harness module, NabFile list, profiles
STANDARD = nab.CostMatrix(tp=1.0, fp=0.11, fn=1.0)
LOW_FN = nab.CostMatrix(tp=1.0, fp=0.11, fn=2.0)
WINDOW = (50, 59)  # rows 50..59 of a 100-row file: width 10; probation is rows 0..14


def _sigma(y: float) -> float:
    return -math.tanh(2.5 * y)


def _file(detections: dict[int, float], rows: int = 100) -> object:
    scores = np.zeros(rows)
    for row, score in detections.items():
        scores[row] = score
    return nab.FileRows("f.csv", scores, (WINDOW,))


def test_probation_is_fifteen_percent_capped_at_750_rows() -> None:
    """The unscored head is floor(15% of rows), never more than 750 rows."""
    assert [nab.probation_length(n) for n in (100, 4032, 22695)] == [15, 604, 750]


def test_detection_on_window_start_scores_100() -> None:
    """A detector that hits every window on its first row and nothing else is perfect."""
    result = nab.best_threshold([_file({50: 1.0})], STANDARD)
    assert (result.raw, result.normalized, result.detected_windows) == (1.0, 100.0, 1)


def test_never_firing_scores_0() -> None:
    """The null detector (no detection ever) scores 0 under every profile."""
    for cost in (STANDARD, LOW_FN):
        result = nab.best_threshold([_file({})], cost)
        assert (-cost.fn, 0.0) == (result.raw, result.normalized)


def test_detection_on_window_end_earns_the_sigmoid_of_its_row_position() -> None:
    """The last row of a 10-row window sits at y = -1/10: worth sigma(-0.1) / sigma(-1)."""
    expected_raw = _sigma(-0.1) / _sigma(-1.0)
    result = nab.score_at([_file({59: 1.0})], STANDARD, 0.5)
    assert result.raw == pytest.approx(expected_raw)
    assert result.normalized == pytest.approx(100.0 * (expected_raw + 1.0) / 2.0)


def test_only_the_earliest_detection_in_a_window_counts() -> None:
    """Detections on rows 55 and 52 are worth what row 52 alone is worth."""
    alone = nab.score_at([_file({52: 1.0})], STANDARD, 0.5).raw
    both = nab.score_at([_file({52: 1.0, 55: 1.0})], STANDARD, 0.5).raw
    assert alone == pytest.approx(_sigma(-0.8) / _sigma(-1.0))
    assert alone == pytest.approx(both)


def test_false_positive_before_any_window_costs_the_full_fp_weight() -> None:
    """A detection on row 20 (after probation, before the window) costs A_FP = 0.11."""
    result = nab.score_at([_file({20: 1.0, 50: 1.0})], STANDARD, 0.5)
    assert result.raw == pytest.approx(1.0 - 0.11)
    assert result.normalized == pytest.approx(94.5)
    assert result.false_positive_rows == 1


def test_false_positive_after_a_window_costs_by_distance_from_its_end() -> None:
    """Row 64 is 5 rows past the window end: y = 5 / (width - 1) = 5/9, cost 0.11 sigma(5/9)."""
    result = nab.score_at([_file({64: 1.0, 50: 1.0})], STANDARD, 0.5)
    assert result.raw == pytest.approx(1.0 + 0.11 * _sigma(5.0 / 9.0))


def test_false_positive_three_widths_past_a_window_costs_the_full_fp_weight() -> None:
    """From y = 3 on (row 59 + 27 = 86) the FP cost is exactly A_FP."""
    result = nab.score_at([_file({86: 1.0, 50: 1.0})], STANDARD, 0.5)
    assert result.raw == pytest.approx(1.0 - 0.11)


def test_detections_in_the_probationary_period_are_ignored() -> None:
    """A detection on row 14 (the last probationary row) changes nothing."""
    result = nab.score_at([_file({14: 1.0, 50: 1.0})], STANDARD, 0.5)
    assert (result.raw, result.false_positive_rows) == (1.0, 0)


def test_missed_window_costs_the_fn_weight_of_the_profile() -> None:
    """Low-FN profile: one of two windows missed costs A_FN = 2; normalized to (1-2+4)/(2+4)."""
    hit = nab.FileRows("a.csv", np.where(np.arange(100) == 50, 1.0, 0.0), (WINDOW,))
    missed = nab.FileRows("b.csv", np.zeros(100), (WINDOW,))
    result = nab.score_at([hit, missed], LOW_FN, 0.5)
    assert (-1.0, pytest.approx(50.0)) == (result.raw, result.normalized)


def test_one_threshold_is_chosen_for_the_whole_corpus() -> None:
    """Threshold 0.9 admits a hit and an FP (0.89) and beats 0.95 (FP only) and never firing."""
    result = nab.best_threshold([_file({20: 0.95, 50: 0.9})], STANDARD)
    assert (0.9, pytest.approx(0.89)) == (result.threshold, result.raw)


def test_a_costly_false_positive_makes_silence_the_best_threshold() -> None:
    """With A_FP = 3 the same detections are worth less than firing never: score 0."""
    costly = nab.CostMatrix(tp=1.0, fp=3.0, fn=1.0)
    result = nab.best_threshold([_file({20: 0.95, 50: 0.9})], costly)
    assert (math.inf, 0.0) == (result.threshold, result.normalized)


def test_equal_scores_are_admitted_together() -> None:
    """An FP tied with the hit at 0.9 cannot be left out: the best is hit + FP, not hit alone."""
    result = nab.best_threshold([_file({20: 0.9, 50: 0.9})], STANDARD)
    assert (0.9, pytest.approx(0.89)) == (result.threshold, result.raw)


def test_window_limits_map_to_the_first_row_with_that_timestamp() -> None:
    """Repeated timestamps: NAB locates a window limit at the first matching row."""
    stamps = np.array(
        ["2014-01-01T00:00", "2014-01-01T00:05", "2014-01-01T00:05", "2014-01-01T00:10"],
        dtype="datetime64[s]",
    )
    rows = nab.window_rows(stamps, [["2014-01-01 00:05:00.000000", "2014-01-01 00:10:00"]], "f")
    assert rows == ((1, 3),)


def test_window_limit_missing_from_the_file_is_a_config_error() -> None:
    """A label whose timestamp is not a row of the file is rejected, naming the file."""
    stamps = np.array(["2014-01-01T00:00", "2014-01-01T00:05"], dtype="datetime64[s]")
    with pytest.raises(ConfigError, match=r"f\.csv"):
        nab.window_rows(stamps, [["2014-01-01 00:01:00", "2014-01-01 00:05:00"]], "f.csv")


def test_published_profiles_load_with_their_weights(real_data: Path) -> None:
    """NAB's config/profiles.json gives standard (1, 0.11, 1) and low-FN (1, 0.11, 2)."""
    profiles = nab.load_profiles(real_data / "nab" / "config" / "profiles.json")
    assert profiles["standard"] == STANDARD
    assert profiles["reward_low_FN_rate"] == LOW_FN
    assert profiles["reward_low_FP_rate"].fp == 0.22


# The few NAB files the repository keeps (tests/data/README.md); the whole corpus is the
# benchmark's (bench/nab.py --data PATH checks the windowed Gaussian against the published
# scoreboard on it).
KEPT = [
    "realAWSCloudwatch/ec2_cpu_utilization_c6585a.csv",
    "realAdExchange/exchange-3_cpc_results.csv",
    "realTraffic/speed_7578.csv",
]


@pytest.fixture(scope="module")
def nab_corpus(real_data: Path) -> Corpus:
    """The NAB files kept in tests/data/nab (3 files, 7 windows) loaded through bench/nab.py."""
    harness = harness_module
    root = real_data / "nab"
    corpus = harness.load_corpus(root, KEPT)
    return harness, corpus, nab.load_profiles(root / "config" / "profiles.json")


def test_real_files_null_and_perfect_detectors_score_0_and_100(nab_corpus: Corpus) -> None:
    """On real NAB windows: never firing is 0, firing on each window's first row is 100."""
    _, corpus, profiles = nab_corpus
    assert 7 == sum(len(f.windows) for f in corpus)
    null = [nab.FileRows(f.name, np.zeros(f.values.shape[0]), f.windows) for f in corpus]
    perfect = [
        nab.FileRows(f.name, f.labels() * np.diff(f.labels(), prepend=0).clip(0), f.windows)
        for f in corpus
    ]
    for cost in profiles.values():
        assert nab.best_threshold(null, cost).normalized == 0.0
        assert nab.best_threshold(perfect, cost).normalized == pytest.approx(100.0)


def test_benchmarks_without_the_whole_corpus_exit_saying_how_to_get_it(real_data: Path) -> None:
    """No --data, or a folder that is not the whole corpus (the few files kept here): the NAB
    benchmarks exit naming what is missing and where NAB comes from."""
    with pytest.raises(SystemExit, match=r"^no --data PATH given\..*git clone https://github"):
        harness_module.require_corpus(None)
    partial = real_data / "nab"
    with pytest.raises(SystemExit) as refused:
        harness_module.require_corpus(partial)
    assert str(refused.value).startswith(
        f"{partial} is not the whole NAB corpus: no results/final_results.json. "
    )
    assert "git clone https://github.com/numenta/NAB and pass --data PATH/TO/NAB" in str(
        refused.value
    )


def test_seasonal_gate_explains_a_daily_spike_and_only_ever_discounts(
    nab_corpus: Corpus,
) -> None:
    """ec2_cpu_utilization_c6585a spikes once a day at ~03:20: from the third day on the hourly
    profile finds most spikes ordinary (gate at its floor), so the gated detector scores those
    spikes lower than the ungated one; every score is in [0, 1]."""
    harness, corpus, _ = nab_corpus
    f = next(f for f in corpus if f.name.endswith("ec2_cpu_utilization_c6585a.csv"))
    cfg = harness.SeasonalConfig()
    spikes = np.flatnonzero(f.values > 1.0)
    day3 = spikes[f.times[spikes] >= f.times[0] + 3 * 86400]
    assert spikes.size >= 10
    gate_input = harness.seasonal_z(f, cfg)
    assert np.isinf(gate_input[spikes[0]])  # first day: the hour is not learnt yet
    assert (gate_input[day3] < cfg.gate_z).mean() > 0.8
    scores = {**harness.seasonal_detectors(f, cfg), **harness.own_past_detectors(f, cfg)}
    for name, score in scores.items():
        assert score.shape == f.values.shape, name
        assert np.all((score >= 0.0) & (score <= 1.0)), name
    gated = scores["likelihoodContextSeasonal"][day3].sum()
    assert gated < scores["likelihoodContextHold80"][day3].sum()
