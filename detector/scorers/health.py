"""Telemetry health: scores the structural columns the signal stage emits as ``health_*``.

Only columns whose signal name starts with ``health_`` are scored; every other column scores
0. The signal name picks the mechanism (first match wins):

=============================  ===========  ===============================================
signal name                    kind         score
=============================  ===========  ===============================================
``health_up``                  up           ``down_z · clip(1 - x, 0, 1)``: a target down
                                            (0) scores ``down_z``; a fraction up scales it
``health_*_count`` (GPU count, deficit      relative drop below the column's own
sample count, ...)                          forgetting max ``E``: ``down_z ·
                                            min(1, (E - x) / (E · full_fraction))``; one GPU
                                            of 8 gone is a full score with the default 1/8
``health_*_fraction`` (series  excess       rise above the column's own forgetting min
missing, ...)                               ``B``: ``down_z · min(1, (x - B) /
                                            full_fraction)``
any other ``health_*``          log-z        robust EW z-score of ``log1p(max(x, 0))``
(scrape duration, bytes, ...)               (``RobustEWBaseline``), folded by the column's
                                            direction, its sigma at least ``log_floor``
=============================  ===========  ===============================================

``log_floor`` (default 0.02) is what a telemetry change must exceed to count as one sigma. On
``log1p`` a sub-second duration is nearly linear, so it reads as 20 ms there; from a few seconds
up, or on a count of samples, as 2%. A local exporter answers in 2.5 ms with a few µs of jitter,
so without it a scrape stalled for 3 ms by a busy host (a real run's test stack) is a 50-sigma
lone deviant, while the slowdown that matters (a DCGM call blocked on a bad GPU) is hundreds of
ms to seconds: 0.1 -> 1 s is ~30 sigma under the floor.

The forgetting max/min follows a rise (or fall) at once and otherwise relaxes towards the
value with ``memory_half_life_s``: a permanent reconfiguration (a node rebuilt with 7 GPUs)
stops scoring after a few memory half-lives instead of alarming forever. A column's first
observation scores 0 except for ``health_up``, whose expected value is 1 by definition.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError, StateError
from ..model import FloatArray, IntArray
from .base import ColumnLayout, KernelScorer
from .kernels.counts_health import KIND_DEFICIT, KIND_EXCESS, KIND_LOGZ, KIND_UP, health_step
from .zscore import RobustEWBaseline, check_state, grow


def health_kind(signal_name: str) -> int:
    """Mechanism for one signal name (0: not a health signal)."""
    if not signal_name.startswith("health_"):
        return 0
    if signal_name == "health_up":
        return KIND_UP
    if signal_name.endswith("_count"):
        return KIND_DEFICIT
    if signal_name.endswith("_fraction"):
        return KIND_EXCESS
    return KIND_LOGZ


class TelemetryHealth(KernelScorer):
    """Scorer for ``health_*`` columns (see module docstring). State covers those columns only."""

    name = "health"
    _KEYS = ("columns", "kinds", "expected", "last_t")

    def __init__(
        self,
        down_z: float = 10.0,
        full_fraction: float = 0.125,
        memory_half_life_s: float = 6 * 3600.0,
        log_half_life_s: float = 3600.0,
        warmup: int = 20,
        log_floor: float = 0.02,
    ) -> None:
        if not (down_z > 0 and 0 < full_fraction <= 1 and memory_half_life_s > 0):
            raise ConfigError("health needs down_z > 0, 0 < full_fraction <= 1, memory > 0")
        if not log_floor > 0:
            raise ConfigError(f"health: log_floor must be > 0, got {log_floor}")
        self.down_z = float(down_z)
        self.full_fraction = float(full_fraction)
        self.memory_half_life_s = float(memory_half_life_s)
        # for log-z columns; the floor is on the log1p scale (module docstring)
        self.baseline = RobustEWBaseline(log_half_life_s, warmup, var_floor_abs=log_floor**2)
        self.n_seen = 0  # layout columns already classified
        self.columns = np.zeros(0, dtype=np.int64)  # global index of each health column
        self.kinds = np.zeros(0, dtype=np.int64)
        self.expected = np.zeros(0)  # forgetting max (deficit) or min (excess)
        self.last_t = np.zeros(0)
        # health_step's parameters, built once
        self._q = np.array([self.down_z, self.full_fraction, -1.0 / self.memory_half_life_s])

    def _classify(self, layout: ColumnLayout) -> None:
        """Register health columns among layout columns not yet seen (columns only append)."""
        n = len(layout)
        if n <= self.n_seen:
            return
        by_signal = np.array([health_kind(s) for s in layout.signal_names] or [0])
        kinds = by_signal[layout.signal[self.n_seen :]]
        new = np.flatnonzero(kinds) + self.n_seen
        self.columns = np.append(self.columns, new)
        self.kinds = np.append(self.kinds, kinds[kinds > 0])
        m = self.columns.shape[0]
        self.expected = grow(self.expected, m, 0.0)
        self.last_t = grow(self.last_t, m, -np.inf)
        self.baseline.grow(m)
        self.n_seen = n

    def _step(
        self, t: float, x: FloatArray, cols: IntArray | None, layout: ColumnLayout, out: FloatArray
    ) -> None:
        """One tick over the health columns in one kernel pass (health_step); the kernel writes
        only health columns, so the others are zeroed first."""
        self._classify(layout)
        n = x.shape[0] if cols is None else cols.shape[0]
        if self.columns.shape[0] < n:  # some columns are not health columns
            out[slice(None) if cols is None else cols] = 0.0
        if self.columns.shape[0] == 0:
            return
        q = self._q
        base = self.baseline
        tracked = (self.expected, self.last_t)
        health_step(
            float(t), x, cols, layout.direction, self.columns, self.kinds, tracked, q,
            base.arrays(), base.params(), out,
        )  # fmt: skip

    def state_dict(self) -> dict[str, np.ndarray]:
        state = {k: getattr(self, k).copy() for k in self._KEYS}
        state["n_seen"] = np.array([self.n_seen], dtype=np.int64)
        state.update(self.baseline.state_dict("baseline."))
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        check_state(state, self._KEYS, "health")
        self.baseline.load_state_dict(state, "baseline.")
        self.columns = np.array(state["columns"], dtype=np.int64)
        self.kinds = np.array(state["kinds"], dtype=np.int64)
        self.expected = np.array(state["expected"], dtype=np.float64)
        self.last_t = np.array(state["last_t"], dtype=np.float64)
        if "n_seen" not in state:
            raise StateError("health state: missing array 'n_seen'")
        self.n_seen = int(np.asarray(state["n_seen"]).reshape(-1)[0])
