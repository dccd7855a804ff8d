"""Per-node statistics of the alert score over time, with river at the per-entity level.

The scorers work on tens of thousands of columns at once (numpy kernels); above them there are
only as many streams as nodes (tens to a few thousand), where a per-stream object is cheap and
river's streaming estimators serve as they are:

- ``river.stats.Quantile`` (the P-square estimator: five markers, O(1) memory) per node and
  quantile gives the median and the 99th percentile of the node's alert score since the
  process started: a node whose p99 sits near the threshold is a chronic source of false
  alerts (recalibrate, or look at it), one whose median creeps up is degrading;
- ``river.drift.ADWIN`` per node detects when the mean of the node's score has changed (it
  keeps an adaptive window and tests every split of it); only rises are counted, since a score
  that falls back is a recovery. A rise below the alert threshold is the slow kind of trouble
  the alert itself does not show.

Missing scores (NaN: the node sent nothing this tick) are skipped. A node seen for the first
time gets fresh estimators; the statistics count from the process start (they are not part of
the saved state), like the daemon's other process counters. Cost: ~0.3 ms a tick for 1,000
nodes (ADWIN checks its window every 32 updates).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported when the first node is seen: see _new_streams
    from river import drift, stats

from ..model import FloatArray

QUANTILES = (0.5, 0.99)


@dataclass
class _NodeStreams:
    quantiles: tuple[stats.Quantile, ...]
    adwin: drift.ADWIN
    rises: int = 0
    count: int = 0
    total: float = 0.0


@dataclass(frozen=True, slots=True)
class NodeScoreSummary:
    """One node's statistics, for export."""

    node: str
    quantiles: tuple[tuple[float, float], ...]  # (q, estimate), NaN before any score
    rises: int  # upward changes of the score's mean detected since the process started
    count: int  # scores seen
    total: float  # their sum


@dataclass
class NodeScoreStats:
    """See the module docstring. ``update`` once per tick with the pipeline's node scores."""

    quantiles: tuple[float, ...] = QUANTILES
    _nodes: dict[str, _NodeStreams] = field(default_factory=dict)

    def update(self, node_names: Sequence[str], scores: FloatArray) -> list[str]:
        """Learn one tick; returns the nodes whose score's mean rose this tick."""
        risen: list[str] = []
        for name, score in zip(node_names, scores.tolist(), strict=True):
            if not math.isfinite(score):
                continue
            streams = self._nodes.get(name)
            if streams is None:
                streams = self._nodes[name] = _new_streams(self.quantiles)
            for quantile in streams.quantiles:
                quantile.update(score)
            streams.count += 1
            streams.total += score
            before = float(streams.adwin.estimation)  # mean of the whole window
            streams.adwin.update(score)  # type: ignore[no-untyped-call]
            # On a change ADWIN drops the window's older part: its mean is then the new level.
            if streams.adwin.drift_detected and float(streams.adwin.estimation) > before:
                streams.rises += 1
                risen.append(name)
        return risen

    def summary(self) -> list[NodeScoreSummary]:
        """Every node seen so far, by name."""
        out = []
        for name in sorted(self._nodes):
            streams = self._nodes[name]
            estimates = tuple(
                (q, _estimate(quantile))
                for q, quantile in zip(self.quantiles, streams.quantiles, strict=True)
            )
            out.append(
                NodeScoreSummary(name, estimates, streams.rises, streams.count, streams.total)
            )
        return out


def _new_streams(quantiles: tuple[float, ...]) -> _NodeStreams:
    # Imported here, not at module import: river.drift pulls in scipy.stats (~0.5 s), which
    # every `detector` command would pay for while only the daemon's loop uses it.
    from river import drift, stats

    return _NodeStreams(
        tuple(stats.Quantile(q) for q in quantiles),
        drift.ADWIN(),  # type: ignore[no-untyped-call]
    )


def _estimate(quantile: stats.Quantile) -> float:
    value = quantile.get()
    return float(value) if value is not None else math.nan
