"""Window memory: a recent stretch of values unlike any the column remembers, vectorized.

A streaming nearest-neighbour / adaptive-resonance memory over short windows of recent values,
in the spirit of ARTime (Hampton, NAB 2021) and KNN-CAD: what is anomalous is a *shape* the
stream has not made before (a daily cycle that skips a beat, a spike on a quiet stretch, a
plateau at an unusual level), even when every single value is ordinary. Per column:

- **blocks**: ``block`` consecutive observations are summarized by one representative, the
  block's value farthest from a fast running mean (so a one-sample spike survives the
  summary); the last ``width`` representatives form the current window, which covers
  ``block x width`` observations;
- **distance**: mean absolute difference between two windows divided by the column's
  all-time range (``max - min`` so far): a unit-free "fraction of the range", and memories
  kept in raw units stay comparable when the range grows;
- **memory**: at most ``prototypes`` remembered windows per column (bounded memory). The
  novelty of a window is its distance to the closest prototype. Within ``vigilance`` it
  *resonates*: that prototype moves towards the window (rate ``1 / min(matches, 8)``, so a
  category settles on the mean of its members but keeps adapting). Beyond it the window
  becomes a new prototype, replacing the least recently matched one once the memory is
  full, so categories a column still visits survive and stale ones are recycled;
- **calibration**: novelty is ranked against the column's own past novelties, an
  exponentially weighted histogram over log-spaced bins (half-life ``rate_half_life``
  observations). The score is the one-sided normal quantile of the Krichevsky-Trofimov
  estimate ``(tail + 1/2) / (weight + 1)`` of "a novelty at least this large", so a noisy
  column whose windows never repeat scores ~0 and a column that repeats itself scores high
  the first time it breaks the pattern. A novelty beyond every bin (> 10 ranges) still gets
  the smallest probability its history allows. Beyond the largest novelty on record (a bin
  still holding ``_ON_RECORD`` of EW weight) the rank saturates, so the score adds one z unit
  per octave (factor 2) beyond that record: a broken pattern that repeated exactly for days
  outranks a noise column's marginal new record.

Scores are emitted when a block completes (every ``block`` observations of the column); the
ticks in between score 0, so one surprising window raises one score, not ``block`` of them.
The first ``warmup`` windows of a column score 0 and stay out of the histogram (a young
memory finds everything new). Not direction-aware, no clock: the model is a sequence of
observations (gaps are simply not observations). O(prototypes x width) per column per block.

NaN, infinite or sentinel (beyond ±1e150) values: score 0, state untouched.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from ..model import FloatArray
from .base import SCORE_CAP, ColumnLayout
from .context import normal_tail_quantile
from .zscore import grow, load_arrays, observed

_BIN_LOW = 0.002  # novelty below 0.2 % of the range falls in bin 0 ("a repeat")
_BINS_PER_OCTAVE = 2
_BINS = 26  # up to 0.002 * 2**12.5 ~ 12 ranges
_ON_RECORD = 0.05  # EW weight that keeps a histogram bin 'on record'
_MAX_RATE_DIVISOR = 8.0  # a prototype moves at least 1/8 of the way towards each member


class WindowMemory:
    """Scorer: distance of the recent window to the closest remembered one, ranked (docstring)."""

    name = "window"
    _KEYS = ("low", "high", "fill", "total", "spike", "trend", "blocks", "weight")
    _ROWS = ("window", "memory", "matches", "used", "histogram")  # one row (or block) per column

    def __init__(
        self,
        block: int = 4,
        width: int = 8,
        prototypes: int = 64,
        vigilance: float = 0.05,
        rate_half_life: float = 3000.0,
        warmup: int = 16,
    ) -> None:
        if block < 1 or width < 1 or prototypes < 1:
            raise ConfigError(
                f"window memory needs block, width, prototypes >= 1 "
                f"(got {block}, {width}, {prototypes})"
            )
        if not vigilance > 0 or not rate_half_life > 0 or warmup < 0:
            raise ConfigError("window memory needs vigilance > 0, rate_half_life > 0, warmup >= 0")
        self.block = int(block)
        self.width = int(width)
        self.prototypes = int(prototypes)
        self.vigilance = float(vigilance)
        self.warmup = int(warmup)
        self._decay = 0.5 ** (self.block / float(rate_half_life))  # per block
        self.low = np.zeros(0)  # all-time minimum (+inf before the first value)
        self.high = np.zeros(0)  # all-time maximum (-inf before the first value)
        self.fill = np.zeros(0)  # observations in the current block
        self.total = np.zeros(0)  # their sum
        self.spike = np.zeros(0)  # their value farthest from ``trend`` so far
        self.trend = np.zeros(0)  # fast running mean of block means (halves every block)
        self.blocks = np.zeros(0)  # completed blocks
        self.weight = np.zeros(0)  # EW count of ranked novelties
        self.window = np.zeros((0, self.width))  # last representatives, oldest first
        self.memory = np.zeros((0, self.prototypes, self.width))  # prototypes, raw units
        self.matches = np.zeros((0, self.prototypes))  # members per prototype (0: empty slot)
        self.used = np.zeros((0, self.prototypes))  # block index of the last match
        self.histogram = np.zeros((0, _BINS))  # EW counts of novelty per bin

    def _grow(self, n: int) -> None:
        for key in (*self._KEYS, *self._ROWS):
            fill = {"low": np.inf, "high": -np.inf}.get(key, 0.0)
            setattr(self, key, grow(getattr(self, key), n, fill))

    def update(self, t: float, x: FloatArray, layout: ColumnLayout) -> FloatArray:
        n = x.shape[0]
        if n > self.blocks.shape[0]:
            self._grow(n)
        score = np.zeros(n)
        cols = np.flatnonzero(observed(x))
        if cols.size == 0:
            return score
        xv = x[cols]
        first = self.fill[cols] == 0
        never = first & (self.blocks[cols] == 0)  # the column's first observation
        self.trend[cols] = np.where(never, xv, self.trend[cols])
        far = np.abs(xv - self.trend[cols]) > np.abs(self.spike[cols] - self.trend[cols])
        self.spike[cols] = np.where(first | far, xv, self.spike[cols])
        self.total[cols] += xv
        self.fill[cols] += 1.0
        self.low[cols] = np.minimum(self.low[cols], xv)
        self.high[cols] = np.maximum(self.high[cols], xv)
        done = cols[self.fill[cols] >= self.block]
        if done.size:
            score[done] = self._close_blocks(done)
        return score

    def _close_blocks(self, cols: np.ndarray) -> FloatArray:
        """Fold the finished blocks of ``cols`` into their windows; score and learn them."""
        mean = self.total[cols] / self.fill[cols]
        self.window[cols] = np.concatenate((self.window[cols, 1:], self.spike[cols, None]), axis=1)
        self.trend[cols] += 0.5 * (mean - self.trend[cols])
        self.fill[cols] = 0.0
        self.total[cols] = 0.0
        self.blocks[cols] += 1.0
        out = np.zeros(cols.shape[0])
        full = self.blocks[cols] >= self.width
        rows = cols[full]
        if rows.size == 0:
            return out
        span = self.high[rows] - self.low[rows]
        scale = np.where(span > 0, span, 1.0)
        win = self.window[rows]
        dist = np.abs(self.memory[rows] - win[:, None, :]).mean(axis=2) / scale[:, None]
        dist = np.where(self.matches[rows] > 0, dist, np.inf)
        nearest = dist.argmin(axis=1)
        novelty = dist[np.arange(rows.size), nearest]
        known = np.isfinite(novelty)
        # rank against the column's own past novelties (only once its memory has matured)
        ranked = known & (self.blocks[rows] >= self.width + self.warmup)
        level = np.log2(np.maximum(np.where(known, novelty, 0.0), _BIN_LOW) / _BIN_LOW)
        bin_ = np.minimum(np.floor(level * _BINS_PER_OCTAVE).astype(np.int64), _BINS - 1)
        beyond = novelty > _BIN_LOW * 2.0 ** ((_BINS - 1) / _BINS_PER_OCTAVE + 0.5)
        tail = np.cumsum(self.histogram[rows, ::-1], axis=1)[:, ::-1]
        at = tail[np.arange(rows.size), bin_]
        p = (np.where(beyond, 0.0, at) + 0.5) / (self.weight[rows] + 1.0)
        # past the largest novelty on record the rank saturates at its history's resolution
        # (a noise column's new record and a broken pattern would tie): grade it by octaves
        on_record = self.histogram[rows] >= _ON_RECORD
        top = np.where(on_record.any(axis=1), _BINS - 1 - on_record[:, ::-1].argmax(axis=1), 0)
        octaves = np.maximum(level - (top + 1) / _BINS_PER_OCTAVE, 0.0)
        z = np.minimum(normal_tail_quantile(p) + octaves, SCORE_CAP)
        out[full] = np.where(ranked, z, 0.0)
        hist = self.histogram[rows] * np.where(ranked, self._decay, 1.0)[:, None]
        hist[np.flatnonzero(ranked), bin_[ranked]] += 1.0
        self.histogram[rows] = hist
        decayed = self.weight[rows] * self._decay + 1.0
        self.weight[rows] = np.where(ranked, decayed, self.weight[rows])
        self._learn(rows, win, nearest, known & (novelty <= self.vigilance))
        return out

    def _learn(
        self, rows: np.ndarray, win: FloatArray, nearest: np.ndarray, resonates: np.ndarray
    ) -> None:
        """Move resonating prototypes towards their window; store the others as new ones."""
        now = self.blocks[rows]
        slot = np.where(resonates, nearest, self.used[rows].argmin(axis=1))
        # an empty slot has used = 0 and matches = 0; prefer it over a live one matched at 0
        empty = self.matches[rows] == 0
        slot = np.where(~resonates & empty.any(axis=1), empty.argmax(axis=1), slot)
        members = self.matches[rows, slot]
        rate = np.where(resonates, 1.0 / np.minimum(members + 1.0, _MAX_RATE_DIVISOR), 1.0)
        proto = self.memory[rows, slot]
        self.memory[rows, slot] = proto + rate[:, None] * (win - proto)
        self.matches[rows, slot] = np.where(resonates, members + 1.0, 1.0)
        self.used[rows, slot] = now

    def state_dict(self) -> dict[str, np.ndarray]:
        return {k: getattr(self, k).copy() for k in (*self._KEYS, *self._ROWS)}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        rows = {key: getattr(self, key).shape[1:] for key in self._ROWS}
        load_arrays(self, state, self._KEYS, "window", rows)
