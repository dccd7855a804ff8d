"""Seasonal profile: a value unusual for this time of day, vectorized.

Traffic, load and usage follow the clock: 3 a.m. is quiet, noon is busy. A model without a
notion of time of day calls the daily rise a surprise every day; people do not. Per column we
keep a profile of the period (a day by default) in ``bins`` phase bins (hours by default): for
each bin an exponentially weighted mean of the values seen in that phase and their mean
absolute deviation from it, with a half-life of ``half_life_periods`` periods measured on the
clock (so the profile follows slow drifts and forgets a changed routine in a few periods).

Each bin also keeps a decaying *envelope*: its highest and lowest value, whose excess over the
bin's mean fades with the same half-life. The score is the distance of the value beyond that
envelope (0 inside it) divided by ``scale``, the bin's deviation (times 1.25: mean absolute
deviation -> sigma for a normal) floored at ``tolerance`` times the column's all-time range, so
a bin that happened to be constant cannot turn a tiny wobble into certainty (Numenta's 5 %
spatial tolerance again); folded by the column's direction, capped at ``SCORE_CAP``. A spike
that comes every night at 03:20 widens the 03:00 envelope and stops scoring after a day or
two; the day's level at night, or a spike twice that size, still scores.

A bin is *learnt* once values have fallen in it on ``warmup_periods`` separate visits (a visit
starts when the bin was last fed more than half a period ago); before that the column scores 0
there and ``learnt`` (public, per column, refreshed on each update) is False, so a caller that
uses the profile to *explain* surprises (bench/nab.py discounts a forecast surprise that the
profile finds ordinary) can tell "ordinary for this hour" from "no profile yet".

Weights follow the project's clock convention: ``w <- w * 2**(-dt / half_life) + 1`` and the
mean moves by ``1 / w`` of the innovation, so the readings of one visit count about equally
and earlier periods fade with the half-life. No look-ahead; memory ``O(bins)`` per column.

NaN, infinite or sentinel (beyond ±1e150) values: score 0, state untouched.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from ..model import BoolArray, FloatArray
from .base import SCORE_CAP, ColumnLayout, directional
from .zscore import grow, load_arrays, observed

_MAD_TO_SIGMA = 1.25  # mean absolute deviation of a normal is 0.8 sigma


class SeasonalProfile:
    """Scorer: distance of a value from its phase bin's profile (see module docstring)."""

    name = "seasonal"
    _KEYS = ("low", "high")
    _BIN_KEYS = ("mean", "dev", "top", "bottom", "weight", "visits", "last_t")

    def __init__(
        self,
        period_s: float = 86400.0,
        bins: int = 24,
        half_life_periods: float = 4.0,
        warmup_periods: int = 2,
        tolerance: float = 0.05,
    ) -> None:
        if not period_s > 0 or bins < 1:
            raise ConfigError(f"seasonal profile needs period_s > 0 and bins >= 1 ({period_s})")
        if not half_life_periods > 0 or warmup_periods < 1 or not tolerance > 0:
            raise ConfigError(
                "seasonal profile needs half_life_periods > 0, warmup_periods >= 1, tolerance > 0"
            )
        self.period_s = float(period_s)
        self.bins = int(bins)
        self.half_life_s = float(half_life_periods) * self.period_s
        self.warmup_periods = int(warmup_periods)
        self.tolerance = float(tolerance)
        self.low = np.zeros(0)  # all-time minimum (+inf before the first value)
        self.high = np.zeros(0)  # all-time maximum (-inf before the first value)
        self.mean = np.zeros((0, self.bins))  # EW mean per phase bin
        self.dev = np.zeros((0, self.bins))  # EW mean absolute deviation per phase bin
        self.top = np.zeros((0, self.bins))  # decaying envelope: highest value of the bin
        self.bottom = np.zeros((0, self.bins))  # decaying envelope: lowest value of the bin
        self.weight = np.zeros((0, self.bins))  # EW weight behind them
        self.visits = np.zeros((0, self.bins))  # separate visits so far (saturates)
        self.last_t = np.zeros((0, self.bins))  # when each bin was last fed
        self.learnt: BoolArray = np.zeros(0, dtype=bool)  # last update: was the bin learnt?

    def _grow(self, n: int) -> None:
        self.low = grow(self.low, n, np.inf)
        self.high = grow(self.high, n, -np.inf)
        for key in self._BIN_KEYS:
            setattr(self, key, grow(getattr(self, key), n, 0.0))

    def phase_bin(self, t: float) -> int:
        """The phase bin of clock time ``t`` (seconds)."""
        return int((t % self.period_s) / self.period_s * self.bins) % self.bins

    def update(self, t: float, x: FloatArray, layout: ColumnLayout) -> FloatArray:
        n = x.shape[0]
        if n > self.low.shape[0]:
            self._grow(n)
        self.learnt = np.zeros(n, dtype=bool)
        score = np.zeros(n)
        cols = np.flatnonzero(observed(x))
        if cols.size == 0:
            return score
        b = self.phase_bin(t)
        xv = x[cols]
        mean, dev = self.mean[cols, b], self.dev[cols, b]
        learnt = self.visits[cols, b] >= self.warmup_periods
        floor = self.tolerance * np.maximum(self.high[cols] - self.low[cols], 0.0)
        scale = np.maximum(_MAD_TO_SIGMA * dev, floor)
        elapsed = np.maximum(t - self.last_t[cols, b], 0.0)
        fade = np.exp2(-elapsed / self.half_life_s)
        top = mean + (self.top[cols, b] - mean) * fade
        bottom = mean + (self.bottom[cols, b] - mean) * fade
        beyond = np.maximum(xv - top, 0.0) - np.maximum(bottom - xv, 0.0)
        safe = np.where(scale > 0, scale, 1.0)
        z = np.where(scale > 0, beyond / safe, np.sign(beyond) * SCORE_CAP)
        folded = directional(z, layout.direction[cols])
        score[cols] = np.where(learnt, folded, 0.0)
        self.learnt[cols] = learnt
        # learn: clock-weighted EW mean, absolute deviation and envelope of this phase bin
        fresh = self.weight[cols, b] == 0
        new_visit = fresh | (elapsed > 0.5 * self.period_s)
        weight = self.weight[cols, b] * fade + 1.0
        diff = xv - mean
        self.dev[cols, b] = np.where(fresh, 0.0, dev + (np.abs(diff) - dev) / weight)
        self.mean[cols, b] = np.where(fresh, xv, mean + diff / weight)
        self.top[cols, b] = np.where(fresh, xv, np.maximum(top, xv))
        self.bottom[cols, b] = np.where(fresh, xv, np.minimum(bottom, xv))
        self.weight[cols, b] = weight
        self.visits[cols, b] = np.minimum(self.visits[cols, b] + new_visit, self.warmup_periods)
        self.last_t[cols, b] = t
        self.low[cols] = np.minimum(self.low[cols], xv)
        self.high[cols] = np.maximum(self.high[cols], xv)
        return score

    def state_dict(self) -> dict[str, np.ndarray]:
        return {k: getattr(self, k).copy() for k in (*self._KEYS, *self._BIN_KEYS)}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        rows = dict.fromkeys(self._BIN_KEYS, (self.bins,))
        n = load_arrays(self, state, self._KEYS, "seasonal", rows)
        self.learnt = np.zeros(n, dtype=bool)
