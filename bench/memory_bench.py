"""Resident memory per series: what sizes ``scrape.max_series_total`` against a memory limit.

    python bench/memory_bench.py [--nodes 8 64] [--ticks 60]

The built-in simulated cluster (demo scenario, 8 GPUs a node) at two sizes, each in a fresh
process: its series mapped into the index of the default config and ``--ticks`` ticks through
``Pipeline.step`` (every scorer's state grown to its columns), then the process's resident
memory after a full garbage collection (Linux /proc). The simulator's own arrays are freed
before the reading. Printed: series, signal columns and resident MB per size; the slope
between the two sizes (KB per series, i.e. what each series costs beyond the process's fixed
size), and how many series fit the Helm chart's memory limits (1 GiB agent, 4 GiB fleet) at
that slope above the smaller run's memory.
"""

from __future__ import annotations

import argparse
import dataclasses

from fresh_process import in_fresh_process, resident_mb


def measure(nodes: int, ticks: int) -> tuple[int, int, float]:
    """Series, signal columns and resident MB after ``ticks`` ticks of ``nodes`` nodes."""
    from detector.config.load import Config
    from detector.pipeline.build import build_pipeline
    from detector.replay.run import simulated_frames
    from detector.series.index import SeriesIndex
    from detector.series.labels import LabelRules
    from detector.sim import Scenario, SimulatedCluster

    cluster = SimulatedCluster(dataclasses.replace(Scenario.demo(), nodes=nodes, days=0.1))
    config = Config()
    index = SeriesIndex(LabelRules.from_config(config.labels))
    pipeline = build_pipeline(config, index)
    frames = simulated_frames(cluster, index)
    for _, frame in zip(range(ticks), frames, strict=False):
        pipeline.step(frame)
    del frames, cluster
    return len(index), len(pipeline.signal_map), resident_mb()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs=2, default=[8, 64])
    parser.add_argument("--ticks", type=int, default=60)
    args = parser.parse_args()
    rows = [(nodes, *in_fresh_process(measure, nodes, args.ticks)) for nodes in args.nodes]
    print(f"{'nodes':>6}{'series':>9}{'signals':>9}{'RSS MB':>9}")
    for nodes, series, signals, rss in rows:
        print(f"{nodes:>6}{series:>9,}{signals:>9,}{rss:>9.1f}")
    (_, s0, _, m0), (_, s1, _, m1) = rows
    per_series_kb = (m1 - m0) * 1024 / (s1 - s0)
    print(f"slope: {per_series_kb:.2f} KB a series")
    for name, limit_mb in (("agent, 1 GiB", 1024), ("fleet, 4 GiB", 4096)):
        fit = (limit_mb - m0) * 1024 / per_series_kb
        print(f"{name}: ~{fit:,.0f} series fit above the {m0:.0f} MB of the smaller run")


if __name__ == "__main__":
    main()
