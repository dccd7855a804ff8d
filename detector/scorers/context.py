"""Context novelty: a value sequence the column has never shown before, vectorized.

In the spirit of Smirnov's Contextual Anomaly Detector (CAD OSE, NAB 2016): what is anomalous
is not a value but a value *in its context*, a transition the stream has never made. Per
column, on every observed value:

- **quantize** it against the column's all-time range ``[low, high]`` (before this value) into
  ``levels`` equal bins, plus two symbols for "above the range" and "below the range";
- **contexts**: the last ``orders`` symbols form the grams of order 1 (the symbol alone) to
  ``orders`` (the whole window), each a distinct key (``order`` and symbols encoded together);
- **memory**: one bit per key per column in a ``columns x table_bits`` bit table (uint64
  words). Keys index it directly when they all fit (collision-free), otherwise through a
  multiplicative hash. A tick reads and sets ``orders`` bits per column with fancy indexing:
  O(1) per column, no Python loop per column;
- **novelty depth**: ``d = orders - k + 1`` where ``k`` is the shortest unseen order (a value
  bin never seen: depth ``orders``; only the full window unseen: depth 1; all seen: 0);
- **calibration**: the column's own exponentially weighted rate of "depth >= d" events
  (half-life ``rate_half_life`` observations, Krichevsky-Trofimov prior ``(h + 1/2)/(w + 1)``)
  gives the probability ``p`` of a novelty this deep on this column; the score is the
  one-sided normal quantile of ``p`` (z units; 0 for ``p >= 1/2``, capped at ``SCORE_CAP``).
  A noise column makes new long contexts all the time and scores ~0 for them; a column that
  repeats a pattern scores high the first time it breaks it.

Every context is learnt once seen, including the one just scored: novelty is by definition a
first time, so a new regime fires once and then becomes familiar (CAD learns the same way).
The range includes the value afterwards, so quantization is coarse while a column is young;
the first ``warmup`` observations score 0 and only fill the memory (while a column is young
every context is new by necessity, so they do not count towards the rates).

Not direction-aware (a novel transition has no sign) and no time constant: the model is a
sequence of observations, so the clock does not enter it (gaps are simply not observations).

NaN, infinite or sentinel (beyond ±1e150) values: score 0, state untouched.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ConfigError
from ..model import FloatArray, IntArray
from .base import SCORE_CAP, ColumnLayout
from .zscore import check_state, grow, observed

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing multiplier (2**64 / phi)
# Abramowitz & Stegun 26.2.23: inverse upper normal tail, |error| < 4.5e-4 on (0, 1/2].
_C = (2.515517, 0.802853, 0.010328)
_D = (1.432788, 0.189269, 0.001308)


def normal_tail_quantile(p: FloatArray) -> FloatArray:
    """z with P(N > z) = p for p in (0, 1/2]; 0 for p >= 1/2 (A&S 26.2.23)."""
    q = np.clip(p, 1e-300, 0.5)
    t = np.sqrt(-2.0 * np.log(q))
    z = t - (_C[0] + t * (_C[1] + t * _C[2])) / (1.0 + t * (_D[0] + t * (_D[1] + t * _D[2])))
    return np.where(p >= 0.5, 0.0, np.maximum(z, 0.0))


class ContextNovelty:
    """Scorer: surprise of an unseen context of quantized values, per column (docstring)."""

    name = "context"
    _KEYS = ("low", "high", "count", "code", "weight")

    def __init__(
        self,
        levels: int = 8,
        orders: int = 4,
        table_bits: int = 2**14,
        rate_half_life: float = 3000.0,
        warmup: int = 20,
    ) -> None:
        if levels < 1 or orders < 1:
            raise ConfigError(
                f"context novelty needs levels >= 1, orders >= 1 (got {levels}, {orders})"
            )
        if table_bits < 64 or table_bits & (table_bits - 1):
            raise ConfigError(f"table_bits must be a power of two >= 64, got {table_bits}")
        if not rate_half_life > 0 or warmup < 0:
            raise ConfigError("context novelty needs rate_half_life > 0 and warmup >= 0")
        self.levels = int(levels)
        self.orders = int(orders)
        self.symbols = self.levels + 2  # + above range, below range
        if self.symbols ** (self.orders + 1) >= 2**62:
            raise ConfigError(f"levels={levels}, orders={orders}: context keys overflow int64")
        self.table_bits = int(table_bits)
        self.rate_half_life = float(rate_half_life)
        self.warmup = int(warmup)
        self._decay = 0.5 ** (1.0 / self.rate_half_life)
        # key of order k = symbols of the last k values + offset of order k (orders never clash)
        self._modulus = np.array([self.symbols**k for k in range(1, self.orders + 1)])
        self._offset = np.cumsum(np.concatenate(([0], self._modulus[:-1])))
        self._direct = int(self._modulus.sum()) <= self.table_bits
        self._depths = np.arange(1, self.orders + 1)[None, :]  # order k+1 in column k
        self._shift = np.uint64(64 - int(math.log2(self.table_bits)))
        self.low = np.zeros(0)  # smallest value seen, +inf before the first
        self.high = np.zeros(0)  # largest value seen, -inf before the first
        self.count = np.zeros(0)  # observations so far
        self.code = np.zeros(0, dtype=np.int64)  # last `orders` symbols, base `symbols`
        self.weight = np.zeros(0)  # EW count of observations (for the rates)
        self.hits = np.zeros((0, self.orders))  # EW count of novelty depth >= d+1, column d
        self.memory = np.zeros((0, self.table_bits // 64), dtype=np.uint64)

    def _grow(self, n: int) -> None:
        self.low = grow(self.low, n, np.inf)
        self.high = grow(self.high, n, -np.inf)
        for key in ("count", "code", "weight", "hits", "memory"):
            setattr(self, key, grow(getattr(self, key), n, 0))

    def _slots(self, code: IntArray) -> IntArray:
        """Bit index of every order's key (columns x orders)."""
        keys: IntArray = code[:, None] % self._modulus[None, :] + self._offset[None, :]
        if self._direct:
            return keys
        hashed = (keys.astype(np.uint64) * _GOLDEN) >> self._shift
        slots: IntArray = hashed.astype(np.int64)
        return slots

    def update(self, t: float, x: FloatArray, layout: ColumnLayout) -> FloatArray:
        n = x.shape[0]
        if n > self.count.shape[0]:
            self._grow(n)
        score = np.zeros(n)
        cols = np.flatnonzero(observed(x))
        if cols.size == 0:
            return score
        xv = x[cols]
        top = self._modulus[-1]
        code = (self.code[cols] * self.symbols + self._symbol_at(cols, xv)) % top
        slots = self._slots(code)
        word, bit = slots >> 6, (slots & 63).astype(np.uint64)
        rows = cols[:, None]
        seen = ((self.memory[rows, word] >> bit) & np.uint64(1)).astype(bool)
        # orders not yet filled (fewer values than the order) count as seen: no evidence
        filled = self._depths <= (self.count[cols, None] + 1)
        unseen = ~seen & filled
        first = np.where(unseen.any(axis=1), unseen.argmax(axis=1), self.orders)
        depth = self.orders - first  # 0 when every filled order was seen
        idx = np.maximum(depth - 1, 0)
        p = (self.hits[cols, idx] + 0.5) / (self.weight[cols] + 1.0)
        z = np.where(depth > 0, normal_tail_quantile(p), 0.0)
        live = self.count[cols] >= self.warmup
        score[cols] = np.where(live, np.minimum(z, SCORE_CAP), 0.0)
        # learn: every order's key (columns are distinct within one order: no lost writes)
        for k in range(self.orders):
            self.memory[cols, word[:, k]] |= np.uint64(1) << bit[:, k]
        # rates count from the end of warm-up: while young, every context is new by necessity
        rated = cols[live]
        deep = self._depths <= depth[live, None]
        self.hits[rated] = self.hits[rated] * self._decay + deep
        self.weight[rated] = self.weight[rated] * self._decay + 1.0
        self.code[cols] = code
        self.low[cols] = np.minimum(self.low[cols], xv)
        self.high[cols] = np.maximum(self.high[cols], xv)
        self.count[cols] += 1.0
        return score

    def _symbol_at(self, cols: np.ndarray, xv: FloatArray) -> np.ndarray:
        width = self.high[cols] - self.low[cols]
        safe = np.where(width > 0, width, 1.0)
        frac = np.where(width > 0, (xv - self.low[cols]) / safe, 0.0)
        inside = np.clip(np.floor(frac * self.levels), 0, self.levels - 1)
        above, below = xv > self.high[cols], xv < self.low[cols]
        sym = np.where(above, self.levels, np.where(below, self.levels + 1, inside))
        return sym.astype(np.int64)

    def state_dict(self) -> dict[str, np.ndarray]:
        state = {k: getattr(self, k).copy() for k in self._KEYS}
        state["hits"] = self.hits.copy()
        state["memory"] = self.memory.copy()
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        rows = {"hits": (self.orders,), "memory": (self.table_bits // 64,)}
        check_state(state, self._KEYS, "context", rows)
        for k in ("low", "high", "count", "weight"):
            setattr(self, k, np.array(state[k], dtype=np.float64))
        self.code = np.array(state["code"], dtype=np.int64)
        self.hits = np.array(state["hits"], dtype=np.float64)
        self.memory = np.array(state["memory"], dtype=np.uint64)
