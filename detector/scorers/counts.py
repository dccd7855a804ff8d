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
clipped at ``mean + learn_clip * sqrt(mean * phi) + 1``: a burst barely moves the learnt rate, a
lasting higher rate is learnt over a few half-lives (so a persistently erroring device keeps
scoring for hours, then becomes the new normal).

A column that keeps bursting anew (a flapping InfiniBand port erroring in a clump every
half hour, for days: a property of that link, not a sign of an imminent GPU failure) would
otherwise score every clump as a fresh surprise, because learning is clipped exactly so that a
burst does not become the norm. So each column counts its recent burst *onsets* (ticks reaching
``burst_z``, more than ``burst_window_s`` after the previous burst tick; an EW count ``b`` with
``half_life_s``) and their usual size ``zh`` (the EW mean of the onsets' z), and a tick's z
loses ``c = b / (habituation_n + b)`` of the part of it up to ``zh``: ``z - c * min(z, zh)``.
The first burst counts in full; a column that had two separate bursts lately scores half for
bursts of its usual size; one that flaps all day a small fraction; a burst far beyond its
usual ones keeps the excess in full (a failing link on a port that always flapped a little).
The discount is fixed at a run's onset for every tick within a burst window of its last burst
tick, so a sustained burst (a failing device's errors piling up over minutes) is judged in full
throughout. This learns how often and how large the column's bursts are, not their rate: the
rate and dispersion stay clipped.

A tick longer than ``burst_window_s`` (the first after a gap) is judged at that window's
scale: ``k`` and ``mu`` are both scaled by ``burst_window_s / dt``, so hours of a rate a few
percent off its estimate do not read as a burst.

Real counters are burstier than Poisson (retransmissions come in storms, a flaky link errors in
clumps), and a Poisson model would call their ordinary spread a burst every few ticks. So each
column also learns its dispersion ``phi`` (variance / mean of the tick counts): an EW mean of the
Pearson residuals ``(k - mu)**2 / mu`` with a prior of ``dispersion_prior_n`` ticks at 1, learnt
only from ticks within ``dispersion_clip`` of the column's own scale (never from a burst or a
stop it would call anomalous) and never below 1; a tick is then judged quasi-Poisson, ``k`` and
``mu`` both divided by ``phi``. A Poisson counter keeps ``phi`` ~1 and its scores.

The score is the upper-tail probability ``P(X >= k | mu)`` expressed in z units with the
Wilson-Hilferty approximation ``z = 3 sqrt(k) (1 - 1/(9k) - (mu/k)^(1/3))``, reported when it
reaches one sigma (0 otherwise, and when k = 0).
Only increases are anomalous; the column's direction is not consulted. A column scores 0 until
it has ``warmup_s`` of observed time, during which it learns every event unclipped. Counts are
dimensionful (events per tick), so unlike the other scorers the scores are not invariant to
stretching the clock and every time constant together.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ..errors import ConfigError
from ..model import FloatArray, IntArray
from .base import ColumnLayout, KernelScorer
from .kernels.counts_health import count_step
from .zscore import grow, load_arrays


class CountBurst(KernelScorer):
    """Scorer: Poisson surprise of a tick's event count (see module docstring)."""

    name = "counts"
    _KEYS = (
        "events",
        "elapsed",
        "last_t",
        "observed_s",
        "spread",
        "spread_n",
        "bursts",
        "burst_zsum",
        "run_cut",
        "run_zh",
        "last_burst",
    )
    # what states saved before dispersion and habituation were learnt lack, loaded as these
    _OPTIONAL: ClassVar[dict[str, float]] = {
        k: -np.inf if k == "last_burst" else 0.0 for k in _KEYS[4:]
    }

    def __init__(
        self,
        half_life_s: float = 86400.0,
        prior_interval_s: float = 86400.0,
        prior_time_s: float = 21600.0,
        learn_clip: float = 3.0,
        warmup_s: float = 3600.0,
        burst_window_s: float = 900.0,
        dispersion_prior_n: float = 100.0,
        dispersion_clip: float = 4.0,
        habituation_n: float = 2.0,
        burst_z: float = 6.0,
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
        if not (dispersion_prior_n > 0 and dispersion_clip > 0):
            raise ConfigError("counts needs dispersion_prior_n > 0 and dispersion_clip > 0")
        self.dispersion_prior_n = float(dispersion_prior_n)
        self.dispersion_clip = float(dispersion_clip)
        if not (habituation_n > 0 and burst_z > 0):
            raise ConfigError("counts needs habituation_n > 0 and burst_z > 0")
        self.habituation_n = float(habituation_n)
        self.burst_z = float(burst_z)
        self.observed_s = np.zeros(0)
        self.events = np.zeros(0)
        self.elapsed = np.zeros(0)
        self.last_t = np.full(0, np.nan)
        self.spread = np.zeros(0)
        self.spread_n = np.zeros(0)
        self.bursts = np.zeros(0)  # EW count of the column's recent burst onsets
        self.burst_zsum = np.zeros(0)  # EW sum of those onsets' z (their usual size)
        self.run_cut = np.zeros(0)  # the discount fixed at the current burst run's onset
        self.run_zh = np.zeros(0)  # and the usual burst z it applies up to
        self.last_burst = np.full(0, -np.inf)  # time of the column's last burst tick
        self._q = np.array(  # count_step's parameters, built once
            [
                self.half_life_s,
                self.prior_events,
                self.prior_time_s,
                self.learn_clip,
                self.warmup_s,
                self.burst_window_s,
                self.dispersion_prior_n,
                self.dispersion_clip,
                self.habituation_n,
                self.burst_z,
            ]
        )

    def _grow(self, n: int) -> None:
        if n > self.events.shape[0]:
            self.events = grow(self.events, n, 0.0)
            self.elapsed = grow(self.elapsed, n, 0.0)
            self.last_t = grow(self.last_t, n, np.nan)
            self.observed_s = grow(self.observed_s, n, 0.0)
            self.spread = grow(self.spread, n, 0.0)
            self.spread_n = grow(self.spread_n, n, 0.0)
            self.bursts = grow(self.bursts, n, 0.0)
            self.burst_zsum = grow(self.burst_zsum, n, 0.0)
            self.run_cut = grow(self.run_cut, n, 0.0)
            self.run_zh = grow(self.run_zh, n, 0.0)
            self.last_burst = grow(self.last_burst, n, -np.inf)

    def _step(
        self, t: float, x: FloatArray, cols: IntArray | None, layout: ColumnLayout, out: FloatArray
    ) -> None:
        """One tick in one kernel pass (counts_health_kernels.count_step). Most counters see
        no event in a tick (k = 0: score 0, learn 0): the Poisson arithmetic runs where k > 0."""
        n = x.shape[0] if cols is None else cols.shape[0]
        self._grow(n)
        state = (
            self.events,
            self.elapsed,
            self.last_t,
            self.observed_s,
            self.spread,
            self.spread_n,
            self.bursts,
            self.burst_zsum,
            self.run_cut,
            self.run_zh,
            self.last_burst,
        )
        count_step(float(t), x, cols, state, self._q, out)

    def state_dict(self) -> dict[str, np.ndarray]:
        return {k: getattr(self, k).copy() for k in self._KEYS}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """A state saved before the dispersion or habituation arrays existed loads with none
        learnt yet."""
        load_arrays(self, state, self._KEYS, "counts", optional=self._OPTIONAL)
