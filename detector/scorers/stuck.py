"""Stuck value: a moving column that stops moving for longer than ever before, vectorized.

A gauge that freezes (an exporter serving its last reading, a sensor or counter that stopped
updating, a device that fell off the bus while the scrape still answers) produces values that
are perfectly ordinary: inside the column's range, close to the forecast, common for the hour.
Every level- or prediction-based scorer therefore calls it healthy. What is new is the *run*:
the same value repeated, observation after observation, for longer than the column has ever
repeated one.

Per column we count the current run (observations equal to the one before) and remember the
longest completed run on record. Once the column has ``warmup`` observations behind it and has
changed at least once (a column that never moved is constant, not stuck: a flat series scores
0), a run that reaches ``max(min_run, ratio x longest)`` scores ``alarm_z`` once (like
RangeNovelty's new extreme: one alert per new record, not one per stuck observation). When the
value changes, the finished run joins the record, so a column whose values repeat in long runs
by nature (a sparse counter, a quantized gauge) learns that and needs a longer run to fire.

No clock inside: runs are counted in observations (a scrape interval is the unit in which a
gauge freezes). Equality is exact: a frozen source repeats its bytes; a quiet analogue signal
still wobbles in its last digits. NaN, infinite or sentinel (beyond ±1e150) values: score 0,
state untouched (a gap neither extends nor breaks a run).
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from ..model import FloatArray
from .base import SCORE_CAP, ColumnLayout
from .zscore import grow, load_arrays, observed


class StuckRun:
    """Scorer: a run of one repeated value longer than any on record (see module docstring)."""

    name = "stuck"
    _KEYS = ("last", "run", "longest", "changes", "count", "fired")

    def __init__(
        self, min_run: int = 10, ratio: float = 2.0, warmup: int = 100, alarm_z: float = 6.0
    ) -> None:
        if min_run < 1 or not ratio >= 1.0:
            raise ConfigError(f"stuck run needs min_run >= 1 and ratio >= 1 ({min_run}, {ratio})")
        if warmup < 0 or not 0 < alarm_z <= SCORE_CAP:
            raise ConfigError(f"stuck run needs warmup >= 0 and 0 < alarm_z <= {SCORE_CAP}")
        self.min_run = int(min_run)
        self.ratio = float(ratio)
        self.warmup = int(warmup)
        self.alarm_z = float(alarm_z)
        self.last = np.zeros(0)  # last observed value (NaN before the first)
        self.run = np.zeros(0)  # observations equal to the one before, in the current run
        self.longest = np.zeros(0)  # longest completed run on record
        self.changes = np.zeros(0)  # observed changes of value (saturates at 1)
        self.count = np.zeros(0)  # observations so far (saturates at warmup)
        self.fired = np.zeros(0)  # 1 once the current run has scored

    def update(self, t: float, x: FloatArray, layout: ColumnLayout) -> FloatArray:
        n = x.shape[0]
        if n > self.run.shape[0]:
            self.last = grow(self.last, n, np.nan)
            for key in self._KEYS[1:]:
                setattr(self, key, grow(getattr(self, key), n, 0.0))
        obs = observed(x)
        same = obs & (x == self.last)  # NaN last (no value yet) compares False
        changed = obs & ~same & ~np.isnan(self.last)
        self.longest = np.where(changed, np.maximum(self.longest, self.run), self.longest)
        self.run = np.where(same, self.run + 1.0, np.where(obs, 0.0, self.run))
        self.fired = np.where(changed, 0.0, self.fired)
        record = np.maximum(float(self.min_run), self.ratio * self.longest)
        live = same & (self.count >= self.warmup) & (self.changes > 0) & (self.fired == 0)
        fire = live & (self.run >= record)
        self.fired = np.where(fire, 1.0, self.fired)
        self.changes = np.minimum(self.changes + changed, 1.0)
        self.count = np.minimum(self.count + obs, float(self.warmup))
        self.last = np.where(obs, x, self.last)
        return np.where(fire, self.alarm_z, 0.0)

    def state_dict(self) -> dict[str, np.ndarray]:
        return {k: getattr(self, k).copy() for k in self._KEYS}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        load_arrays(self, state, self._KEYS, "stuck")
