"""Multi-scale exponential-smoothing forecast error, vectorized over every signal column.

A deviation-from-the-mean z-score cannot tell a series that wanders (traffic, load, a
temperature following its workload) from one that jumps; a one-step-ahead forecast can. Each
column keeps ``K`` exponentially smoothed levels with half-lives ``level_half_lives_s`` (a
geometric ladder: the shortest is nearly "the last value", the longest nearly "the mean") and,
per level, the EW mean squared one-step error with ``scale_half_life_s``. The forecast of a
column is the level whose recent error is smallest, so each series picks its own smoothing
from its own history (a random walk picks the last value, white noise the mean) with one
configuration for all columns.

Per column, on every observed tick (t, x):

- decays ``0.5 ** (dt / half_life)`` with ``dt`` the seconds since that column's last
  observation (irregular gaps handled, no tick counting);
- the score uses the state *before* the update: ``z = (x - level_k) / sigma_k`` with ``k``
  the level of least mean squared error and ``sigma_k**2 = max(mse_k, (var_floor_rel *
  |level_k|)**2 + var_floor_abs)``, folded by the column's direction;
- every level moves by its residual clipped to ``±clip·sigma_k`` (one outlier barely moves
  it) and ``mse_k`` learns the squared residual winsorized at ``(clip·sigma_k)**2``: an
  outlier adds at most ``clip**2`` sigmas², yet a column whose errors really are heavy-tailed
  widens its scale instead of alarming forever (rejecting outliers outright would freeze the
  scale of such a column at its quietest);
- warm-up: a column scores 0 until it has ``warmup`` observations (the first one only sets
  the levels; nothing is clipped before the scale exists). After ~20 ``scale_half_life_s``
  of silence the history is forgotten and warm-up starts again.

Values that are NaN, infinite or beyond ``±1e150`` count as not observed: score 0, state
untouched. O(K) per column per tick, K rows of numpy arrays.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from ..model import FloatArray
from .base import SCORE_CAP, ColumnLayout, directional
from .zscore import check_state, observed

_FORGOTTEN_WEIGHT = 1e-6  # history weight below this (~20 half-lives) means "never seen"


def _grow_rows(arr: np.ndarray, n: int) -> np.ndarray:
    """A (K, m) array extended with zero columns to (K, n)."""
    out = np.zeros((arr.shape[0], n))
    out[:, : arr.shape[1]] = arr
    return out


class ForecastError:
    """Scorer: one-step forecast error of the best of several EW levels (module docstring)."""

    name = "forecast"
    _ROWS = ("level", "w_level", "mse", "w_mse")
    _COLS = ("count", "w_seen", "last_t")

    def __init__(
        self,
        level_half_lives_s: tuple[float, ...] = (2.5, 10.0, 40.0, 160.0, 640.0),
        scale_half_life_s: float = 3600.0,
        warmup: int = 20,
        clip: float = 4.0,
        var_floor_rel: float = 1e-3,
        var_floor_abs: float = 1e-9,
    ) -> None:
        if not level_half_lives_s or min(level_half_lives_s) <= 0:
            raise ConfigError(f"level_half_lives_s must be > 0 seconds, got {level_half_lives_s}")
        if not scale_half_life_s > 0:
            raise ConfigError(f"scale_half_life_s must be > 0 seconds, got {scale_half_life_s}")
        if warmup < 1:
            raise ConfigError(f"warmup must be >= 1 observation, got {warmup}")
        if not clip > 0:
            raise ConfigError(f"clip must be > 0, got {clip}")
        if var_floor_rel < 0 or not var_floor_abs > 0:
            raise ConfigError("var_floor_rel must be >= 0 and var_floor_abs > 0")
        self.level_half_lives_s = np.array(level_half_lives_s, dtype=np.float64)[:, None]
        self.scale_half_life_s = float(scale_half_life_s)
        self.warmup = int(warmup)
        self.clip = float(clip)
        self.var_floor_rel = float(var_floor_rel)
        self.var_floor_abs = float(var_floor_abs)
        k = self.level_half_lives_s.shape[0]
        self.level = np.zeros((k, 0))  # smoothed levels, one row per half-life
        self.w_level = np.zeros((k, 0))  # EW weight behind each level
        self.mse = np.zeros((k, 0))  # EW mean squared (winsorized) one-step error per level
        self.w_mse = np.zeros((k, 0))  # EW weight behind each mse
        self.count = np.zeros(0)  # observations since the history was last forgotten
        self.w_seen = np.zeros(0)  # EW weight of all observations (scale half-life)
        self.last_t = np.zeros(0)

    def _grow(self, n: int) -> None:
        if n <= self.count.shape[0]:
            return
        for key in self._ROWS:
            setattr(self, key, _grow_rows(getattr(self, key), n))
        for key in self._COLS:
            old = getattr(self, key)
            new = np.zeros(n)
            new[: old.shape[0]] = old
            setattr(self, key, new)

    def update(self, t: float, x: FloatArray, layout: ColumnLayout) -> FloatArray:
        n = x.shape[0]
        self._grow(n)
        obs = observed(x)
        xv = np.where(obs, x, 0.0)
        # Unobserved columns see no time pass: decay 1 and zero increments keep them unchanged.
        elapsed = np.where(obs, np.maximum(t - self.last_t, 0.0), 0.0)
        self.w_level *= np.exp2(-elapsed / self.level_half_lives_s)
        scale_decay = np.exp2(-elapsed / self.scale_half_life_s)
        self.w_mse *= scale_decay
        self.w_seen *= scale_decay
        self.count *= self.w_seen >= _FORGOTTEN_WEIGHT  # all history faded: warm up again
        has_level = self.count > 0
        warm = self.count >= self.warmup

        var = np.maximum(self.mse, (self.var_floor_rel * self.level) ** 2 + self.var_floor_abs)
        sigma = np.sqrt(var)
        resid = np.where(obs & has_level, xv - self.level, 0.0)  # (K, n)
        z_all = resid / sigma
        best = np.argmin(var, axis=0)  # the level that has predicted this column best lately
        z = np.take_along_axis(z_all, best[None, :], axis=0)[0]
        z = np.where(warm, np.clip(z, -SCORE_CAP, SCORE_CAP), 0.0)

        bound = np.where(warm, self.clip * sigma, np.inf)  # nothing to clip with in warm-up
        step = np.where(has_level, np.clip(resid, -bound, bound), xv)  # first value sets level
        self.w_level += obs
        self.level += step * obs / np.maximum(self.w_level, 1.0)
        learn = obs & has_level
        self.w_mse += learn
        squared = np.minimum(resid * resid, bound * bound)
        self.mse += learn * (squared - self.mse) / np.maximum(self.w_mse, 1.0)
        self.w_seen += obs
        self.count += obs
        self.last_t = np.where(obs, t, self.last_t)
        return directional(z, layout.direction)

    def state_dict(self) -> dict[str, np.ndarray]:
        state = {k: getattr(self, k).copy() for k in self._COLS}
        for key in self._ROWS:
            for i, row in enumerate(getattr(self, key)):
                state[f"{key}.{i}"] = row.copy()
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        k = self.level_half_lives_s.shape[0]
        keys = self._COLS + tuple(f"{key}.{i}" for key in self._ROWS for i in range(k))
        check_state(state, keys, "forecast")
        for key in self._COLS:
            setattr(self, key, np.array(state[key], dtype=np.float64))
        for key in self._ROWS:
            rows = [np.asarray(state[f"{key}.{i}"], dtype=np.float64) for i in range(k)]
            setattr(self, key, np.stack(rows))
