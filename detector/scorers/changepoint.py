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
quickly. The alarm score is then held and fades with ``hold_half_life_s``, so a detected change
stays visible for a while instead of lasting one tick. A drift keeps re-alarming.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from ..model import FloatArray
from .base import SCORE_CAP, ColumnLayout
from .zscore import RobustEWBaseline, check_state, grow


class ChangePoint:
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
        self._layout: ColumnLayout | None = None
        self._up = np.zeros(0)
        self._down = np.zeros(0)

    def _grow(self, n: int) -> None:
        if n <= self.s_pos.shape[0]:
            return
        for key in ("s_pos", "s_neg", "n_pos", "n_neg", "peak"):
            setattr(self, key, grow(getattr(self, key), n, 0.0))
        self.last_t = grow(self.last_t, n, -np.inf)
        self.change_t = grow(self.change_t, n, -np.inf)

    def update(self, t: float, x: FloatArray, layout: ColumnLayout) -> FloatArray:
        """One tick. State arrays are updated in place where scored (masked copies), which is
        the same as selecting old or new per column."""
        self._grow(x.shape[0])
        base = self.baseline
        base.grow(x.shape[0])
        # The pre-update mean and sigma matter only when a change is detected (rare): keep
        # the two arrays sigma is computed from instead of computing it every tick.
        mean_before = base.mean.copy()
        var_before = base.var.copy()
        z, scored = base.step(t, x)
        if layout is not self._layout:  # the direction fold as two 0/1 factors
            self._up = (layout.direction >= 0).astype(np.float64)
            self._down = (layout.direction <= 0).astype(np.float64)
            self._layout = layout
        u = np.maximum(z, -self.clip)  # np.clip, without its call overhead
        np.minimum(u, self.clip, out=u)
        fade = np.subtract(t, self.last_t)
        np.maximum(fade, 0.0, out=fade)
        fade *= -1.0 / self.memory_half_life_s
        np.exp2(fade, out=fade)
        s_pos = np.multiply(self.s_pos, fade)
        s_pos += u
        s_pos -= self.k
        np.maximum(s_pos, 0.0, out=s_pos)
        s_neg = np.multiply(self.s_neg, fade)
        s_neg -= u
        s_neg -= self.k
        np.maximum(s_neg, 0.0, out=s_neg)
        # n * fade + 1 where the side is open, else 0 (both finite and >= 0, so a product
        # with the 0/1 mask is exact)
        n_pos = np.multiply(self.n_pos, fade)
        n_pos += 1.0
        n_pos *= s_pos > 0.0
        n_neg = np.multiply(self.n_neg, fade, out=fade)
        n_neg += 1.0
        n_neg *= s_neg > 0.0

        stat = np.multiply(s_pos, self._up)  # s_pos, s_neg >= 0: the same as base.directional
        np.maximum(stat, np.multiply(s_neg, self._down, out=u), out=stat)
        score = np.multiply(stat, self.alarm_z / self.h, out=stat)
        np.minimum(score, SCORE_CAP, out=score)

        up = s_pos >= self.h
        up &= scored
        down = s_neg >= self.h
        down &= scored
        down &= ~up
        change = up | down
        changed = np.flatnonzero(change)
        if changed.size:  # most ticks some column alarms somewhere: work on those only
            mean_c = mean_before[changed]
            floor = (base.var_floor_rel * mean_c) ** 2 + base.var_floor_abs
            sigma_before = np.sqrt(np.maximum(var_before[changed], floor))  # as base.sigma()
            up_c = up[changed]
            sp, sn, np_, nn = s_pos[changed], s_neg[changed], n_pos[changed], n_neg[changed]
            with np.errstate(invalid="ignore", divide="ignore"):
                shift_up = self.k + sp / np.maximum(np_, 1.0)
                shift_down = self.k + sn / np.maximum(nn, 1.0)
            shift = np.where(up_c, shift_up, -shift_down) * sigma_before
            base.rebase_at(changed, mean_c + shift, np.where(up_c, np_, nn))
            self.change_t[changed] = t
            self.peak[changed] = score[changed]
            s_pos[changed] = 0.0
            s_neg[changed] = 0.0
            n_pos[changed] = 0.0
            n_neg[changed] = 0.0

        np.copyto(self.s_pos, s_pos, where=scored)
        np.copyto(self.s_neg, s_neg, where=scored)
        np.copyto(self.n_pos, n_pos, where=scored)
        np.copyto(self.n_neg, n_neg, where=scored)
        np.copyto(self.last_t, t, where=scored)
        held = np.subtract(self.change_t, t, out=s_pos)
        held *= 1.0 / self.hold_half_life_s
        np.exp2(held, out=held)
        held *= self.peak
        np.maximum(score, held, out=score)
        score *= scored  # finite, so 0 where not scored
        return score

    def time_since_change(self, t: float) -> FloatArray:
        """Seconds since the last detected change per column; inf where none was detected."""
        return np.maximum(t - self.change_t, 0.0)

    def state_dict(self) -> dict[str, np.ndarray]:
        state = {k: getattr(self, k).copy() for k in self._KEYS}
        state.update(self.baseline.state_dict("baseline."))
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        check_state(state, self._KEYS, "changepoint")
        self.baseline.load_state_dict(state, "baseline.")
        for k in self._KEYS:
            setattr(self, k, np.array(state[k], dtype=np.float64))
