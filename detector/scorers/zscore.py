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

from collections.abc import Mapping

import numpy as np

from ..errors import ConfigError, StateError
from ..model import BoolArray, FloatArray, IntArray
from .base import ColumnLayout
from .kernels.ew import MAX_ABS_VALUE as MAX_ABS_VALUE
from .kernels.ew import ew_step

_NO_DIRECTION = np.zeros(0, dtype=np.int64)  # ew_step: return the signed z


def observed(x: FloatArray) -> BoolArray:
    """Mask of usable values: finite and within ±MAX_ABS_VALUE (NaN compares False)."""
    return np.abs(x) <= MAX_ABS_VALUE


def grow(arr: np.ndarray, n: int, fill: float) -> np.ndarray:
    """``arr`` extended to ``n`` rows (axis 0) filled with ``fill``, its dtype and trailing
    shape kept (a new array; the old one is untouched)."""
    out = np.full((n, *arr.shape[1:]), fill, dtype=arr.dtype)
    out[: arr.shape[0]] = arr
    return out


def check_state(
    state: Mapping[str, np.ndarray],
    keys: tuple[str, ...],
    owner: str,
    rows: Mapping[str, tuple[int, ...]] | None = None,
) -> int:
    """Validate a state dict: all ``keys`` present, 1-D, same length ``n``; each of ``rows``
    (key -> trailing shape) present with shape ``(n, *trailing)``. Returns ``n``."""
    missing = [k for k in keys if k not in state]
    if missing:
        raise StateError(f"{owner} state: missing arrays {missing}")
    lengths = {np.asarray(state[k]).shape for k in keys}
    if len(lengths) != 1 or len(next(iter(lengths))) != 1:
        raise StateError(f"{owner} state: arrays must be 1-D of one length, got {lengths}")
    n = int(next(iter(lengths))[0])
    for key, trailing in (rows or {}).items():
        got = None if key not in state else np.asarray(state[key]).shape
        if got != (n, *trailing):
            raise StateError(f"{owner} state: {key} must be {(n, *trailing)}, got {got}")
    return n


def load_arrays(
    owner_obj: object,
    state: Mapping[str, np.ndarray],
    keys: tuple[str, ...],
    owner: str,
    rows: Mapping[str, tuple[int, ...]] | None = None,
    optional: Mapping[str, float] | None = None,
) -> int:
    """``check_state``, then each of ``keys`` and ``rows`` set on ``owner_obj`` as a float64
    copy (the common ``load_state_dict``). Returns the number of columns. ``optional``: keys
    (among ``keys``) that states saved before they existed lack, each loaded as that fill
    value where absent; where present they are checked like the others."""
    fills = optional or {}
    present = tuple(k for k in keys if k not in fills or k in state)
    n = check_state(state, present, owner, rows)
    for key in (*keys, *(rows or {})):
        value = state[key] if key in state else np.full(n, fills[key])
        setattr(owner_obj, key, np.array(value, dtype=np.float64))
    return n


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
        self._z = np.zeros(0)  # scratch outputs of step, reused every tick
        self._scored = np.zeros(0, dtype=bool)
        # the kernels' parameter vector, built once (0.4 us a tick for each user otherwise)
        self._params = np.array(
            [
                -1.0 / self.half_life_s,
                self.warmup,
                self.clip,
                self.var_floor_rel,
                self.var_floor_abs,
                self.relearn_weight,
            ]
        )

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

    def params(self) -> FloatArray:
        """The parameters as the kernels take them (kernels.P_* index them), as set at
        construction (the kernels only read the array)."""
        return self._params

    def arrays(self) -> tuple[FloatArray, ...]:
        """The state arrays in the kernels' order (updated in place by them)."""
        return (self.mean, self.var, self.w_mean, self.w_var, self.count, self.last_t)

    def step(
        self, t: float, x: FloatArray, direction: IntArray | None = None
    ) -> tuple[FloatArray, BoolArray]:
        """Score then learn one tick. Returns (signed z before the update, 0 where unscored;
        mask of columns that were observed and past warm-up). With ``direction`` (one per
        column) the first array is the directional score (``base.directional`` of z) instead.
        Both are scratch arrays, valid until the next call. One kernel call
        (kernels.ew_step); unobserved columns keep their state bit for bit."""
        n = x.shape[0]
        self._scratch(n)
        fold = _NO_DIRECTION if direction is None else direction
        ew_step(float(t), x, None, self.arrays(), self.params(), fold, self._z, self._scored)
        return self._z, self._scored

    def step_at(
        self, t: float, x: FloatArray, columns: IntArray, direction: IntArray, out: FloatArray
    ) -> BoolArray:
        """``step`` on ``x[columns]`` with a direction, its scores written to ``out[columns]``
        (state ``j`` is column ``columns[j]``); returns the scored mask (scratch)."""
        n = columns.shape[0]
        self._scratch(n)
        ew_step(float(t), x, columns, self.arrays(), self.params(), direction, out, self._scored)
        return self._scored

    def _scratch(self, n: int) -> None:
        self.grow(n)
        if self._z.shape[0] != n:
            self._z = np.empty(n)
            self._scored = np.empty(n, dtype=bool)

    def rebase_at(self, columns: IntArray, new_mean: FloatArray, weight: FloatArray) -> None:
        """``rebase`` for the listed ``columns`` only (``new_mean``/``weight`` aligned to them)."""
        self.mean[columns] = new_mean
        self.w_mean[columns] = np.minimum(self.w_mean[columns], np.maximum(weight, 1.0))

    def state_dict(self, prefix: str = "") -> dict[str, np.ndarray]:
        return {prefix + k: getattr(self, k).copy() for k in self._KEYS}

    def load_state_dict(self, state: dict[str, np.ndarray], prefix: str = "") -> None:
        sub = {k: state[prefix + k] for k in self._KEYS if prefix + k in state}
        load_arrays(self, sub, self._KEYS, f"baseline {prefix!r}")


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

    def update(self, t: float, x: FloatArray, layout: ColumnLayout) -> FloatArray:
        score, _ = self.baseline.step(t, x, layout.direction)
        return score.copy()  # the caller may keep it past the next tick

    def update_at(
        self, t: float, x: FloatArray, columns: IntArray, layout: ColumnLayout, out: FloatArray
    ) -> None:
        """``out[columns] = update(t, x[columns], layout)`` without either copy (base.py)."""
        self.baseline.step_at(t, x, columns, layout.direction, out)

    def state_dict(self) -> dict[str, np.ndarray]:
        return self.baseline.state_dict()

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.baseline.load_state_dict(state)
