"""Own past: a signal judged against its own history alone, the NAB-validated preset.

Peers cannot judge a signal that has none (a single server, a node alone in its cohort): then
only the signal's own past can say what is usual. This scorer is the combination that scores
68.82 (standard profile) on the Numenta Anomaly Benchmark, the ``likelihoodContextSeasonal``
row of bench/nab.py (which streams every NAB file through this very class; bench/RESULTS.md
"## NAB" tells how each part was chosen), built from the project's scorers:

- ``likelihood``: ``AnomalyLikelihood`` of a ``ForecastError`` (five EW levels, 0.25 to 64
  observations; the least-error level forecasts): how unusual the recent average of the
  forecast surprise is against its own long-run distribution (Numenta's anomaly likelihood);
- ``range``: ``RangeNovelty``, a value beyond everything the column has shown (5 % tolerance);
- ``context``: ``ContextNovelty``, a sequence of quantized values (4 levels, up to 6 in a row)
  never seen before, put on the likelihood's scale by ``context_weight`` (2.67: the ratio of
  the two scores' 99.9th percentiles on NAB, a label-free rule). Its 55,986 keys index a table
  of 2**16 bits directly (8 KiB a column; bench/nab.py's 2**17 holds the same bits);
- the hour-of-day gate: ``SeasonalProfile`` (24 hourly bins of a day) finds whether the value
  is ordinary for this hour; ``g = clip(seasonal / gate_z, gate_floor, 1)`` (1 while the hour
  is not learnt) discounts the likelihood and context surprises down to half where it is
  (never range novelty: a new all-time extreme is not usual at any hour).

Score: ``max(g x likelihood, range, (context_weight x g) x context)`` in z units, capped at
``SCORE_CAP``. Durations are in observations of ``observation_s`` seconds (the scrape
interval: the preset was validated on series of every cadence from 5 s to an hour, each
measured in its own observations); the day is the clock's. NAB's result files then hold off
repeated alarms for 80 rows (bench/nab.py ``holdoff``); in the product the alert episodes do
that (minimum duration, cooldown).

Warm-up: a column scores 0 for its first ``warmup`` observations (120: the likelihood's own,
20 skipped and 100 to learn the long-run distribution), while every part learns. The range and
context parts would speak from their 20th, but a young column's range is the few values it has
shown, and values beyond it come often (NAB never scores a file's first 15 %, at least 169
rows, so there the warm-up changes nothing a holdoff does not carry past row 200). The gate
opens from a bin's second day. NaN inputs: score 0, state untouched (every part honours it).
State: each part's, under its name (``likelihood.``, ``range.``, ``context.``, ``seasonal.``).
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from ..model import FloatArray
from .base import SCORE_CAP, ColumnLayout
from .context import ContextNovelty
from .forecast import ForecastError
from .likelihood import AnomalyLikelihood
from .novelty import RangeNovelty
from .seasonal import SeasonalProfile


class OwnPast:
    """Scorer: a column against its own past, the NAB-validated preset (module docstring)."""

    name = "own_past"

    def __init__(
        self,
        observation_s: float = 15.0,
        level_half_lives: tuple[float, ...] = (0.25, 1.0, 4.0, 16.0, 64.0),
        forecast_scale_half_life: float = 1000.0,
        forecast_warmup: int = 20,
        short_half_life: float = 3.5,
        long_half_life: float = 3000.0,
        likelihood_warmup: int = 100,
        range_tolerance: float = 0.05,
        context_levels: int = 4,
        context_orders: int = 6,
        context_table_bits: int = 2**16,
        context_rate_half_life: float = 3000.0,
        context_warmup: int = 20,
        context_weight: float = 2.67,
        season_period_s: float = 86400.0,
        season_bins: int = 24,
        season_half_life_periods: float = 4.0,
        season_warmup_periods: int = 2,
        season_tolerance: float = 0.05,
        gate_z: float = 2.0,
        gate_floor: float = 0.5,
        warmup: int = 120,
    ) -> None:
        if not observation_s > 0:
            raise ConfigError(f"own_past: observation_s must be > 0 seconds, got {observation_s}")
        if warmup < 0:
            raise ConfigError(f"own_past: warmup must be >= 0 observations, got {warmup}")
        if not (gate_z > 0 and 0 <= gate_floor <= 1 and context_weight >= 0):
            raise ConfigError(
                "own_past needs gate_z > 0, 0 <= gate_floor <= 1 and context_weight >= 0 "
                f"(got {gate_z}, {gate_floor}, {context_weight})"
            )
        obs = float(observation_s)
        self.observation_s = obs
        self.context_weight = float(context_weight)
        self.gate_z = float(gate_z)
        self.gate_floor = float(gate_floor)
        self.warmup = int(warmup)
        forecast = ForecastError(
            level_half_lives_s=tuple(h * obs for h in level_half_lives),
            scale_half_life_s=forecast_scale_half_life * obs,
            warmup=forecast_warmup,
        )
        self.likelihood = AnomalyLikelihood(
            forecast,
            short_half_life_s=short_half_life * obs,
            long_half_life_s=long_half_life * obs,
            skip=forecast_warmup,
            warmup=likelihood_warmup,
        )
        self.range = RangeNovelty(tolerance=range_tolerance)
        self.context = ContextNovelty(
            levels=context_levels,
            orders=context_orders,
            table_bits=context_table_bits,
            rate_half_life=context_rate_half_life,
            warmup=context_warmup,
        )
        self.seasonal = SeasonalProfile(
            period_s=season_period_s,
            bins=season_bins,
            half_life_periods=season_half_life_periods,
            warmup_periods=season_warmup_periods,
            tolerance=season_tolerance,
        )

    def _parts(
        self,
    ) -> dict[str, AnomalyLikelihood | RangeNovelty | ContextNovelty | SeasonalProfile]:
        return {
            "likelihood": self.likelihood,
            "range": self.range,
            "context": self.context,
            "seasonal": self.seasonal,
        }

    def update(self, t: float, x: FloatArray, layout: ColumnLayout) -> FloatArray:
        likelihood = self.likelihood.update(t, x, layout)
        novel = self.range.update(t, x, layout)
        context = self.context.update(t, x, layout)
        seasonal = self.seasonal.update(t, x, layout)
        ordinary = np.where(self.seasonal.learnt, seasonal, np.inf)  # unlearnt hour: no gate
        gate = np.clip(ordinary / self.gate_z, self.gate_floor, 1.0)
        fused = np.maximum(gate * likelihood, novel)
        fused = np.maximum(fused, self.context_weight * gate * context)
        young = self.range.count <= self.warmup  # observations so far, this one included
        out: FloatArray = np.where(young, 0.0, np.minimum(fused, SCORE_CAP))
        return out

    def state_dict(self) -> dict[str, np.ndarray]:
        return {
            f"{name}.{key}": value
            for name, part in self._parts().items()
            for key, value in part.state_dict().items()
        }

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        for name, part in self._parts().items():
            prefix = name + "."
            part.load_state_dict(
                {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
            )
