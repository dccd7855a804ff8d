"""NAB round 3 fusion pieces (bench/nab.py): tail recalibration, gate memory, StuckRun in fuse."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/ is scripts, not installed

from bench import nab


def test_ew_past_sum_equals_the_recursion_across_blocks() -> None:
    """The blockwise vectorized sum equals s_i = a s_(i-1) + f_(i-1), over many blocks."""
    flags = (np.random.default_rng(0).random(1000) < 0.1).astype(np.float64)
    a = 0.5 ** (1 / 30.0)
    expected, s = np.zeros(1000), 0.0
    for i in range(1000):
        expected[i] = s
        s = a * s + flags[i]
    np.testing.assert_allclose(nab.ew_past_sum(flags, 30.0), expected, rtol=1e-12, atol=1e-12)


def test_recalibration_leaves_a_calibrated_stream_and_deflates_a_noisy_one() -> None:
    """One-sided normal z keeps its scores (up to the rate estimate's noise); the same z x 1.6
    crosses 3 as often as N(0, 1) crosses 1.875 (3 %), so it loses 3 - 1.875 = 1.125."""
    z = np.maximum(np.random.default_rng(1).normal(size=20000), 0.0)
    z[:32] = 0.0
    calm = nab.recalibrate(z, 3.0, 3000.0)
    assert np.max((z - calm)[-5000:]) < 0.35
    noisy = 1.6 * z
    shifted = nab.recalibrate(noisy, 3.0, 3000.0)
    late = np.flatnonzero(noisy > 4.0)[-20:]
    shift = noisy[late] - shifted[late]
    assert 0.9 < float(np.median(shift)) < 1.35
    assert np.all(shifted <= noisy)
    assert np.all(shifted[noisy == 0] == 0)


def test_gate_memory_keeps_a_surprise_unexplained_if_any_recent_row_was_unusual() -> None:
    """A surprise on a row ordinary for its hour counts half, or fully when the row before it
    was beyond the hour's envelope and the gate remembers 2 rows."""
    parts = nab.Components(
        likelihood=np.array([0.0, 0.0, 8.0]),
        range=np.zeros(3),
        context=np.zeros(3),
        seasonal=np.array([0.0, 5.0, 0.0]),
    )
    cfg = replace(nab.SeasonalConfig(), holdoff_rows=0)
    assert 4.0 == nab.fuse(parts, cfg, 0.0)[2]
    assert 8.0 == nab.fuse(parts, replace(cfg, gate_memory_rows=2), 0.0)[2]


def test_stuck_scores_are_fused_ungated() -> None:
    """A StuckRun alarm on a row ordinary for its hour keeps its full value (like range)."""
    parts = nab.Components(
        likelihood=np.zeros(2),
        range=np.zeros(2),
        context=np.zeros(2),
        seasonal=np.zeros(2),
        stuck=np.array([0.0, 6.0]),
    )
    cfg = replace(nab.SeasonalConfig(), holdoff_rows=0)
    assert [0.0, 6.0] == nab.fuse(parts, cfg, 2.67).tolist()
