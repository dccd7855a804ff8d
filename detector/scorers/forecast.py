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

Seasonal forecasts (``season_period_s > 0``): a series that follows the clock (traffic, load,
usage) is predicted badly by any level, which lags the daily rise and calls it a surprise every
day. Then each level has a seasonal twin: the same EW level of the *deseasonalized* value
``x - p(t)``, forecasting ``level + p(t)``, where ``p`` is the column's daily profile: per phase
bin (``season_bins`` per period) the clock-weighted EW mean (half-life
``season_half_life_periods`` periods) of ``x - m``, ``m`` an EW mean of the column over one
period, read by linear interpolation between bin centres (no steps at bin edges). The twins
compete with the plain levels on the same mean squared error, so a column without a rhythm
keeps its plain forecast and a column with one switches to the seasonal twin on its own. The
profile fades in linearly over the period that ends ``season_warmup_periods`` periods after the
column's first value (before that the twins are the plain levels), so the twins' levels follow
it without a jump. Extra state per column: ``3 + 2 x season_bins`` numbers (and the twins'
rows of the level state).

Values that are NaN, infinite or beyond ``±1e150`` count as not observed: score 0, state
untouched. O(K) per column per tick, K rows of numpy arrays (2K rows and O(season_bins) more
with seasonal twins: the profile's weights decay every tick).
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ConfigError
from ..model import FloatArray
from .base import SCORE_CAP, ColumnLayout, directional
from .zscore import check_state, grow, observed

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
    _SEASON_ROWS = ("offset", "w_offset")  # (season_bins, n): the daily profile
    _SEASON_COLS = ("day_mean", "w_day", "first_t")

    def __init__(
        self,
        level_half_lives_s: tuple[float, ...] = (2.5, 10.0, 40.0, 160.0, 640.0),
        scale_half_life_s: float = 3600.0,
        warmup: int = 20,
        clip: float = 4.0,
        var_floor_rel: float = 1e-3,
        var_floor_abs: float = 1e-9,
        season_period_s: float = 0.0,
        season_bins: int = 24,
        season_half_life_periods: float = 4.0,
        season_warmup_periods: float = 2.0,
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
        if season_period_s < 0 or season_bins < 2 or not season_half_life_periods > 0:
            raise ConfigError(
                "seasonal forecasts need season_period_s >= 0 (0: off), season_bins >= 2 and "
                f"season_half_life_periods > 0 (got {season_period_s}, {season_bins}, "
                f"{season_half_life_periods})"
            )
        if not season_warmup_periods >= 1:
            raise ConfigError(f"season_warmup_periods must be >= 1, got {season_warmup_periods}")
        self.season_period_s = float(season_period_s)
        self.season_bins = int(season_bins) if season_period_s > 0 else 0
        self.season_half_life_s = float(season_half_life_periods) * self.season_period_s
        self.season_warmup_periods = float(season_warmup_periods)
        twins = 2 if self.season_bins else 1  # seasonal twins repeat the ladder
        level_half_lives_s = tuple(level_half_lives_s) * twins
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
        self.offset = np.zeros((self.season_bins, 0))  # EW mean of x - day_mean per phase bin
        self.w_offset = np.zeros((self.season_bins, 0))  # clock-decayed weight per bin
        self.day_mean = np.zeros(0)  # EW mean of x - profile over one period (the reference)
        self.w_day = np.zeros(0)
        self.first_t = np.zeros(0)  # clock of the column's first value (profile fade-in)

    def _grow(self, n: int) -> None:
        if n <= self.count.shape[0]:
            return
        for key in self._ROWS + self._SEASON_ROWS:
            setattr(self, key, _grow_rows(getattr(self, key), n))
        for key in self._COLS + self._SEASON_COLS:
            setattr(self, key, grow(getattr(self, key), n, 0.0))

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

        profile = self._profile(t, obs, xv, elapsed)  # (K, n): 0 on plain rows
        prediction = self.level + profile
        var = np.maximum(self.mse, (self.var_floor_rel * prediction) ** 2 + self.var_floor_abs)
        sigma = np.sqrt(var)
        resid = np.where(obs & has_level, xv - prediction, 0.0)  # (K, n)
        z_all = resid / sigma
        best = np.argmin(var, axis=0)  # the level that has predicted this column best lately
        z = np.take_along_axis(z_all, best[None, :], axis=0)[0]
        z = np.where(warm, np.clip(z, -SCORE_CAP, SCORE_CAP), 0.0)

        bound = np.where(warm, self.clip * sigma, np.inf)  # nothing to clip with in warm-up
        # the first value sets the level (of the deseasonalized value on twin rows)
        step = np.where(has_level, np.clip(resid, -bound, bound), xv - profile)
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

    def _profile(
        self, t: float, obs: np.ndarray, xv: FloatArray, elapsed: FloatArray
    ) -> FloatArray:
        """The daily profile at ``t`` on twin rows (0 on plain rows), then learn ``xv``."""
        k = self.level.shape[0]
        if not self.season_bins:
            return np.zeros((k, xv.shape[0]))
        period, bins = self.season_period_s, self.season_bins
        phase = (t % period) / period * bins - 0.5  # bin centres sit at integer phases
        below = math.floor(phase)
        frac = phase - below
        b0, b1 = below % bins, (below + 1) % bins
        self.w_offset *= np.exp2(-elapsed / self.season_half_life_s)
        self.w_day *= np.exp2(-elapsed / period)
        self.first_t = np.where(obs & (self.w_day == 0), t, self.first_t)
        fade = np.clip((t - self.first_t) / period - self.season_warmup_periods + 1.0, 0.0, 1.0)
        here = (1.0 - frac) * self.offset[b0] + frac * self.offset[b1]
        profile = np.where(obs, fade * here, 0.0)
        # learn: the value's excess over the period mean, shared by the two nearest bins
        fresh = self.w_day == 0
        excess = np.where(obs & ~fresh, xv - self.day_mean, 0.0)
        for b, share in ((b0, 1.0 - frac), (b1, frac)):
            w = share * (obs & ~fresh)
            self.w_offset[b] += w
            safe = np.where(self.w_offset[b] > 0, self.w_offset[b], 1.0)
            self.offset[b] += w * (excess - self.offset[b]) / safe
        self.w_day += obs
        # the reference is the period mean of the deseasonalized value: were it the plain mean,
        # its own daily ripple (an EW mean over one period keeps ~1/9 of the rhythm) would stay
        # in x - p; against the deseasonalized mean the profile converges to the rhythm itself
        flat = xv - here
        self.day_mean = np.where(
            fresh, flat, self.day_mean + obs * (flat - self.day_mean) / np.maximum(self.w_day, 1.0)
        )
        half = k // 2
        return np.concatenate(
            (np.zeros((half, xv.shape[0])), np.broadcast_to(profile, (half, xv.shape[0])))
        )

    def _keys(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Per-column keys and row-array keys of the state (seasonal ones when enabled)."""
        if self.season_bins:
            return self._COLS + self._SEASON_COLS, self._ROWS + self._SEASON_ROWS
        return self._COLS, self._ROWS

    def state_dict(self) -> dict[str, np.ndarray]:
        cols, rows = self._keys()
        state = {k: getattr(self, k).copy() for k in cols}
        for key in rows:
            for i, row in enumerate(getattr(self, key)):
                state[f"{key}.{i}"] = row.copy()
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        cols, rows = self._keys()
        height = {key: getattr(self, key).shape[0] for key in rows}
        keys = cols + tuple(f"{key}.{i}" for key in rows for i in range(height[key]))
        check_state(state, keys, "forecast")
        for key in cols:
            setattr(self, key, np.array(state[key], dtype=np.float64))
        for key in rows:
            stacked = [
                np.asarray(state[f"{key}.{i}"], dtype=np.float64) for i in range(height[key])
            ]
            setattr(self, key, np.stack(stacked))
