"""Two-sided CUSUM changepoint scorer on robustly standardized values, vectorized.

Each column is standardized by its own *slow* robust EW baseline (``RobustEWBaseline`` with
``half_life_s``, default 6 h): ``u = (x - mean) / sigma`` before the update, clipped to
``±clip`` so that a single spike adds at most ``clip - k`` to the statistic. Then

    S+ <- max(0, S+ · m + u - k)        S- <- max(0, S- · m - u - k)

with ``m = 0.5 ** (dt / memory_half_life_s)`` (old evidence fades with time, not with tick
count) and ``k`` the allowance in sigmas (0.5 is optimal for 1-sigma shifts). The score is
``alarm_z · S / h`` on the side(s) the column's direction allows: a sustained 1-sigma shift
reaches the alarm level ``h`` in about ``h / 0.5`` observations, a lone 5-sigma spike only
reaches ``alarm_z · (clip - k) / h`` (2.1 with defaults). A slow drift whose every point
is within noise still accumulates because the slow baseline lags behind it.

When either side reaches ``h`` (an alarm-level excursion, regardless of direction) a change is
recorded: ``time_since_change(t)`` restarts, the statistic resets to 0 and the baseline mean
is moved to the post-change level estimated by the CUSUM (``mean ± sigma·(k + S/N)``, N the
observations in the excursion) backed by only N observations, so the new level is learnt
quickly. The mean moves only for a change on a side the column's direction scores: a change it
ignores (a link state's clump of brief rises) is left to the slow baseline, since moving to it
made the return to the usual level a change the other way, the side that scores. The alarm
score is then held and fades with ``hold_half_life_s``, so a detected change stays visible for
a while instead of lasting one tick. A drift keeps re-alarming.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from ..model import FloatArray, IntArray
from .base import ColumnLayout, KernelScorer
from .kernels.ew import cusum_step
from .zscore import RobustEWBaseline, grow, load_arrays


class ChangePoint(KernelScorer):
    """Scorer: CUSUM of robust z units, reset and re-baselined after each detected change."""

    name = "changepoint"
    _KEYS = ("s_pos", "s_neg", "n_pos", "n_neg", "last_t", "change_t", "peak")

    def __init__(
        self,
        half_life_s: float = 6 * 3600.0,
        warmup: int = 30,
        k: float = 0.5,
        h: float = 10.0,
        alarm_z: float = 6.0,
        clip: float = 4.0,
        memory_half_life_s: float = 1800.0,
        hold_half_life_s: float = 900.0,
        var_floor_rel: float = 1e-3,
        var_floor_abs: float = 1e-9,
    ) -> None:
        if not (k >= 0 and h > 0 and alarm_z > 0 and memory_half_life_s > 0):
            raise ConfigError("changepoint needs k >= 0, h > 0, alarm_z > 0, memory > 0")
        if not hold_half_life_s > 0:
            raise ConfigError(f"hold_half_life_s must be > 0, got {hold_half_life_s}")
        self.baseline = RobustEWBaseline(half_life_s, warmup, clip, var_floor_rel, var_floor_abs)
        self.k, self.h, self.alarm_z, self.clip = float(k), float(h), float(alarm_z), float(clip)
        self.memory_half_life_s = float(memory_half_life_s)
        self.hold_half_life_s = float(hold_half_life_s)
        self.s_pos = np.zeros(0)  # upper CUSUM, sigma units
        self.s_neg = np.zeros(0)  # lower CUSUM
        self.n_pos = np.zeros(0)  # (faded) observations since s_pos was last 0
        self.n_neg = np.zeros(0)
        self.last_t = np.zeros(0)
        self.change_t = np.zeros(0)  # time of the last detected change, -inf if none
        self.peak = np.zeros(0)  # score at the last change, held and fading
        self._q = np.array(  # cusum_step's parameters, built once
            [
                self.k,
                self.h,
                self.alarm_z / self.h,
                self.clip,
                -1.0 / self.memory_half_life_s,
                1.0 / self.hold_half_life_s,
            ]
        )

    def _grow(self, n: int) -> None:
        if n <= self.s_pos.shape[0]:
            return
        for key in ("s_pos", "s_neg", "n_pos", "n_neg", "peak"):
            setattr(self, key, grow(getattr(self, key), n, 0.0))
        self.last_t = grow(self.last_t, n, -np.inf)
        self.change_t = grow(self.change_t, n, -np.inf)

    def _step(
        self, t: float, x: FloatArray, cols: IntArray | None, layout: ColumnLayout, out: FloatArray
    ) -> None:
        """One tick, baseline included, in one kernel call (kernels.cusum_step); columns not
        scored this tick keep their state."""
        n = x.shape[0] if cols is None else cols.shape[0]
        self._grow(n)
        self.baseline.grow(n)
        cusum = (  # the kernel's order (_KEYS)
            self.s_pos, self.s_neg, self.n_pos, self.n_neg, self.last_t, self.change_t, self.peak
        )  # fmt: skip
        base = self.baseline
        cusum_step(
            float(t), x, cols, base.arrays(), base.params(), cusum, self._q, layout.direction, out
        )  # fmt: skip

    def time_since_change(self, t: float) -> FloatArray:
        """Seconds since the last detected change per column; inf where none was detected."""
        return np.maximum(t - self.change_t, 0.0)

    def state_dict(self) -> dict[str, np.ndarray]:
        state = {k: getattr(self, k).copy() for k in self._KEYS}
        state.update(self.baseline.state_dict("baseline."))
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        load_arrays(self, state, self._KEYS, "changepoint")
        self.baseline.load_state_dict(state, "baseline.")
