"""What a layout change costs a replay: the ticks whose signal columns were added or moved to
another team or cohort (the pipeline then rebuilds its entity map, scorer masks and peer
groups) against the ordinary ticks of the same run.

    python bench/layout_change.py              # the demo cluster (63 x 8 B200), 1 day
    python bench/layout_change.py --days 3     # the whole demo

The built-in demo's GPUs change teams as jobs start and stop (co-movement and activity,
team_inference.py), ~36 times a day, so a layout change is a regular cost of a replay, not a
one-off. Times are CPU seconds of ``Pipeline.step`` (``time.process_time``) per tick; the
baseline, measured in the same run, is the median ordinary tick. The first tick (series index,
signal columns, kernel load) is left out.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from replay_bench import scenario

from detector.config.load import load_config
from detector.loop import TickLoop
from detector.model import ColumnLayout, Frame
from detector.pipeline.tick import TickResult
from detector.replay.run import run_replay, simulated_frames
from detector.series.index import SeriesIndex
from detector.sim import SimulatedCluster


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=float, default=1.0, help="days of cluster history")
    parser.add_argument("--seed", type=int, default=None, help="default: the demo's 7")
    args = parser.parse_args()

    sc = scenario(args.days, None, args.seed)
    cluster = SimulatedCluster(sc)
    index = SeriesIndex()
    pipeline = TickLoop.from_config(load_config(None, {}), index)
    ordinary: list[float] = []
    changed: list[float] = []
    step: Callable[[Frame], TickResult] = pipeline.step

    layouts: list[ColumnLayout] = []  # the previous tick's (a new object after a change)

    def timed(frame: Frame) -> TickResult:
        start = time.process_time()
        result = step(frame)
        spent = time.process_time() - start
        layout = pipeline.signal_map.layout  # built by the step
        if layouts:  # the first tick builds everything: left out
            (ordinary if layout is layouts[-1] else changed).append(spent)
        layouts[:] = [layout]
        return result

    pipeline.step = timed  # type: ignore[method-assign]
    run_replay(pipeline, simulated_frames(cluster, index), events=cluster.events())

    tick = statistics.median(ordinary)
    change = statistics.median(changed) if changed else float("nan")
    total = sum(ordinary) + sum(changed)
    excess = sum(changed) - len(changed) * tick
    print(
        f"scenario: {sc.nodes} nodes x {sc.gpus} GPUs, {args.days:g} days, seed {sc.seed}: "
        f"{len(ordinary) + len(changed) + 1} ticks, {len(changed)} layout changes"
    )
    print()
    print("| measure | value |")
    print("|---|---|")
    print(f"| ordinary tick, median CPU ms (baseline) | {tick * 1e3:.2f} |")
    print(f"| tick with a layout change, median CPU ms | {change * 1e3:.2f} |")
    print(f"| a layout change, in ordinary ticks | {change / tick:.1f}x |")
    print(f"| layout changes' excess, share of the replay's step CPU | {excess / total:.1%} |")


if __name__ == "__main__":
    main()
