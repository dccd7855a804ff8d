"""Range novelty: a value outside everything the column has ever shown, vectorized.

A model of "normal" learns slowly by design, so the first excursion to a level never seen
before can look merely unusual to it. People (and NAB's labellers) call a new extreme an
anomaly outright; Numenta's NAB detector adds the same rule beside its likelihood ("spatial
anomaly", 5 % tolerance). Per column we keep the smallest and largest value observed since the
history began; once ``warmup`` values are in and the range is not empty, a value beyond it by
more than ``tolerance`` times its width scores

    alarm_z + excess / (tolerance * width)

(``alarm_z`` at the tolerance edge, one more z unit per further tolerance width, capped at
``SCORE_CAP``), folded by the column's direction (up: above the maximum, down: below the
minimum). The range then includes the new value, so a new level fires once, not for as long
as it lasts. No time constant: the score does not depend on the clock at all.

NaN, infinite or sentinel (beyond ±1e150) values: score 0, state untouched.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from ..model import FloatArray
from .base import SCORE_CAP, ColumnLayout
from .zscore import grow, load_arrays, observed


class RangeNovelty:
    """Scorer: distance beyond the column's all-time range, in tolerance widths (docstring)."""

    name = "range"
    _KEYS = ("low", "high", "count")

    def __init__(self, tolerance: float = 0.05, warmup: int = 20, alarm_z: float = 6.0) -> None:
        if not tolerance > 0:
            raise ConfigError(f"tolerance must be > 0 (a fraction of the range), got {tolerance}")
        if warmup < 1 or not alarm_z > 0:
            raise ConfigError("range novelty needs warmup >= 1 and alarm_z > 0")
        self.tolerance = float(tolerance)
        self.warmup = int(warmup)
        self.alarm_z = float(alarm_z)
        self.low = np.zeros(0)  # smallest value seen, +inf before the first
        self.high = np.zeros(0)  # largest value seen, -inf before the first
        self.count = np.zeros(0)

    def update(self, t: float, x: FloatArray, layout: ColumnLayout) -> FloatArray:
        n = x.shape[0]
        if n > self.count.shape[0]:
            self.low = grow(self.low, n, np.inf)
            self.high = grow(self.high, n, -np.inf)
            self.count = grow(self.count, n, 0.0)
        obs = observed(x)
        xv = np.where(obs, x, 0.0)
        width = self.high - self.low  # -inf before the first value, 0 while flat
        margin = self.tolerance * np.where(width > 0, width, 1.0)
        direction = layout.direction
        above = np.where(direction >= 0, xv - self.high, -np.inf)
        below = np.where(direction <= 0, self.low - xv, -np.inf)
        excess = (np.maximum(above, below) - margin) / margin
        live = obs & (self.count >= self.warmup) & (width > 0) & (excess > 0)
        score = np.where(live, np.minimum(self.alarm_z + excess, SCORE_CAP), 0.0)
        self.low = np.where(obs, np.minimum(self.low, xv), self.low)
        self.high = np.where(obs, np.maximum(self.high, xv), self.high)
        self.count += obs
        return score

    def state_dict(self) -> dict[str, np.ndarray]:
        return {k: getattr(self, k).copy() for k in self._KEYS}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        load_arrays(self, state, self._KEYS, "range")
