"""The kernels' decay fill (kernels.decays, decays2): every entry exp2(max(e, 0) * rate) of
its own elapsed time, bit for bit, whichever pass or scan finds it."""

from __future__ import annotations

import numpy as np

from detector.scorers.kernels.ew import NO_DECAY, decay, decays, decays2

RATES = (-1 / 600, -1 / 30)


def _reference(last_t: np.ndarray, t: float, rate: float) -> np.ndarray:
    """The kernels' own scalar ``decay`` per entry (numpy's exp2 may differ by an ulp)."""
    return np.array([decay(e, rate, NO_DECAY)[0] for e in np.maximum(t - last_t, 0.0).tolist()])


def test_decays_are_exact_for_more_distinct_gaps_than_the_passes_take() -> None:
    """Multiples of the tick (the passes' candidates) and more irregular gaps than the
    vectorized passes take get their exact decay, at one rate and at two."""
    rng = np.random.default_rng(2)
    for ticks in ([1] * 90 + [2] * 8 + [3, 4], list(range(1, 30))):
        last_t = 1000.0 - 15.0 * rng.choice(ticks, size=3000) - (rng.random(3000) < 0.01) * 0.37
        out, a, b = np.empty(3000), np.empty(3000), np.empty(3000)
        decays(1000.0, last_t, RATES[0], out)
        decays2(1000.0, last_t, RATES[0], RATES[1], a, b)
        want = [_reference(last_t, 1000.0, r) for r in RATES]
        for got, expected in ((out, want[0]), (a, want[0]), (b, want[1])):
            assert np.array_equal(expected, got)


def test_decays_are_exact_when_the_first_column_missed_ticks() -> None:
    """A first column two or three ticks behind (its multiples are not the others' gaps) and
    never-observed columns (NaN times) leave nothing undecayed or wrong."""
    rng = np.random.default_rng(3)
    for first in (970.0, 955.0, np.nan):
        last_t = 1000.0 - 15.0 * rng.choice([1] * 18 + [2, 3], size=2000)
        last_t[0] = first
        last_t[rng.random(2000) < 0.02] = np.nan
        out, a, b = np.empty(2000), np.empty(2000), np.empty(2000)
        decays(1000.0, last_t, RATES[0], out)
        decays2(1000.0, last_t, RATES[0], RATES[1], a, b)
        seen = ~np.isnan(last_t)
        want = [_reference(last_t[seen], 1000.0, r) for r in RATES]
        for got, expected in ((out, want[0]), (a, want[0]), (b, want[1])):
            assert np.array_equal(expected, got[seen])
