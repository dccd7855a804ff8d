"""Alert episodes: per entity ok -> pending -> firing -> resolved, vectorized over entities.

- ok -> pending when the score reaches ``threshold``;
- pending -> firing once it has stayed at or above ``threshold`` for ``min_duration_s`` and
  over at least ``min_observations`` ticks with data (the alert starts at that moment: when an
  operator would be told). A duration alone asks for less evidence the slower the data comes:
  60 s is five ticks at 15 s samples but two at 60 s, where two consecutive noisy ticks (a
  flapping link's clumps, one latency spike) would pass it;
- firing -> resolved once the score has stayed below ``threshold * clear_ratio`` (hysteresis)
  for ``clear_duration_s``: one low tick (a lost scrape leaves the node scored on the rest of
  its telemetry, a GPU's evidence missing for that tick) does not end an alert that goes on;
- after resolving, the entity cools down for ``cooldown_s``: crossings are ignored, so a
  flapping entity raises one alert per episode, not one per flap.
A NaN score (no data this tick) leaves the entity's state as it is; so does a score vector
shorter than the known entities (the absent tail is no data). A longer one adds entities.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import DEFAULT_THRESHOLD, AlertsConfig, EvaluationConfig
from ..model import BoolArray, FloatArray, IntArray

OK, PENDING, FIRING, COOLING = 0, 1, 2, 3


_ALERTS = AlertsConfig()  # the defaults are the config schema's, written once there


@dataclass(frozen=True, slots=True)
class EpisodeParams:
    threshold: float = DEFAULT_THRESHOLD
    clear_ratio: float = _ALERTS.clear_ratio
    min_duration_s: float = _ALERTS.min_duration_s
    cooldown_s: float = _ALERTS.cooldown_s
    clear_duration_s: float = _ALERTS.clear_duration_s
    # A new failure XID on an entity whose alert has fired for this long starts a new episode
    # (the old one could no longer match it: the evaluation horizon).
    restart_after_s: float = EvaluationConfig().horizon_s
    min_observations: int = _ALERTS.min_observations  # ticks with data a pending alert needs


@dataclass(frozen=True, slots=True)
class EpisodeChanges:
    started: IntArray  # entities that began firing this tick
    ended: IntArray  # entities that resolved this tick
    new_peak: IntArray  # pending/firing entities whose peak rose this tick
    opened: IntArray  # entities that became pending this tick (a new episode's evidence)
    ended_start: FloatArray  # per ``ended`` entity: when that episode started firing
    ended_peak: FloatArray  # per ``ended`` entity: that episode's peak score


class Episodes:
    """State machine over a growing set of entities; see the module docstring."""

    def __init__(self, params: EpisodeParams, n: int = 0) -> None:
        self.params = params
        self.state = np.zeros(n, dtype=np.int8)
        self.since = np.zeros(n)  # pending since / firing since / cooling until
        self.start = np.full(n, np.nan)  # firing start of the current episode
        self.peak = np.zeros(n)
        self.peak_time = np.zeros(n)
        self.forced_prev = np.zeros(n, dtype=bool)
        self.clear_since = np.full(n, np.nan)  # firing and below clear since (NaN: not)
        self.seen_above = np.zeros(n)  # pending: ticks with data at or above the threshold

    def _grow(self, n: int) -> None:
        extra = n - self.state.shape[0]
        if extra <= 0:
            return
        self.state = np.concatenate((self.state, np.zeros(extra, dtype=np.int8)))
        self.since = np.concatenate((self.since, np.zeros(extra)))
        self.start = np.concatenate((self.start, np.full(extra, np.nan)))
        self.peak = np.concatenate((self.peak, np.zeros(extra)))
        self.peak_time = np.concatenate((self.peak_time, np.zeros(extra)))
        self.forced_prev = np.concatenate((self.forced_prev, np.zeros(extra, dtype=bool)))
        self.clear_since = np.concatenate((self.clear_since, np.full(extra, np.nan)))
        self.seen_above = np.concatenate((self.seen_above, np.zeros(extra)))

    def update(
        self, t: float, scores: FloatArray, force: BoolArray | None = None
    ) -> EpisodeChanges:
        """One tick. ``force`` marks entities that fire now whatever their score (a failure
        XID was seen): no minimum duration, no cooldown, and no resolving while forced."""
        self._grow(scores.shape[0])
        n = self.state.shape[0]
        if scores.shape[0] < n:
            scores = np.concatenate((scores, np.full(n - scores.shape[0], np.nan)))
        forced = np.zeros(n, dtype=bool)
        if force is not None:
            forced[: force.shape[0]] = force[:n]
        p = self.params
        s = np.where(forced, 1.0, np.nan_to_num(scores, nan=-1.0))
        valid = ~np.isnan(scores) | forced
        st = self.state
        above = valid & ((s >= p.threshold) | forced)
        below_clear = valid & (s < p.threshold * p.clear_ratio) & ~forced

        cooled = (st == COOLING) & ((t >= self.since) | forced)
        st[cooled] = OK

        restart = (
            forced & ~self.forced_prev & (st == FIRING) & (t - self.start >= p.restart_after_s)
        )
        self.forced_prev = forced
        restarted = np.flatnonzero(restart)
        restarted_start = self.start[restarted].copy()
        restarted_peak = self.peak[restarted].copy()
        st[restarted] = OK

        to_pending = (st == OK) & above
        st[to_pending] = PENDING
        self.since[to_pending] = t
        self.peak[to_pending] = 0.0
        self.seen_above[to_pending] = 0.0

        drop = (st == PENDING) & valid & ~above
        st[drop] = OK

        pending = st == PENDING
        self.seen_above[pending & above] += 1.0
        enough = (t - self.since >= p.min_duration_s) & (self.seen_above >= p.min_observations)
        fire = pending & above & (enough | forced)
        st[fire] = FIRING
        self.start[fire] = t

        firing = st == FIRING
        # below clear since when (kept through ticks without data, reset by any tick above)
        self.clear_since[firing & valid & ~below_clear] = np.nan
        self.clear_since[firing & below_clear & np.isnan(self.clear_since)] = t
        end = firing & below_clear & (t - self.clear_since >= p.clear_duration_s)
        self.clear_since[end | ~firing] = np.nan
        st[end] = COOLING
        self.since[end] = t + p.cooldown_s

        active = (st == PENDING) | (st == FIRING)
        rose = active & valid & (s > self.peak)
        self.peak[rose] = s[rose]
        self.peak_time[rose] = t
        ended = np.flatnonzero(end)
        return EpisodeChanges(
            started=np.flatnonzero(fire),
            ended=np.concatenate((restarted, ended)),
            new_peak=np.flatnonzero(rose),
            opened=np.flatnonzero(to_pending),
            ended_start=np.concatenate((restarted_start, self.start[ended])),
            ended_peak=np.concatenate((restarted_peak, self.peak[ended])),
        )

    def firing(self) -> IntArray:
        return np.flatnonzero(self.state == FIRING)

    def state_dict(self) -> dict[str, np.ndarray]:
        return {
            "state": self.state.copy(),
            "since": self.since.copy(),
            "start": self.start.copy(),
            "peak": self.peak.copy(),
            "peak_time": self.peak_time.copy(),
            "forced_prev": self.forced_prev.copy(),
            "clear_since": self.clear_since.copy(),
            "seen_above": self.seen_above.copy(),
        }

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.state = state["state"].astype(np.int8)
        self.since = state["since"].astype(np.float64)
        self.start = state["start"].astype(np.float64)
        self.peak = state["peak"].astype(np.float64)
        self.peak_time = state["peak_time"].astype(np.float64)
        forced = state.get("forced_prev")
        self.forced_prev = (
            np.zeros(self.state.shape[0], dtype=bool) if forced is None else forced.astype(bool)
        )
        clear = state.get("clear_since")  # absent in states saved before it existed
        self.clear_since = (
            np.full(self.state.shape[0], np.nan) if clear is None else clear.astype(np.float64)
        )
        seen = state.get("seen_above")  # likewise: a pending entity counts afresh
        self.seen_above = np.zeros(self.state.shape[0]) if seen is None else seen.astype(np.float64)
