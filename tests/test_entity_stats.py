"""Per-node score statistics (river at the per-entity level): quantiles and rises of the mean."""

from __future__ import annotations

import math

import numpy as np

from detector.service.entity_stats import NodeScoreStats

NODES = ("a", "b", "c")


def _run(
    ticks: int, rise_at: int | None = None, fall: bool = False
) -> tuple[NodeScoreStats, list[tuple[int, list[str]]]]:
    """Three nodes of noise in [0, 0.1); node b's score rises by 0.3 at ``rise_at`` (or starts
    0.3 higher and falls back there, with ``fall``); node c reports every other tick."""
    rng = np.random.default_rng(0)
    stats = NodeScoreStats()
    events: list[tuple[int, list[str]]] = []
    for t in range(ticks):
        scores = rng.uniform(0.0, 0.1, 3)
        if rise_at is not None and (t >= rise_at) != fall:
            scores[1] += 0.3
        if t % 2:
            scores[2] = math.nan
        risen = stats.update(NODES, scores)
        if risen:
            events.append((t, risen))
    return stats, events


def test_a_lasting_rise_of_one_nodes_score_is_reported_once_soon_after() -> None:
    """Node b's mean rises at tick 2000: reported once, within 100 ticks, for b only."""
    stats, events = _run(3000, rise_at=2000)
    assert [["b"]] == [risen for _, risen in events]
    assert 2000 <= events[0][0] < 2100
    assert {"a": 0, "b": 1, "c": 0} == {s.node: s.rises for s in stats.summary()}


def test_a_fall_is_a_recovery_not_a_rise() -> None:
    """Node b starts high and falls back to the others' level: no rise is reported."""
    stats, events = _run(3000, rise_at=1000, fall=True)
    assert [] == events
    assert all(s.rises == 0 for s in stats.summary())


def test_quantiles_track_each_nodes_score_distribution_and_skip_missing() -> None:
    """Medians near 0.05 and p99 near 0.099 for uniform [0, 0.1) noise; node c (NaN every
    other tick) is estimated from its observed ticks alone; a node never seen is absent."""
    stats, _ = _run(4000)
    summary = {s.node: dict(s.quantiles) for s in stats.summary()}
    assert set(summary) == set(NODES)
    for node in NODES:
        assert abs(summary[node][0.5] - 0.05) < 0.005
        assert abs(summary[node][0.99] - 0.099) < 0.002
    fresh = NodeScoreStats()
    fresh.update(("x",), np.array([math.nan]))
    assert [] == fresh.summary()
