"""Repeated scrapes: a target whose every value equals its previous scrape's sent no new sample.

dcgm-exporter does not read the GPUs when it is scraped: it collects every ``-c`` ms (30 s by
default) and serves that collection until the next one. Scraped every 15 s, every other scrape
repeats the previous one byte for byte; scraped every 30 s, a scrape that lands just before the
exporter's collection (scrape times jitter, each node's exporter has its own phase) repeats
the previous one, and the next scrape sees two collections. Read as observations, counters'
rates go 0, 2x, 0, 2x and a node's GPUs all sit at 0 for a tick while its peers do not. A live
target's payload always moves (power and temperature gauges, node-exporter's CPU seconds and
clock), so a payload of at least ``min_series`` values (16; one GPU's DCGM page has more)
identical to the previous one is a cached one: this tick observed nothing new from that target,
exactly as if its scrape had been lost. ``blank`` makes it so: the target's series read NaN for
the tick, so the signal stage keeps their previous observation and the next rate spans both
intervals (which the peers scorer already treats as "back from a gap"). A small payload may
repeat by chance (a few quiet counters, constant gauges): it is never blanked.

A target is the series of one exporter on one node: ``(node, job, instance)`` from the series'
context labels, its GPU series apart from its node-level ones (exporters behind one address,
e.g. paths of one port, or series with neither label, still part: a node's GPU series are its
dcgm-exporter's). The scraper's own series (``up``, ``scrape_duration_seconds``, ...) are not the
target's payload and are never blanked. A series seen for the first time makes its target's
payload new.

A frozen exporter (a hung DCGM serving the same collection for minutes) must not vanish: a
target is blanked only while its payload has been unchanged for at most ``hold_s`` (60 s:
twice dcgm-exporter's default collection interval); after that its repeated values pass
through as observations (flat gauges, zero rates), where telemetry health and the scorers see
them, until the payload changes again. ``frozen`` marks the targets past the hold this tick
(the signal stage reports their share per node as ``health_targets_frozen_fraction``), and
``frozen_s`` tells, per target, for how long its payload has been unchanged.

Per tick: one comparison with the previous tick's values and one reduction per target (~30 us
for 36k series); the rest only on ticks where some target sent nothing new. A series observed
now but not on the previous tick counts as moved: a target back from a lost scrape is fresh.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from ..model import FloatArray, IntArray, SeriesInfo

# Written by the scraper (Prometheus or ingest/scrape.py) per target, not by the exporter.
SCRAPER_SERIES = frozenset(
    {
        "up",
        "scrape_duration_seconds",
        "scrape_samples_scraped",
        "scrape_samples_post_metric_relabeling",
        "scrape_series_added",
    }
)


def target_key(info: SeriesInfo) -> tuple[str, str, str, bool] | None:
    """The target (exporter on a node) a series comes from; None for the scraper's series."""
    if info.metric in SCRAPER_SERIES:
        return None
    context = dict(info.context)
    return (info.node, context.get("job", ""), context.get("instance", ""), bool(info.gpu))


