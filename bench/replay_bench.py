"""Replay throughput: the built-in simulated cluster through the whole pipeline, end to end.

    python bench/replay_bench.py                 # the demo cluster (63 x 8 B200), 1 day
    python bench/replay_bench.py --days 30       # the 30-day, 63-node scenario (minutes)
    python bench/replay_bench.py --days 0.25 --stages   # where a tick's CPU goes

What runs is what ``detector replay --days N`` runs: ``SimulatedCluster(Scenario.demo())`` with
``days`` (and ``--nodes``/``--seed``) overridden, ``TickLoop.from_config`` with the default config,
``simulated_frames`` and ``run_replay`` (scoring, fusion, alerts, evaluation). Times are CPU
seconds of this process (``time.process_time``; the shared machine's load shows up in wall
time, far less in CPU time) and wall seconds beside them.

The baseline, measured in the same run, is the simulator alone (``cluster.frames()`` for the
same days, no pipeline): the replay can never be faster than the data it is fed, and the ratio
shows what the detector itself costs. The goal line is 55 days of the 63-node cluster in 10
minutes; the extrapolation scales the measured CPU per tick linearly in ticks and, for another
``--nodes``, in nodes (per-tick cost is proportional to the series count).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import functools
import time
from collections.abc import Callable, Iterator
from typing import Any

from detector.config.load import load_config
from detector.loop import TickLoop
from detector.model import Frame
from detector.pipeline.tick import Pipeline
from detector.replay.run import run_replay, simulated_frames
from detector.series.index import SeriesIndex
from detector.sim import Scenario, SimulatedCluster

GOAL_DAYS, GOAL_NODES, GOAL_MINUTES = 55.0, 63, 10.0
Seconds = collections.defaultdict[str, float]  # CPU seconds per stage


@dataclasses.dataclass
class Run:
    ticks: int = 0
    series: int = 0
    columns: int = 0
    scored: int = 0  # column updates per tick summed over scorers
    setup_cpu: float = 0.0
    first_cpu: float = 0.0  # the first tick: index and signal columns are built there
    cpu: float = 0.0  # every later tick, and the evaluation at the end
    wall: float = 0.0
    alerts: int = 0
    stages: dict[str, float] = dataclasses.field(default_factory=dict)


def scenario(days: float, nodes: int | None, seed: int | None) -> Scenario:
    changes: dict[str, Any] = {"days": days}
    if nodes is not None:
        changes["nodes"] = nodes
    if seed is not None:
        changes["seed"] = seed
    return dataclasses.replace(Scenario.demo(), **changes)


def _timed(counter: Seconds, label: str, func: Callable[..., Any]) -> Any:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.process_time()
        try:
            return func(*args, **kwargs)
        finally:
            counter[label] += time.process_time() - start

    return wrapper


def instrument(pipeline: Pipeline, counter: Seconds) -> None:
    """Per-stage CPU time, by wrapping the stages' bound methods on these instances."""
    for scorer in pipeline.scorers:
        label = f"scorer {scorer.name}"
        if hasattr(scorer, "update_at"):  # what the pipeline calls (scorers.base.update_columns)
            scorer.update_at = _timed(counter, label, scorer.update_at)
        else:
            scorer.update = _timed(counter, label, scorer.update)  # type: ignore[method-assign]
    sm = pipeline.signal_map
    sm.compute = _timed(counter, "signals", sm.compute)  # type: ignore[method-assign]
    xe = pipeline.xid_extractor
    xe.update = _timed(counter, "xids", xe.update)  # type: ignore[method-assign]
    pipeline.step = _timed(counter, "pipeline.step", pipeline.step)  # type: ignore[method-assign]


def timed_frames(frames: Iterator[Frame], counter: Seconds) -> Iterator[Frame]:
    while True:
        start = time.process_time()
        frame = next(frames, None)
        counter["simulator + frames"] += time.process_time() - start
        if frame is None:
            return
        yield frame


def mark_first(
    frames: Iterator[Frame], marks: list[float], counter: Seconds | None = None
) -> Iterator[Frame]:
    """Pass frames through; note the CPU clock when the second frame is asked for (the first
    tick, which builds the series index and the signal columns and loads or compiles the
    scorer kernels, is then done) and restart the stage ``counter`` there."""
    for i, frame in enumerate(frames):
        if i == 1:
            marks.append(time.process_time())
            if counter is not None:
                counter.clear()
        yield frame


