"""Anomaly likelihood: calibrate any scorer's output against each column's own history.

A raw score means different things on different columns: 3 is rare on a quiet column and
routine on a bursty one, so one threshold over many columns is either deaf or noisy. After
Numenta's anomaly likelihood (Ahmad et al., "Unsupervised real-time anomaly detection for
streaming data", Neurocomputing 2017), ``AnomalyLikelihood`` wraps an inner scorer and asks,
per column, how unusual the *recent average* of its surprise is against the *long-run
distribution* of that average:

- ``surprise``: the inner z as a bounded surprisal, ``-log2 P(|N| > z)`` in bits divided by
  that of ``full_surprise_z`` (5 by default, ~20.7 bits) and capped at 1. Like Numenta's raw
  HTM score it sits near 0 on well-predicted values (a calibrated inner scorer averages 1.44
  bits, 0.07) and reaches 1 on a complete miss; being bounded, one huge value moves the
  averages below by at most one unit, so the long-run distribution can be learnt from every
  value without being wrecked;
- ``short``: EW average of the surprise with ``short_half_life_s`` (Numenta averages the last
  10 raw scores; an EW average of the same mean age has a half-life of ~3.5 samples).
  Averaging turns isolated blips into noise and sustained surprise into signal;
- cube root: a surprisal is exponentially distributed (exactly so for a calibrated inner
  scorer), its average Gamma-like and right-skewed, so a normal fit to it calls a 5-sigma
  event a hundred times too often; ``short ** (1/3)`` is Wilson and Hilferty's normalizing
  transform for Gamma variables (on Gaussian noise: P(z > 5) ~ 3e-6 instead of ~3e-4);
- ``long``: a ``RobustEWBaseline`` (zscore.py) of that cube root with ``long_half_life_s``:
  its mean and variance are the long-run distribution (by default learnt from every value, as
  Numenta's window is; a finite ``clip`` keeps values beyond it out of the variance), the
  variance floored at ``var_floor_abs`` so a column whose surprise is nearly constant cannot
  turn a tiny wobble into certainty;
- output: the upper-tail z ``max(0, (cbrt(short) - mean) / sigma)``, capped at ``SCORE_CAP``.
  Numenta reports ``1 - Q(z)``; z is the same ordering in the project's z units.

The first ``skip`` observations of a column (the inner scorer's warm-up, when it returns 0 by
construction) are kept out of the long-run distribution, and the baseline has its own
``warmup``. The output is one-sided ("more surprising than usual"); direction is the inner
scorer's business. State: the inner scorer's (prefix ``inner.``), the baseline's
(``baseline.``) and the short average. NaN inputs: score 0, state untouched (the inner
scorer honours the same contract).
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ConfigError
from ..model import FloatArray
from .base import SCORE_CAP, ColumnLayout, Scorer
from .zscore import RobustEWBaseline, grow, load_arrays, observed

_SQRT_HALF = math.sqrt(0.5)
_INV_LN2 = 1.0 / math.log(2.0)


def surprisal_bits(z: FloatArray) -> FloatArray:
    """``-log2 P(|N| > |z|)``, i.e. ``-log2 erfc(|z| / sqrt 2)``, vectorized.

    Abramowitz & Stegun 7.1.26 writes ``erfc(a) = poly(a) exp(-a**2)`` (bits within 0.05 %
    for z <= 8); taking the log of that product never underflows, however large z is."""
    a = np.abs(z) * _SQRT_HALF
    k = 1.0 / (1.0 + 0.3275911 * a)
    poly = k * (
        0.254829592 + k * (-0.284496736 + k * (1.421413741 + k * (-1.453152027 + k * 1.061405429)))
    )
    return np.maximum((a * a - np.log(poly)) * _INV_LN2, 0.0)


class AnomalyLikelihood:
    """Scorer: the inner scorer's recent surprise as a z against its own long-run history."""

    name = "likelihood"
    _KEYS = ("short", "w_short", "seen", "last_t")

    def __init__(
        self,
        inner: Scorer,
        short_half_life_s: float = 35.0,
        long_half_life_s: float = 30000.0,
        skip: int = 20,
        warmup: int = 100,
        clip: float = math.inf,
        var_floor_abs: float = 1e-4,
        full_surprise_z: float = 5.0,
    ) -> None:
        if not (short_half_life_s > 0 and long_half_life_s > short_half_life_s):
            raise ConfigError("likelihood needs 0 < short_half_life_s < long_half_life_s")
        if skip < 0:
            raise ConfigError(f"skip must be >= 0 observations, got {skip}")
        if not full_surprise_z > 0:
            raise ConfigError(f"full_surprise_z must be > 0, got {full_surprise_z}")
        self.inner = inner
        self.short_half_life_s = float(short_half_life_s)
        self.skip = int(skip)
        self.full_bits = float(surprisal_bits(np.array([full_surprise_z]))[0])
        self.baseline = RobustEWBaseline(
            long_half_life_s, warmup, clip, var_floor_rel=0.0, var_floor_abs=var_floor_abs
        )
        self.short = np.zeros(0)  # EW average of the surprise
        self.w_short = np.zeros(0)  # EW weight behind it
        self.seen = np.zeros(0)  # observations so far (saturates at skip + 1)
        self.last_t = np.zeros(0)

    def _grow(self, n: int) -> None:
        if n <= self.short.shape[0]:
            return
        for key in self._KEYS:
            setattr(self, key, grow(getattr(self, key), n, 0.0))

    def update(self, t: float, x: FloatArray, layout: ColumnLayout) -> FloatArray:
        raw = self.inner.update(t, x, layout)
        self._grow(x.shape[0])
        obs = observed(x)
        elapsed = np.where(obs, np.maximum(t - self.last_t, 0.0), 0.0)
        self.w_short *= np.exp2(-elapsed / self.short_half_life_s)
        self.w_short += obs
        surprise = np.minimum(surprisal_bits(raw) / self.full_bits, 1.0)
        self.short += np.where(obs, surprise - self.short, 0.0) / np.maximum(self.w_short, 1.0)
        self.last_t = np.where(obs, t, self.last_t)
        self.seen = np.minimum(self.seen + obs, self.skip + 1.0)
        live = obs & (self.seen > self.skip)
        z, scored = self.baseline.step(t, np.where(live, np.cbrt(self.short), np.nan))
        return np.where(scored, np.clip(z, 0.0, SCORE_CAP), 0.0)

    def state_dict(self) -> dict[str, np.ndarray]:
        state = {k: getattr(self, k).copy() for k in self._KEYS}
        state.update(self.baseline.state_dict("baseline."))
        state.update({f"inner.{k}": v for k, v in self.inner.state_dict().items()})
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        load_arrays(self, state, self._KEYS, "likelihood")
        self.baseline.load_state_dict(state, "baseline.")
        self.inner.load_state_dict(
            {k[len("inner.") :]: v for k, v in state.items() if k.startswith("inner.")}
        )
