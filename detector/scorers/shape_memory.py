"""Phase shape memory: the recent stretch of a periodic column unlike what this time of day
usually looks like, vectorized.

SeasonalProfile (seasonal.py) judges one value against its hour: a value inside what the hour
showed lately is ordinary. Shape and rhythm anomalies slip through that test: a day whose
middle stays flat, a holiday running at the level of a quiet day, a rise that comes two hours
late are made of values each of which some recent day showed at that hour. What is new is the
*sequence*. HTM and ARTime catch these with a sequence memory; this is the streaming,
bounded, per-column version of that idea, aligned to the period:

- **blocks**: the clock is cut into blocks of ``period_s / phases`` seconds (45 min for a day
  in 32 phases); a block is summarized by the mean of the column's values in it (averaging
  is the point: noise cancels, the day's shape remains; spikes are RangeNovelty's and the
  likelihood's business). A block with no value repeats the previous block's mean (a coarse
  cadence, e.g. hourly rows in 45-min blocks); after a gap longer than a window, the window
  refills from the blocks after it;
- **dispersion** (``dispersion=True``, off by default): a second channel summarizes each block
  by the mean absolute difference between successive values ending in it, so a stretch
  that goes quiet (a frozen or idling source) or turns noisy has a new shape even at its
  usual level; compared against the same phase of earlier periods, a quiet night is not new;
- **window**: the last ``width`` block means (6 hours by default), closed at block ``k``, is
  the shape of the recent stretch at phase ``k mod phases``;
- **memory**: per column and phase, ``prototypes`` remembered windows, an adaptive-resonance
  memory (ARTime's idea): a window within ``vigilance`` of its nearest prototype moves it
  (rate ``1 / min(members + 1, 4)``: a prototype follows the last few days), a window beyond
  it is stored as a new prototype in an empty or the least recently matched slot. Several
  prototypes per phase let a weekday shape and a weekend shape coexist;
- **distance**: mean absolute difference between the window and a prototype, in units of the
  column's spread (1.25 x the EW mean absolute deviation of its block means around their EW
  mean, half-life ``half_life_periods``): unit-free, and unlike the all-time range not
  flattened by one huge spike; with the dispersion channel, the larger of both channels'
  distances (both in the column's units, so in the same spread);
- **novelty score**: ``y = log(distance to the nearest prototype + floor)`` (``floor`` 5 % of
  the spread: closer than that is a repeat) as a one-sided z against the column's own EW
  mean and variance of ``y`` (half-life ``rate_half_life_periods`` periods of closes,
  variance floored at ``var_floor``, deviations beyond 4 sigma winsorized in the variance):
  the likelihood normalization of the other NAB rows, so a column whose days never repeat
  scores ~0 and a column that repeats itself scores high the first time its day differs.

A phase scores once its memory holds windows of ``learn_periods`` earlier periods at it, and
the column once its baseline has ``warmup`` closes. Scores are emitted on the tick that closes
a block (the first value of the next block); every other tick scores 0, so a surprising window
raises one score, not one per row (a caller that scales it against scores emitted on every
row should compare tail rates per close, not per row: bench/nab.py ``SHAPE_CLOSE_WEIGHT``).
Not direction-aware (a shape has no sign). Time-aware: the
blocks and phases are clock seconds, the rates count closes (each one block of clock time).
O(phases x prototypes x width) memory and O(prototypes x width) work per column per close.

NaN, infinite or sentinel (beyond ±1e150) values: score 0, state untouched.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from ..model import FloatArray
from .base import SCORE_CAP, ColumnLayout
from .zscore import grow, load_arrays, observed

_MAD_TO_SIGMA = 1.25  # mean absolute deviation of a normal is 0.8 sigma
_MAX_RATE_DIVISOR = 4.0  # a prototype moves at least 1/4 of the way towards each member
_WINSOR_SIGMAS = 4.0  # deviations beyond this many sigmas enter the variance clipped
_FAR = 1e3  # distance (in spreads) of a change on a column whose spread is still 0


class PhaseShapeMemory:
    """Scorer: novelty of the recent window's shape at its phase of the period (docstring)."""

    name = "shape"
    _KEYS = (
        "seen",  # observations so far
        "block",  # index of the current block (floor(t / block_s))
        "total",  # sum of the current block's values
        "fill",  # values in the current block
        "last",  # the previous value (for the dispersion channel)
        "dtotal",  # sum of |successive differences| ending in the current block
        "dfill",  # their number
        "filled",  # real blocks in the window (saturates at width)
        "closes",  # blocks closed with a full window (the memory's clock)
        "level",  # EW mean of block means
        "spread",  # EW mean absolute deviation of block means around ``level``
        "spread_w",  # EW weight behind them
        "base_mean",  # EW mean of log novelty
        "base_var",  # EW variance of log novelty
        "base_w",  # EW weight behind them
        "scored",  # closes that entered the baseline
    )
    _ROWS = ("window", "memory", "members", "used", "visits")

    def __init__(
        self,
        period_s: float = 86400.0,
        phases: int = 32,
        width: int = 8,
        prototypes: int = 4,
        vigilance: float = 0.5,
        half_life_periods: float = 4.0,
        rate_half_life_periods: float = 10.0,
        learn_periods: int = 2,
        warmup: int = 32,
        floor: float = 0.05,
        var_floor: float = 0.05,
        dispersion: bool = False,
    ) -> None:
        if not period_s > 0 or phases < 1 or width < 1 or prototypes < 1:
            raise ConfigError(
                f"shape memory needs period_s > 0, phases, width, prototypes >= 1 "
                f"(got {period_s}, {phases}, {width}, {prototypes})"
            )
        if not (vigilance > 0 and half_life_periods > 0 and rate_half_life_periods > 0):
            raise ConfigError("shape memory needs vigilance and half-lives > 0")
        if learn_periods < 1 or warmup < 0 or not floor > 0 or not var_floor > 0:
            raise ConfigError(
                "shape memory needs learn_periods >= 1, warmup >= 0, floor > 0, var_floor > 0"
            )
        self.period_s = float(period_s)
        self.phases = int(phases)
        self.width = int(width)
        self.prototypes = int(prototypes)
        self.vigilance = float(vigilance)
        self.learn_periods = int(learn_periods)
        self.warmup = int(warmup)
        self.floor = float(floor)
        self.var_floor = float(var_floor)
        self.block_s = self.period_s / self.phases
        self.channels = 2 if dispersion else 1  # block means (+ mean |successive difference|)
        # rates count closes: one close per block of clock time
        self._spread_decay = 0.5 ** (1.0 / (half_life_periods * self.phases))
        self._base_decay = 0.5 ** (1.0 / (rate_half_life_periods * self.phases))
        # per column (see _KEYS for what each holds); grown as columns appear
        self.seen = np.zeros(0)
        self.block = np.zeros(0)
        self.total = np.zeros(0)
        self.fill = np.zeros(0)
        self.last = np.zeros(0)
        self.dtotal = np.zeros(0)
        self.dfill = np.zeros(0)
        self.filled = np.zeros(0)
        self.closes = np.zeros(0)
        self.level = np.zeros(0)
        self.spread = np.zeros(0)
        self.spread_w = np.zeros(0)
        self.base_mean = np.zeros(0)
        self.base_var = np.zeros(0)
        self.base_w = np.zeros(0)
        self.scored = np.zeros(0)
        c, w = self.channels, self.width
        self.window = np.zeros((0, c, w))  # last block summaries, oldest first
        self.memory = np.zeros((0, self.phases, self.prototypes, c, w))
        self.members = np.zeros((0, self.phases, self.prototypes))  # 0: empty slot
        self.used = np.zeros((0, self.phases, self.prototypes))  # close of the last match
        self.visits = np.zeros((0, self.phases))  # windows stored at each phase (saturates)

    def _grow(self, n: int) -> None:
        for key in (*self._KEYS, *self._ROWS):
            setattr(self, key, grow(getattr(self, key), n, 0.0))

    def update(self, t: float, x: FloatArray, layout: ColumnLayout) -> FloatArray:
        n = x.shape[0]
        if n > self.seen.shape[0]:
            self._grow(n)
        score = np.zeros(n)
        cols = np.flatnonzero(observed(x))
        if cols.size == 0:
            return score
        xv = x[cols]
        now = float(np.floor(t / self.block_s))
        started = self.seen[cols] > 0
        closing = cols[started & (now > self.block[cols])]
        if closing.size:
            score[closing] = self._close(closing, now)
        new_block = ~started | (now > self.block[cols])
        self.total[cols] = np.where(new_block, xv, self.total[cols] + xv)
        self.fill[cols] = np.where(new_block, 1.0, self.fill[cols] + 1.0)
        step = np.where(started, np.abs(xv - self.last[cols]), 0.0)
        self.dtotal[cols] = np.where(new_block, step, self.dtotal[cols] + step)
        self.dfill[cols] = np.where(new_block, 0.0, self.dfill[cols]) + started
        self.last[cols] = xv
        self.block[cols] = np.where(new_block, now, self.block[cols])
        self.seen[cols] += 1.0
        return score

    def _close(self, cols: np.ndarray, now: float) -> FloatArray:
        """Close the current block of ``cols`` (the clock reached block ``now``): extend the
        window, score it against its phase's prototypes, learn it. Scores per column."""
        summary = (self.total[cols] / self.fill[cols])[:, None]
        if self.channels == 2:
            spread = self.dtotal[cols] / np.maximum(self.dfill[cols], 1.0)
            summary = np.concatenate((summary, spread[:, None]), axis=1)
        gap = np.minimum(now - self.block[cols], self.width + 1.0).astype(np.int64)
        # the closed block's summary, repeated over the empty blocks up to the one before now
        shift = np.minimum(gap, self.width)
        fresh = np.repeat(summary[:, :, None], self.width, axis=2)
        ext = np.concatenate((self.window[cols], fresh), axis=2)
        take = np.arange(self.width)[None, None, :] + shift[:, None, None]
        self.window[cols] = np.take_along_axis(ext, take, axis=2)
        # after a gap longer than a window the window holds no block of the recent stretch
        restart = gap > self.width
        self.filled[cols] = np.where(
            restart, 0.0, np.minimum(self.filled[cols] + shift, self.width)
        )
        self._learn_spread(cols, summary[:, 0])
        out = np.zeros(cols.shape[0])
        ready = self.filled[cols] >= self.width
        rows = cols[ready]
        if rows.size == 0:
            return out
        phase = int((now - 1.0) % self.phases)  # the window ends with block now - 1
        out[ready] = self._score_and_learn(rows, phase)
        return out

    def _learn_spread(self, cols: np.ndarray, mean: FloatArray) -> None:
        """EW mean and mean absolute deviation of block means (the distance unit)."""
        fresh = self.spread_w[cols] == 0
        w = self.spread_w[cols] * self._spread_decay + 1.0
        diff = mean - self.level[cols]
        self.spread[cols] = np.where(
            fresh, 0.0, self.spread[cols] + (np.abs(diff) - self.spread[cols]) / w
        )
        self.level[cols] = np.where(fresh, mean, self.level[cols] + diff / w)
        self.spread_w[cols] = w

    def _score_and_learn(self, rows: np.ndarray, phase: int) -> FloatArray:
        win = self.window[rows]
        proto = self.memory[rows, phase]  # rows x prototypes x channels x width
        gap = np.abs(proto - win[:, None]).mean(axis=3)  # rows x prototypes x channels
        # both channels are in the column's units: one unit, the spread of its block means (a
        # channel's own spread would blow a channel of pure noise up to distances ~1)
        unit = (_MAD_TO_SIGMA * self.spread[rows])[:, None, None]
        safe = np.where(unit > 0, unit, 1.0)
        per_channel = np.where(unit > 0, gap / safe, np.where(gap > 0, _FAR, 0.0))
        # new in either channel is new: a mean would halve a break of one channel
        dist = np.where(self.members[rows, phase] > 0, per_channel.max(axis=2), np.inf)
        nearest = dist.argmin(axis=1)
        novelty = dist[np.arange(rows.size), nearest]
        known = np.isfinite(novelty)
        learnt = known & (self.visits[rows, phase] >= self.learn_periods)
        y = np.log(np.where(known, novelty, 0.0) + self.floor)
        sigma = np.sqrt(np.maximum(self.base_var[rows], self.var_floor))
        z = (y - self.base_mean[rows]) / sigma
        live = learnt & (self.scored[rows] >= self.warmup)
        out = np.where(live, np.clip(z, 0.0, SCORE_CAP), 0.0)
        self._learn_baseline(rows[learnt], y[learnt], sigma[learnt])
        self.closes[rows] += 1.0
        self._learn_memory(rows, phase, win, nearest, known & (novelty <= self.vigilance))
        return out

    def _learn_baseline(self, rows: np.ndarray, y: FloatArray, sigma: FloatArray) -> None:
        """EW mean and variance of log novelty; the variance sees winsorized deviations so one
        broken day does not make the next one ordinary."""
        fresh = self.base_w[rows] == 0
        w = self.base_w[rows] * self._base_decay + 1.0
        diff = y - self.base_mean[rows]
        bound = _WINSOR_SIGMAS * sigma
        clipped = np.where(self.scored[rows] >= self.warmup, np.clip(diff, -bound, bound), diff)
        var = (1.0 - 1.0 / w) * (self.base_var[rows] + clipped * clipped / w)
        self.base_var[rows] = np.where(fresh, 0.0, var)
        self.base_mean[rows] = np.where(fresh, y, self.base_mean[rows] + diff / w)
        self.base_w[rows] = w
        self.scored[rows] += 1.0

    def _learn_memory(
        self,
        rows: np.ndarray,
        phase: int,
        win: FloatArray,
        nearest: np.ndarray,
        resonates: np.ndarray,
    ) -> None:
        """Move resonating prototypes towards their window; store the others as new ones."""
        members = self.members[rows, phase]
        empty = members == 0
        lru = self.used[rows, phase].argmin(axis=1)
        lru = np.where(empty.any(axis=1), empty.argmax(axis=1), lru)  # an empty slot first
        slot = np.where(resonates, nearest, lru)
        count = members[np.arange(rows.size), slot]
        rate = np.where(resonates, 1.0 / np.minimum(count + 1.0, _MAX_RATE_DIVISOR), 1.0)
        old = self.memory[rows, phase, slot]
        self.memory[rows, phase, slot] = old + rate[:, None, None] * (win - old)
        self.members[rows, phase, slot] = np.where(resonates, count + 1.0, 1.0)
        self.used[rows, phase, slot] = self.closes[rows]
        self.visits[rows, phase] = np.minimum(self.visits[rows, phase] + 1.0, self.learn_periods)

    def state_dict(self) -> dict[str, np.ndarray]:
        return {k: getattr(self, k).copy() for k in (*self._KEYS, *self._ROWS)}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        rows = {key: getattr(self, key).shape[1:] for key in self._ROWS}
        load_arrays(self, state, self._KEYS, "shape", rows)