def run_pipeline(sc: Scenario, stages: bool) -> Run:
    run = Run()
    start = time.process_time()
    cluster = SimulatedCluster(sc)
    index = SeriesIndex()
    loop = TickLoop.from_config(load_config(None, {}), index)
    frames: Iterator[Frame] = simulated_frames(cluster, index)
    run.setup_cpu = time.process_time() - start
    counter: Seconds = collections.defaultdict(float)
    if stages:
        instrument(loop.pipeline, counter)
        frames = timed_frames(frames, counter)
    marks: list[float] = []
    frames = mark_first(frames, marks, counter)
    start, wall = time.process_time(), time.perf_counter()
    result = run_replay(loop, frames, events=cluster.events())
    end = time.process_time()
    first = marks[0] if marks else end
    run.first_cpu, run.cpu = first - start, end - first
    run.wall = time.perf_counter() - wall
    run.ticks, run.series, run.alerts = result.ticks, result.series, len(result.alerts)
    run.columns = len(loop.pipeline.signal_map)
    run.scored = sum(len(idx) for idx in loop.pipeline.scoring.subsets.values())
    run.stages = dict(counter)
    return run


def run_simulator(sc: Scenario) -> tuple[float, int]:
    cluster = SimulatedCluster(sc)
    start = time.process_time()
    ticks = sum(1 for _ in cluster.frames())
    return time.process_time() - start, ticks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=float, default=1.0, help="days of cluster history")
    parser.add_argument("--nodes", type=int, default=None, help="default: the demo's 63")
    parser.add_argument("--seed", type=int, default=None, help="default: the demo's 7")
    parser.add_argument("--stages", action="store_true", help="CPU per stage (adds overhead)")
    parser.add_argument("--no-baseline", action="store_true", help="skip the simulator-only run")
    args = parser.parse_args()

    sc = scenario(args.days, args.nodes, args.seed)
    run = run_pipeline(sc, args.stages)
    sim_cpu, sim_ticks = (0.0, 0) if args.no_baseline else run_simulator(sc)

    days = sc.duration_s / 86400.0
    later = max(run.ticks - 1, 1)
    per_tick = run.cpu / later
    goal_ticks = GOAL_DAYS * 86400.0 / sc.step_s
    scale = GOAL_NODES / sc.nodes
    goal_cpu = (run.setup_cpu + run.first_cpu) * scale + per_tick * (goal_ticks - 1) * scale
    print(
        f"scenario: {sc.nodes} nodes x {sc.gpus} GPUs, {days:g} days, step {sc.step_s:g} s, "
        f"seed {sc.seed}: {run.ticks} ticks, {run.series} series, {run.columns} signal "
        f"columns, {run.scored} scorer column-updates per tick, {run.alerts} alerts"
    )
    print(
        f"one-time CPU: setup (simulator plan, pipeline) {run.setup_cpu:.1f} s, first tick "
        f"(series index, signal columns) {run.first_cpu:.1f} s; per-tick figures exclude both"
    )
    print()
    rows = [
        ("ms CPU per tick", f"{per_tick * 1e3:.2f}"),
        ("CPU s / wall s, whole replay", f"{run.first_cpu + run.cpu:.1f} / {run.wall:.1f}"),
        ("samples/s (series values)", f"{later * run.series / run.cpu:,.0f}"),
        ("series-updates/s (scorer columns)", f"{later * run.scored / run.cpu:,.0f}"),
        ("days of history per CPU minute", f"{days * later / run.ticks / run.cpu * 60:.1f}"),
        (
            f"extrapolated {GOAL_DAYS:g} days x {GOAL_NODES} nodes",
            f"{goal_cpu / 60:.1f} min (goal {GOAL_MINUTES:g})",
        ),
    ]
    if sim_ticks:
        sim_tick = sim_cpu / sim_ticks
        rows.append(("baseline: simulator alone, ms/tick", f"{sim_tick * 1e3:.2f}"))
        rows.append(("replay / simulator alone", f"{per_tick / sim_tick:.1f}x"))
    width = max(len(name) for name, _ in rows)
    print(f"| {'measure':<{width}} | value |")
    print(f"|{'-' * (width + 2)}|-------|")
    for name, value in rows:
        print(f"| {name:<{width}} | {value} |")
    if run.stages:
        print()
        print("| stage (CPU ms per tick; step includes signals, scorers, xids) | ms |")
        print("|---|---|")
        for name, seconds in sorted(run.stages.items(), key=lambda kv: -kv[1]):
            print(f"| {name} | {seconds / max(run.ticks - 1, 1) * 1e3:.3f} |")
        print("(stage figures average over every tick but the first, like the rows above)")


if __name__ == "__main__":
    main()
