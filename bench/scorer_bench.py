"""Scorer throughput: series-updates per second per core, against a river per-series loop.

    python bench/scorer_bench.py [--columns 30000] [--ticks 200] [--repeats 3]

The project path is every scorer (z-score, changepoint, peers, health) over ``--columns``
columns laid out as nodes x 8 GPUs (GPU signals) plus node-level and health columns, one
``update`` per tick, 5% of values missing. The baseline, measured in the same run, is the
per-series loop a river user would write: ``river.stats.EWMean`` + ``EWVar`` per series per
tick, on fewer series and ticks (it is slow), reported per update. Figures are medians over
``--repeats`` runs; the process is pinned to nothing, so "per core" means this single-threaded
Python process (numpy here does not multithread elementwise work).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
from river import stats

from detector.scorers.base import ColumnLayout, Scorer
from detector.scorers.changepoint import ChangePoint
from detector.scorers.health import TelemetryHealth
from detector.scorers.peers import PeerDeviation
from detector.scorers.registry import grid_layout
from detector.scorers.zscore import RobustZScore

GPU_SIGNALS = tuple(f"gpu_sig{i}" for i in range(28))
NODE_SIGNALS = (*(f"node_sig{i}" for i in range(12)), "health_up", "health_gpu_count")
NODE_SIGNALS += ("health_scrape_duration", "health_series_missing_fraction")


def cluster_layout(columns: int) -> ColumnLayout:
    """About ``columns`` columns: 8 GPUs x 28 GPU signals + 16 node signals per node."""
    per_node = 8 * len(GPU_SIGNALS) + len(NODE_SIGNALS)
    nodes = max(1, round(columns / per_node))
    return grid_layout(nodes, 8, GPU_SIGNALS, NODE_SIGNALS, cohorts=max(1, nodes // 16))


def stream(layout: ColumnLayout, ticks: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = 100.0 + rng.normal(size=(ticks, len(layout)))
    x[rng.random(x.shape) < 0.05] = np.nan
    return x


def time_scorers(make: Callable[[], list[Scorer]], layout: ColumnLayout, x: np.ndarray) -> float:
    """Seconds to push every tick of ``x`` through fresh scorers."""
    scorers = make()
    start = time.process_time()
    for i, row in enumerate(x):
        t = 15.0 * i
        for s in scorers:
            s.update(t, row, layout)
    return time.process_time() - start


def time_river(series: int, ticks: int) -> float:
    """Seconds for the river per-series loop: EWMean + EWVar per series per tick."""
    x = stream(cluster_layout(series), ticks)[:, :series]
    means = [stats.EWMean(fading_factor=0.01) for _ in range(series)]
    variances = [stats.EWVar(fading_factor=0.01) for _ in range(series)]
    start = time.process_time()
    for row in x:
        for j, v in enumerate(row.tolist()):
            if v == v:  # skip NaN like the project does
                means[j].update(v)
                variances[j].update(v)
    return time.process_time() - start


def state_bytes(scorers: list[Scorer]) -> int:
    return sum(a.nbytes for s in scorers for a in s.state_dict().values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--columns", type=int, default=30_000)
    parser.add_argument("--ticks", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--river-series", type=int, default=3_000)
    parser.add_argument("--river-ticks", type=int, default=50)
    args = parser.parse_args()

    layout = cluster_layout(args.columns)
    n = len(layout)
    x = stream(layout, args.ticks)
    updates = n * args.ticks
    paths: dict[str, Callable[[], list[Scorer]]] = {
        "zscore": lambda: [RobustZScore()],
        "changepoint": lambda: [ChangePoint()],
        "peers": lambda: [PeerDeviation()],
        "health": lambda: [TelemetryHealth()],
        "all four": lambda: [RobustZScore(), ChangePoint(), PeerDeviation(), TelemetryHealth()],
    }
    river_s = statistics.median(
        time_river(args.river_series, args.river_ticks) for _ in range(args.repeats)
    )
    river_rate = args.river_series * args.river_ticks / river_s
    print(
        f"layout: {n} columns ({n // (8 * len(GPU_SIGNALS) + len(NODE_SIGNALS))} nodes x 8 "
        f"GPUs), {args.ticks} ticks, 5% missing; medians of {args.repeats} runs"
    )
    print(f"{'path':<34}{'updates/s':>14}{'vs river':>10}{'state B/series':>16}")
    print(f"{'river EWMean+EWVar loop':<34}{river_rate:>14,.0f}{1.0:>10.1f}{'-':>16}")
    for name, make in paths.items():
        seconds = statistics.median(time_scorers(make, layout, x) for _ in range(args.repeats))
        rate = updates / seconds
        scorers = make()
        for i, row in enumerate(x[:2]):
            for s in scorers:
                s.update(15.0 * i, row, layout)
        per_series = state_bytes(scorers) / n
        print(f"{name:<34}{rate:>14,.0f}{rate / river_rate:>10.1f}{per_series:>16.1f}")


if __name__ == "__main__":
    main()
