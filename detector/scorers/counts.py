"""Event-count bursts: a Poisson surprise score for counters of rare events.

Error counters (ECC, PCIe replay, NVLink CRC, InfiniBand symbol errors, NFS retransmissions) sit
at zero most of the time, so a variance-based z-score either explodes on the first increment
(zero variance) or never settles. This scorer models each column as a Poisson process with an
exponentially weighted rate, and scores the number of events seen in a tick by how unlikely it
is under that rate.

Input is the per-second rate the signal stage produces for a counter; the events of a tick are
``round(rate * dt)`` with ``dt`` the time since the column's previous observation. The learnt
rate is ``max(E / T, (E + prior_events) / (T + prior_time_s))``, where ``E`` and ``T`` are
exponentially weighted sums of events and elapsed time (half-life ``half_life_s``). The prior
(one event per ``prior_interval_s``, worth ``prior_time_s`` of history) means a first event on a
quiet counter is noticed but not alarming, while a burst is. A tick's events add to ``E``
clipped at ``mean + learn_clip * sqrt(mean) + 1``: a burst barely moves the learnt rate, a
lasting higher rate is learnt over a few half-lives (so a persistently erroring device keeps
scoring for hours, then becomes the new normal).

A tick longer than ``burst_window_s`` (the first after a gap) is judged at that window's
scale: ``k`` and ``mu`` are both scaled by ``burst_window_s / dt``, so hours of a rate a few
percent off its estimate do not read as a burst.
The score is the upper-tail probability ``P(X >= k | mu)`` expressed in z units with the
Wilson-Hilferty approximation ``z = 3 sqrt(k) (1 - 1/(9k) - (mu/k)^(1/3))``, reported when it
reaches one sigma (0 otherwise, and when k = 0).
Only increases are anomalous; the column's direction is not consulted. A column scores 0 until
it has ``warmup_s`` of observed time, during which it learns every event unclipped. Counts are
dimensionful (events per tick), so unlike the other scorers the scores are not invariant to
stretching the clock and every time constant together.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError, StateError
from ..model import FloatArray
from .base import SCORE_CAP, ColumnLayout
from .zscore import grow


class CountBurst:
    """Scorer: Poisson surprise of a tick's event count (see module docstring)."""

    name = "counts"
    _KEYS = ("events", "elapsed", "last_t", "observed_s")

    def __init__(
        self,
        half_life_s: float = 86400.0,
        prior_interval_s: float = 86400.0,
        prior_time_s: float = 21600.0,
        learn_clip: float = 3.0,
        warmup_s: float = 3600.0,
        burst_window_s: float = 900.0,
    ) -> None:
        if not (half_life_s > 0 and prior_interval_s > 0 and prior_time_s > 0 and learn_clip >= 0):
            raise ConfigError(
                "counts needs half_life_s, prior_interval_s, prior_time_s > 0 and learn_clip >= 0"
            )
        self.half_life_s = float(half_life_s)
        self.prior_events = float(prior_time_s) / float(prior_interval_s)
        self.prior_time_s = float(prior_time_s)
        self.learn_clip = float(learn_clip)
        self.warmup_s = float(warmup_s)
        if not burst_window_s > 0:
            raise ConfigError(f"counts needs burst_window_s > 0, got {burst_window_s}")
        self.burst_window_s = float(burst_window_s)
        self.observed_s = np.zeros(0)
        self.events = np.zeros(0)
        self.elapsed = np.zeros(0)
        self.last_t = np.full(0, np.nan)

    def _grow(self, n: int) -> None:
        if n > self.events.shape[0]:
            self.events = grow(self.events, n, 0.0)
            self.elapsed = grow(self.elapsed, n, 0.0)
            self.last_t = grow(self.last_t, n, np.nan)
            self.observed_s = grow(self.observed_s, n, 0.0)

    def update(self, t: float, x: FloatArray, layout: ColumnLayout) -> FloatArray:
        """One tick. Most counters see no event in a tick (k = 0: score 0, learn 0), so the
        Poisson arithmetic runs only on the columns with events; the rest is whole-width."""
        n = x.shape[0]
        self._grow(n)
        with np.errstate(invalid="ignore", over="ignore"):
            obs = np.isfinite(x)
            obs &= x >= 0.0
            later = np.isnan(self.last_t)  # first observation: no dt yet
            np.logical_not(later, out=later)
            later &= obs
            dt = np.subtract(t, self.last_t)
            np.copyto(dt, 0.0, where=~later)
            np.maximum(dt, 0.0, out=dt)
            k = np.multiply(x, dt)
            np.rint(k, out=k)
            np.copyto(k, 0.0, where=~(dt > 0))
            warm = self.observed_s >= self.warmup_s
            hot = np.flatnonzero(k > 0)
            learn = k  # where k == 0 the clipped count is 0 too
            score = np.zeros(n)
            if hot.size:
                k_h, dt_h = k[hot], dt[hot]
                events, elapsed = self.events[hot], self.elapsed[hot]
                # The prior keeps a quiet counter's rate above zero; a busy counter's own rate
                # wins (the prior would bias it low, and with thousands of events a tick that
                # matters).
                rate = np.maximum(
                    (events + self.prior_events) / (elapsed + self.prior_time_s),
                    np.where(elapsed > 0, events / np.maximum(elapsed, 1e-300), 0.0),
                )
                mu = rate * dt_h
                # A tick spanning more than burst_window_s (the first after a gap) is judged
                # at the burst window's scale: hours of a rate a few % off would otherwise
                # look like a burst, and a burst inside a long gap cannot be placed anyway.
                shrink = np.minimum(1.0, self.burst_window_s / dt_h)
                kk = np.maximum(k_h * shrink, 1.0)
                z = 3.0 * np.sqrt(kk) * (1.0 - 1.0 / (9.0 * kk) - np.cbrt(mu * shrink / kk))
                warm_h = warm[hot]
                # Below one sigma of surprise is ordinary counting noise: report nothing.
                hot_score = np.where(warm_h & (z >= 1.0), np.minimum(z, SCORE_CAP), 0.0)
                score[hot] = np.nan_to_num(hot_score, nan=0.0, posinf=SCORE_CAP, neginf=0.0)
                clipped = np.minimum(k_h, mu + self.learn_clip * np.sqrt(mu) + 1.0)
                learn = k.copy()
                learn[hot] = np.where(warm_h, clipped, k_h)  # warm-up learns all it sees
            decay = np.negative(dt)
            decay /= self.half_life_s
            np.exp2(decay, out=decay)
            self.observed_s += dt
            self.events *= decay
            self.events += learn
            self.elapsed *= decay
            self.elapsed += dt
            np.copyto(self.last_t, t, where=obs)
        return score

    def state_dict(self) -> dict[str, np.ndarray]:
        return {k: getattr(self, k).copy() for k in self._KEYS}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        shapes = {np.asarray(state[k]).shape for k in self._KEYS if k in state}
        if len(shapes) != 1 or any(k not in state for k in self._KEYS):
            raise StateError(f"counts state: need 1-D arrays {self._KEYS} of one length")
        for k in self._KEYS:
            setattr(self, k, np.array(state[k], dtype=np.float64))
