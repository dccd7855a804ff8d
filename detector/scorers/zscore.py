"""Robust exponentially weighted z-score, vectorized over every signal column.

``RobustEWBaseline`` holds the per-column state (also reused by the changepoint and health
scorers); ``RobustZScore`` turns it into the scorer of the ``Scorer`` protocol.

Per column, on every observed tick (t, x):

- decay ``d = 0.5 ** (dt / half_life_s)`` with ``dt`` the seconds since *that column's* last
  observation, so irregular gaps and columns scraped at different cadences are handled alike;
- the score uses the state *before* the update: ``z = (x - mean) / sigma`` with
  ``sigma**2 = max(var, (var_floor_rel * |mean|)**2 + var_floor_abs)`` so a flat series cannot
  produce an infinite z;
- the mean moves by the residual clipped to ``±clip·sigma`` (Huber-style: one outlier barely
  moves the baseline); points with ``|z| > clip`` do not update the variance at all (never
  learn from what is called anomalous). Their time still decays the variance's evidence
  weight; once that falls below ``relearn_weight`` observations the column re-learns (a
  metric that went from flat to noisy is not flagged forever);
- weights follow West's weighted incremental algorithm, stored as mean, variance and weight
  (``var <- (1-b)(var + b·r²)``, ``b = 1/weight``): the variance can never go negative and
  large offsets (1e12 + noise) keep full precision because only residuals are squared;
- warm-up: a column scores 0 until it has ``warmup`` observations; during warm-up nothing is
  clipped (there is no sigma to clip with yet). After ~20 half-lives of silence the history
  has no weight left and warm-up starts again.

Values that are NaN, infinite or beyond ``±1e150`` (sentinels) count as not observed: score 0,
state untouched.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ConfigError, StateError
from ..model import BoolArray, FloatArray, IntArray
from .base import SCORE_CAP, ColumnLayout

MAX_ABS_VALUE = 1e150  # squares stay finite in float64
_FORGOTTEN_WEIGHT = 1e-6  # history weight below this (~20 half-lives) means "never seen"


def observed(x: FloatArray) -> BoolArray:
    """Mask of usable values: finite and within ±MAX_ABS_VALUE (NaN compares False)."""
    return np.abs(x) <= MAX_ABS_VALUE


def grow(arr: np.ndarray, n: int, fill: float) -> np.ndarray:
    """``arr`` extended to length ``n`` with ``fill`` (a new array; the old one is untouched)."""
    out = np.full(n, fill, dtype=arr.dtype)
    out[: arr.shape[0]] = arr
    return out


def check_state(state: dict[str, np.ndarray], keys: tuple[str, ...], owner: str) -> int:
    """Validate a state dict: all ``keys`` present, 1-D, same length. Returns that length."""
    missing = [k for k in keys if k not in state]
    if missing:
        raise StateError(f"{owner} state: missing arrays {missing}")
    lengths = {np.asarray(state[k]).shape for k in keys}
    if len(lengths) != 1 or len(next(iter(lengths))) != 1:
        raise StateError(f"{owner} state: arrays must be 1-D of one length, got {lengths}")
    return int(next(iter(lengths))[0])


class RobustEWBaseline:
    """Per-column robust EW mean and variance (see module docstring). Not a scorer itself."""

    _KEYS = ("mean", "var", "w_mean", "w_var", "count", "last_t")

    def __init__(
        self,
        half_life_s: float = 3600.0,
        warmup: int = 20,
        clip: float = 4.0,
        var_floor_rel: float = 1e-3,
        var_floor_abs: float = 1e-9,
        relearn_weight: float = 1.0,
    ) -> None:
        if not half_life_s > 0:
            raise ConfigError(f"half_life_s must be > 0 seconds, got {half_life_s}")
        if warmup < 0:
            raise ConfigError(f"warmup must be >= 0 observations, got {warmup}")
        if not clip > 0:
            raise ConfigError(f"clip must be > 0 (inf disables clipping), got {clip}")
        if var_floor_rel < 0 or not var_floor_abs > 0:
            raise ConfigError("var_floor_rel must be >= 0 and var_floor_abs > 0")
        self.half_life_s = float(half_life_s)
        self.warmup = int(warmup)
        self.clip = float(clip)
        self.var_floor_rel = float(var_floor_rel)
        self.var_floor_abs = float(var_floor_abs)
        self.relearn_weight = float(relearn_weight)
        self.mean = np.zeros(0)
        self.var = np.zeros(0)
        self.w_mean = np.zeros(0)  # EW sum of weights behind the mean
        self.w_var = np.zeros(0)  # EW sum of weights behind the variance (skips anomalies)
        self.count = np.zeros(0)  # observations since the history was last forgotten
        self.last_t = np.zeros(0)  # any finite start: a zero weight makes the decay moot
        self._scratch: dict[str, np.ndarray] = {}

    def __len__(self) -> int:
        return int(self.mean.shape[0])

    def grow(self, n: int) -> None:
        """Make room for columns up to ``n`` (new columns start empty)."""
        if n <= len(self):
            return
        for key in ("mean", "var", "w_mean", "w_var", "count"):
            setattr(self, key, grow(getattr(self, key), n, 0.0))
        self.last_t = grow(self.last_t, n, 0.0)

    def sigma(self) -> FloatArray:
        """Current scale per column, floored."""
        floor = (self.var_floor_rel * self.mean) ** 2 + self.var_floor_abs
        return np.sqrt(np.maximum(self.var, floor))

    def _work(self, n: int) -> dict[str, np.ndarray]:
        """Scratch arrays reused every tick (allocating ~10 temporaries of n floats per tick
        costs more than the arithmetic itself)."""
        if "n" not in self._scratch or self._scratch["n"].shape[0] != n:
            floats = ("elapsed", "decay", "sigma", "resid", "z", "tmp", "bound")
            bools = ("obs", "missing", "warm", "cold", "accept", "flag")
            self._scratch = {k: np.empty(n) for k in floats}
            self._scratch.update({k: np.empty(n, dtype=bool) for k in bools})
            self._scratch["n"] = np.empty(n)
        return self._scratch

    def step(self, t: float, x: FloatArray) -> tuple[FloatArray, BoolArray]:
        """Score then learn one tick. Returns (signed z before the update, 0 where unscored;
        mask of columns that were observed and past warm-up). Both are scratch arrays,
        valid until the next call.

        Unobserved columns go through the same arithmetic with decay 1 and zero increments,
        which leaves their state bit-for-bit unchanged, instead of masking every array."""
        n = x.shape[0]
        self.grow(n)
        w = self._work(n)
        with np.errstate(invalid="ignore", over="ignore"):
            obs = np.less_equal(np.abs(x, out=w["tmp"]), MAX_ABS_VALUE, out=w["obs"])
            missing = np.logical_not(obs, out=w["missing"])
            elapsed = np.subtract(t, self.last_t, out=w["elapsed"])
            elapsed *= obs  # unobserved: no time passes for them, decay 1
            decay = np.maximum(elapsed, 0.0, out=w["decay"])
            np.multiply(decay, -1.0 / self.half_life_s, out=decay)
            np.exp2(decay, out=decay)
            self.w_mean *= decay
            self.w_var *= decay
            # History with no weight left is forgotten: warm-up starts again.
            self.count *= np.greater_equal(self.w_mean, _FORGOTTEN_WEIGHT, out=w["flag"])
            warm = np.greater_equal(self.count, self.warmup, out=w["warm"])

            sigma = np.multiply(self.mean, self.var_floor_rel, out=w["sigma"])
            np.multiply(sigma, sigma, out=sigma)
            sigma += self.var_floor_abs
            np.maximum(sigma, self.var, out=sigma)
            np.sqrt(sigma, out=sigma)
            resid = np.subtract(x, self.mean, out=w["resid"])
            np.copyto(resid, 0.0, where=missing)
            z = np.divide(resid, sigma, out=w["z"])

            if math.isinf(self.clip):
                accept = obs
            else:
                cold = np.logical_not(warm, out=w["cold"])
                bound = np.multiply(sigma, self.clip, out=w["bound"])
                np.copyto(bound, np.inf, where=cold)  # nothing to clip with during warm-up
                np.minimum(resid, bound, out=resid)
                np.negative(bound, out=bound)
                np.maximum(resid, bound, out=resid)
                # Anomalous points keep out of the variance while it still has evidence.
                accept = np.less_equal(np.abs(z, out=w["tmp"]), self.clip, out=w["accept"])
                accept |= cold
                accept |= np.less(self.w_var, self.relearn_weight, out=w["flag"])
                accept &= obs

            self.w_mean += obs
            step_mean = np.maximum(self.w_mean, 1.0, out=w["tmp"])
            np.divide(resid, step_mean, out=step_mean)
            self.mean += step_mean
            self.w_var += accept
            b = np.maximum(self.w_var, 1.0, out=w["tmp"])
            np.divide(accept, b, out=b)
            np.multiply(resid, resid, out=resid)  # var <- (1 - b)(var + b r²)
            resid *= b
            resid += self.var
            np.subtract(1.0, b, out=b)
            np.multiply(resid, b, out=self.var)
            self.count += obs
            self.last_t += elapsed  # == t where observed (to an ulp), unchanged elsewhere

            np.minimum(z, SCORE_CAP, out=z)
            np.maximum(z, -SCORE_CAP, out=z)
            z *= warm  # resid (so z) is already 0 where unobserved
            scored = np.logical_and(warm, obs, out=w["warm"])
        return z, scored

    def rebase_at(self, columns: IntArray, new_mean: FloatArray, weight: FloatArray) -> None:
        """``rebase`` for the listed ``columns`` only (``new_mean``/``weight`` aligned to them)."""
        self.mean[columns] = new_mean
        self.w_mean[columns] = np.minimum(self.w_mean[columns], np.maximum(weight, 1.0))

    def state_dict(self, prefix: str = "") -> dict[str, np.ndarray]:
        return {prefix + k: getattr(self, k).copy() for k in self._KEYS}

    def load_state_dict(self, state: dict[str, np.ndarray], prefix: str = "") -> None:
        sub = {k: state[prefix + k] for k in self._KEYS if prefix + k in state}
        check_state(sub, self._KEYS, f"baseline {prefix!r}")
        for k in self._KEYS:
            setattr(self, k, np.array(sub[k], dtype=np.float64))


class RobustZScore:
    """Scorer: directional robust EW z-score of each column's value (rates for counters are
    decided upstream). Parameters as ``RobustEWBaseline``."""

    name = "zscore"

    def __init__(
        self,
        half_life_s: float = 3600.0,
        warmup: int = 20,
        clip: float = 4.0,
        var_floor_rel: float = 1e-3,
        var_floor_abs: float = 1e-9,
        relearn_weight: float = 1.0,
    ) -> None:
        self.baseline = RobustEWBaseline(
            half_life_s, warmup, clip, var_floor_rel, var_floor_abs, relearn_weight
        )
        self._layout: ColumnLayout | None = None
        self._up = np.zeros(0)
        self._down = np.zeros(0)
        self._scratch = np.zeros(0)

    def update(self, t: float, x: FloatArray, layout: ColumnLayout) -> FloatArray:
        z, _ = self.baseline.step(t, x)
        if layout is not self._layout:  # cache the direction fold as two 0/1 factors
            self._up = (layout.direction >= 0).astype(np.float64)
            self._down = -(layout.direction <= 0).astype(np.float64)
            self._layout = layout
        # Same as base.directional (z is already within ±SCORE_CAP), with fewer temporaries.
        score = np.multiply(z, self._up)
        np.maximum(score, np.multiply(z, self._down, out=self._tmp(z.shape[0])), out=score)
        np.maximum(score, 0.0, out=score)
        return score

    def _tmp(self, n: int) -> FloatArray:
        if self._scratch.shape[0] != n:
            self._scratch = np.empty(n)
        return self._scratch

    def state_dict(self) -> dict[str, np.ndarray]:
        return self.baseline.state_dict()

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.baseline.load_state_dict(state)
