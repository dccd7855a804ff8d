"""Bayesian online changepoint detection (Adams & MacKay 2007) on robust z units, vectorized.

The optional Bayesian alternative to changepoint.py's CUSUM: instead of accumulating evidence
against one fixed shift size, each column keeps a posterior over its *run length* (observations
since its level last changed), every hypothesis with its own estimate of the current level.

Each column is standardized by its own slow robust EW baseline (``RobustEWBaseline``, as
changepoint.py: ``half_life_s``, ``warmup``), ``u = (x - mean) / sigma`` before the update,
clipped to ``±clip``. Within a run, ``u`` is taken as N(mu, 1) with the run's level ``mu``
unknown, a priori N(0, ``prior_sd``²) (a shift of a few sigmas is plausible, one of 20 is
not), so after ``n`` observations summing to ``s`` the next one is predicted as
N(s / (n + 1/prior_sd²), 1 + 1 / (n + 1/prior_sd²)). Each observation:

- every run grows by one, weighted by its predictive density of ``u`` and ``1 - H``;
- a new run starts with ``u`` as its first observation, with the mass ``H`` of all of them;
- ``H = 1 - exp(-dt / expected_run_s)``: the chance of a change in the elapsed time ``dt``
  since the column's last observation (a prior of one change per ``expected_run_s`` seconds,
  so the model is time-aware: a long gap makes a change a priori likelier).

Memory is bounded: ``runs`` hypotheses per column, the youngest first; the oldest slot holds
every run at least ``runs - 1`` observations long, merged (probability-weighted sufficient
statistics, earliest start), which is the column's settled level. O(``runs``) per column and
observation, ``4 x runs`` floats of state per column (1 KB at the default 32).

The settled run's statistics fade with the baseline's half-life, so its level follows the
slow drift of ``u`` while the baseline itself catches up with a past change, instead of
reading that catching-up as a change of its own.

The score is how sure the posterior is that the level changed within the last ``runs - 1``
observations: the one-sided normal quantile of P(settled run), ``z`` with P(N > z) =
P(settled) (0 while that is at least 1/2; ~3 at 1e-3, ~4.8 at 1e-6), folded by the column's
direction through the sign of the younger runs' level. One spike (clipped to ``clip``) cannot
carry it: the next ordinary value sinks the run it started. A sustained shift of 2 sigmas is
certain within a handful of observations and stays so until its run becomes the settled one
(the new level learnt), ``runs - 1`` observations after it began. Where in the last few
observations the change began is uncertain (a run that starts a little before it fits
nearly as well), which is why the score reads all younger runs together.
``time_since_change(t)``: seconds since the start of the most probable younger run, at the
last tick the posterior was sure of a change (P(settled) <= ``CHANGE_P``, 1e-3); inf before
any.

NaN, infinite or sentinel values, and columns still warming their baseline: score 0, the run
posterior untouched.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from ..model import FloatArray
from .base import SCORE_CAP, ColumnLayout, directional
from .context import normal_tail_quantile
from .zscore import RobustEWBaseline, grow, load_arrays

_LOG_2PI = float(np.log(2.0 * np.pi))
CHANGE_P = 1e-3  # P(settled) at or below which a change is dated (the score is then >= 3.1)


class BayesianChangePoint:
    """Scorer: posterior probability that the level changed lately (module docstring)."""

    name = "bocpd"
    _KEYS = ("last_t", "change_t")
    _ROWS = ("log_p", "n", "s", "start")  # per column and run hypothesis

    def __init__(
        self,
        half_life_s: float = 6 * 3600.0,
        warmup: int = 30,
        clip: float = 4.0,
        expected_run_s: float = 86400.0,
        prior_sd: float = 2.0,
        runs: int = 32,
        var_floor_rel: float = 1e-3,
        var_floor_abs: float = 1e-9,
    ) -> None:
        if not expected_run_s > 0:
            raise ConfigError(f"bocpd: expected_run_s must be > 0 seconds, got {expected_run_s}")
        if not prior_sd > 0:
            raise ConfigError(f"bocpd: prior_sd must be > 0 sigmas, got {prior_sd}")
        if runs < 2:
            raise ConfigError(f"bocpd: runs must be >= 2 hypotheses, got {runs}")
        self.baseline = RobustEWBaseline(half_life_s, warmup, clip, var_floor_rel, var_floor_abs)
        self.clip = float(clip)
        self.expected_run_s = float(expected_run_s)
        self.prior_precision = 1.0 / float(prior_sd) ** 2
        self.runs = int(runs)
        self.neg_inv_half_life = -1.0 / float(half_life_s)
        self.last_t = np.zeros(0)  # last scored observation, -inf before the first
        self.change_t = np.zeros(0)  # estimated start of the last sure change, -inf if none
        r = self.runs
        self.log_p = np.zeros((0, r))  # log P(run length slot | data so far)
        self.n = np.zeros((0, r))  # observations in the run (merged: weighted)
        self.s = np.zeros((0, r))  # their sum of u
        self.start = np.zeros((0, r))  # time of the run's first observation

    def _grow(self, n: int) -> None:
        if n <= self.last_t.shape[0]:
            return
        old = self.last_t.shape[0]
        self.last_t = grow(self.last_t, n, -np.inf)
        self.change_t = grow(self.change_t, n, -np.inf)
        self.log_p = grow(self.log_p, n, -np.inf)
        self.log_p[old:, -1] = 0.0  # all mass on the settled run, which knows nothing yet
        self.n = grow(self.n, n, 0.0)
        self.s = grow(self.s, n, 0.0)
        self.start = grow(self.start, n, -np.inf)

    def update(self, t: float, x: FloatArray, layout: ColumnLayout) -> FloatArray:
        n = x.shape[0]
        self._grow(n)
        self.baseline.grow(n)
        z, scored = self.baseline.step(t, x)
        score = np.zeros(n)
        rows = np.flatnonzero(scored)
        if rows.size:
            u = np.clip(z[rows], -self.clip, self.clip)
            signed = self._observe(float(t), rows, u)
            score[rows] = signed
        return directional(score, layout.direction)

    def _observe(self, t: float, rows: np.ndarray, u: FloatArray) -> FloatArray:
        """The run-length update of ``rows`` with observation ``u`` at ``t``; returns their
        signed scores (the sign of the younger runs' level)."""
        log_p, n, s, start = self.log_p[rows], self.n[rows], self.s[rows], self.start[rows]
        last = self.last_t[rows]
        elapsed = np.where(np.isfinite(last), t - last, 0.0)
        hazard = -np.expm1(-elapsed / self.expected_run_s)
        fade = np.exp2(elapsed * self.neg_inv_half_life)  # the settled run's memory
        n[:, -1] *= fade
        s[:, -1] *= fade
        precision = n + self.prior_precision
        mean = s / precision
        var = 1.0 + 1.0 / precision
        uu = u[:, None]
        log_pred = -0.5 * (_LOG_2PI + np.log(var) + (uu - mean) ** 2 / var)
        joint = log_p + log_pred
        with np.errstate(divide="ignore"):  # hazard 0 (a first observation): log 0 = -inf
            log_change = _logsumexp(joint) + np.log(hazard)
            log_grow = joint + np.log1p(-hazard)[:, None]
        # slot k + 1 <- slot k grown; the oldest slot also keeps its own runs (merged)
        new_p = np.empty_like(log_p)
        new_n, new_s, new_start = np.empty_like(n), np.empty_like(s), np.empty_like(start)
        new_p[:, 0], new_n[:, 0], new_s[:, 0], new_start[:, 0] = log_change, 0.0, 0.0, t
        new_p[:, 1:-1] = log_grow[:, :-2]
        new_n[:, 1:-1], new_s[:, 1:-1], new_start[:, 1:-1] = n[:, :-2], s[:, :-2], start[:, :-2]
        a, b = log_grow[:, -2], log_grow[:, -1]
        merged = np.logaddexp(a, b)
        with np.errstate(invalid="ignore"):  # both -inf: no mass, weights moot
            wa = np.where(np.isfinite(merged), np.exp(a - merged), 0.0)
        wb = 1.0 - wa
        new_p[:, -1] = merged
        new_n[:, -1] = wa * n[:, -2] + wb * n[:, -1]
        new_s[:, -1] = wa * s[:, -2] + wb * s[:, -1]
        new_start[:, -1] = np.minimum(start[:, -2], start[:, -1])
        new_p -= _logsumexp(new_p)[:, None]
        new_n += 1.0  # every run, the new one included, now holds u
        new_s += uu
        self.log_p[rows], self.n[rows], self.s[rows], self.start[rows] = (
            new_p, new_n, new_s, new_start
        )  # fmt: skip
        self.last_t[rows] = t
        settled = np.exp(new_p[:, -1])  # P(no change in the last runs - 1 observations)
        z = normal_tail_quantile(settled)
        young = np.exp(new_p[:, :-1])
        level = (young * new_s[:, :-1] / (new_n[:, :-1] + self.prior_precision)).sum(axis=1)
        sure = settled <= CHANGE_P
        if sure.any():
            best = np.argmax(new_p[sure, :-1], axis=1)
            self.change_t[rows[sure]] = new_start[sure][np.arange(best.shape[0]), best]
        signed: FloatArray = np.minimum(z, SCORE_CAP) * np.sign(level)
        return signed

    def time_since_change(self, t: float) -> FloatArray:
        """Seconds since the estimated start of the last change the posterior was sure of
        (P(settled) <= ``CHANGE_P``); inf where there was none."""
        return np.maximum(t - self.change_t, 0.0)

    def state_dict(self) -> dict[str, np.ndarray]:
        state = {k: getattr(self, k).copy() for k in (*self._KEYS, *self._ROWS)}
        state.update(self.baseline.state_dict("baseline."))
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        rows = dict.fromkeys(self._ROWS, (self.runs,))
        load_arrays(self, state, self._KEYS, "bocpd", rows)
        self.baseline.load_state_dict(state, "baseline.")


def _logsumexp(a: FloatArray) -> FloatArray:
    """log(sum(exp(a))) along the last axis; every row holds at least one finite entry."""
    top = a.max(axis=-1)
    total: FloatArray = np.log(np.exp(a - top[..., None]).sum(axis=-1)) + top
    return total