class RepeatedScrapes:
    """See the module docstring. ``sync`` maps new series, ``blank`` runs once per tick."""

    def __init__(self, hold_s: float = 60.0, min_series: int = 16) -> None:
        if not hold_s >= 0:
            raise ConfigError(f"repeated scrapes: hold_s must be >= 0, got {hold_s!r}")
        if min_series < 1:
            raise ConfigError(f"repeated scrapes: min_series must be >= 1, got {min_series!r}")
        self.hold_s = float(hold_s)
        self.min_series = int(min_series)
        self._keys: dict[tuple[str, str, str, bool], int] = {}
        self._target_list: list[int] = []
        self._target: IntArray = np.zeros(0, dtype=np.int64)  # per series; -1: the scraper's
        self._order: IntArray = np.zeros(0, dtype=np.int64)  # target series, by target
        self._starts: IntArray = np.zeros(0, dtype=np.int64)  # per target: its run in _order
        self._prev: FloatArray = np.zeros(0)  # per series: the previous tick's value
        self._changed_t: FloatArray = np.zeros(0)  # per target: last tick its payload moved
        self.blanked_ticks = 0  # target-ticks blanked so far (self-metrics, tests)
        self.frozen: np.ndarray = np.zeros(0, dtype=bool)  # per target: repeating past hold_s
        self.scraped: np.ndarray = np.zeros(0, dtype=bool)  # per target: any value this tick

    def __len__(self) -> int:
        return len(self._keys)

    def target_nodes(self) -> list[str]:
        """Per target id, the node it belongs to ("" when unknown)."""
        return [key[0] for key in self._keys]

    def sync(self, infos: list[SeriesInfo]) -> None:
        """Map the series of ``infos`` not mapped yet (the index only grows)."""
        known = len(self._target_list)
        if known >= len(infos):
            return
        for info in infos[known:]:
            key = target_key(info)
            self._target_list.append(
                -1 if key is None else self._keys.setdefault(key, len(self._keys))
            )
        n_targets = len(self._keys)
        target = np.asarray(self._target_list, dtype=np.int64)
        # Series grouped by target (each target owns a non-empty run), the scraper's left out.
        order = np.argsort(np.where(target < 0, n_targets, target), kind="stable")
        self._order = order[: int((target >= 0).sum())]
        self._target = target
        self._starts = np.searchsorted(target[self._order], np.arange(n_targets))
        grown = len(infos) - self._prev.shape[0]
        self._prev = np.concatenate([self._prev, np.full(grown, np.nan)])
        extra = n_targets - self._changed_t.shape[0]
        self._changed_t = np.concatenate([self._changed_t, np.full(extra, -np.inf)])

    def blank(self, t: float, values: FloatArray) -> int:
        """Set to NaN, in place, the series of every target whose observed values all equal
        the previous tick's (for at most ``hold_s``); returns how many targets. ``values``:
        one per series synced."""
        if not self._keys:
            return 0
        observed = values == values  # not NaN
        moved = values != self._prev  # a series back from a gap (prev NaN) has moved
        moved &= observed
        self._prev[:] = values
        order, starts = self._order, self._starts
        quiet = ~np.logical_or.reduceat(moved[order], starts)
        self._changed_t[~quiet] = t
        self.frozen = np.zeros(len(self._keys), dtype=bool)
        self.scraped = ~quiet
        if not quiet.any():
            return 0
        # A quiet target with nothing observed this tick was not scraped (lost, or not due);
        # one with a few series may repeat by chance.
        n_observed = np.add.reduceat(observed[order].astype(np.int64), starts)
        self.scraped |= n_observed > 0
        repeating = quiet & (n_observed >= self.min_series)
        held = t - self._changed_t <= self.hold_s
        self.frozen = repeating & ~held
        repeated = repeating & held
        if not repeated.any():
            return 0
        blank = np.zeros(len(self._keys) + 1, dtype=bool)
        blank[:-1] = repeated
        values[blank[self._target]] = np.nan  # target -1 reads the last slot: never blanked
        count = int(repeated.sum())
        self.blanked_ticks += count
        return count

    def frozen_s(self, t: float) -> FloatArray:
        """Per target, seconds since its payload last moved (inf before its first scrape)."""
        return t - self._changed_t

    def state_dict(self) -> dict[str, FloatArray]:
        """The previous tick's values (per series) and when each target's payload last moved
        (per target), so a restart tells a cached page from a fresh one on its first tick."""
        return {"prev": self._prev.copy(), "changed_t": self._changed_t.copy()}

    def load_state_dict(self, state: dict[str, FloatArray]) -> None:
        """Restore ``state_dict`` output after ``sync`` mapped the same series in the same
        order (targets are numbered by first appearance); extra entries are ignored."""
        for name, mine in (("prev", self._prev), ("changed_t", self._changed_t)):
            saved = np.asarray(state[name], dtype=np.float64)
            n = min(saved.shape[0], mine.shape[0])
            mine[:n] = saved[:n]
