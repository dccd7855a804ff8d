"""Scorer throughput: series-updates per second per core, against river per-series loops.

    python bench/scorer_bench.py [--columns 30000] [--ticks 200] [--repeats 3]

Project rows, each one ``update`` per tick over about ``--columns`` columns, 5% of values
missing:

- each scorer alone, and all four (z-score, changepoint, peers, health) on every column, on a
  layout of nodes x 8 GPUs x 28 GPU signals + 16 node signals (4 of them ``health_*``);
- the realistic scoring path: a layout built from rules/signals.yaml (every scored rule, GPU
  rules x 8 GPUs) where each column goes through only the scorers its rule names, as
  ``Pipeline.step`` does (workload gauges -> peers, error counters -> counts on rare-event
  rates, state levels -> zscore + changepoint, health -> health). "scorers alone" feeds each
  scorer's ``update`` its columns gathered before the clock starts; "pipeline ScorerStage"
  runs the pipeline's own ``ScorerStage`` on the full row (each scorer reads its columns from
  the row and writes its scores into a full-width row itself: ``scorers.base.update_columns``),
  the row read straight from the ticks x columns matrix the bench holds in memory (48 MB, so
  every tick's row comes from DRAM); "row just written" first copies the tick's row into one
  reused buffer, as the signal stage writes it right before scoring in the pipeline (the copy
  is inside the timing).

Baselines, measured in the same run on ``--river-series`` series x ``--river-ticks`` ticks:

- river EWMean+EWVar, update only: ``river.stats.EWMean`` + ``EWVar`` ``update`` per series per
  tick (the loop a river user writes; less work than a score);
- river z-score, equivalent work: per series read ``EWMean.get()`` and ``EWVar.get()``, compute
  the z of the new value, then update both (what the z-score does per column);
- river PageHinkley: ``river.drift.PageHinkley.update`` per series per tick (the changepoint
  detector a river user would reach for).

and, on ``--river-nodes`` nodes of the realistic layout (same rules, same stream generator, same
share of each scorer) x ``--river-ticks`` ticks, "river, same work as the realistic path": a
per-series Python loop where each observed value goes through river's counterpart of every
scorer its rule names: zscore -> ``EWMean`` + ``EWVar`` (get both, z, update both);
changepoint -> ``river.drift.PageHinkley.update``; counts -> an ``EWMean`` of the rate and the
tick's Poisson z ``(k - mu) / sqrt(mu)`` (k = rate x tick, mu = the mean rate x tick);
peers -> per peer group (the GPUs of a node, the nodes of a cohort; at least 3 observed) per tick
the median and MAD of the observed members with Python's ``statistics.median``, then per member
an ``EWMean`` of its deviation ``(x - median) / max(1.4826 MAD, floor)``; health -> ``EWMean``.
Its rate counts columns x ticks like the realistic rows (a column with two scorers once). It is
less than the project does per column (no warm-up, clipping, time-aware decay, habit
baseline, dispersion), so the ratio flatters river, not us.

"river, complete same-work loop" (``river_complete_work``, same layout, data and counting) adds
what that loop leaves out and the project computes for every observed value: the robust
baseline (``_RiverBaseline``: z against a floored sigma, the mean updated by the residual
clipped to 4 sigma, the variance only within 4 sigma, 0 in warm-up) for zscore, for the
changepoint's standardization (clipped, then PageHinkley) and for the log-z health columns (the
other health kinds: one EWMean as their forgetting max or min); counts learn their dispersion
(an EWMean of the Pearson residual, from ordinary ticks only), judge the tick quasi-Poisson by
the Wilson-Hilferty z and clip what the rate learns; peers smooth each member's squared group
sigma (the z is against the larger of the tick's and the smoothed sigma), clip the z, smooth
it, and score its departure from the member's habit (the robust baseline again). Still left
out: time-aware decay (river's fading factors are per update), the gap and late-tick logic,
habituation and the changepoint's re-baselining, all of which the project does. Both loops
are printed: the ratios against the simplified one are the figures earlier sessions quoted.

Rates exclude a warm-up call (numba compiles the kernels on first use); the compile time is
measured separately in a fresh process with an empty numba cache, and the load time from a
filled cache. Figures come from ``--repeats`` interleaved repeats, each running every river
loop and then every project row, of CPU time (``time.process_time``) of this single-threaded
process: a rate is the median over repeats, a ratio the median of each repeat's own ratio
(runs seconds apart, so the machine's drift over minutes cancels out of it).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np
from river import drift, stats

from detector.config.rules import load_signal_rules
from detector.pipeline.tick import ScorerStage
from detector.scorers.base import ColumnLayout, Scorer
from detector.scorers.changepoint import ChangePoint
from detector.scorers.counts import CountBurst
from detector.scorers.health import TelemetryHealth, health_kind
from detector.scorers.kernels.counts_health import KIND_LOGZ
from detector.scorers.peers import PeerDeviation, peer_groups
from detector.scorers.registry import grid_layout
from detector.scorers.zscore import RobustZScore

GPU_SIGNALS = tuple(f"gpu_sig{i}" for i in range(28))
NODE_SIGNALS = (*(f"node_sig{i}" for i in range(12)), "health_up", "health_gpu_count")
NODE_SIGNALS += ("health_scrape_duration", "health_series_missing_fraction")
SCORERS: dict[str, Callable[[], Scorer]] = {
    "zscore": RobustZScore,
    "changepoint": ChangePoint,
    "peers": PeerDeviation,
    "health": TelemetryHealth,
    "counts": CountBurst,
}
TICK_S = 15.0


def cluster_layout(columns: int) -> ColumnLayout:
    """About ``columns`` columns: 8 GPUs x 28 GPU signals + 16 node signals per node."""
    per_node = 8 * len(GPU_SIGNALS) + len(NODE_SIGNALS)
    nodes = max(1, round(columns / per_node))
    return grid_layout(nodes, 8, GPU_SIGNALS, NODE_SIGNALS, cohorts=max(1, nodes // 16))


def rules_layout(columns: int) -> tuple[ColumnLayout, dict[str, np.ndarray]]:
    """About ``columns`` columns laid out as rules/signals.yaml, and per scorer the columns
    whose rule names it."""
    rules = [r for r in load_signal_rules().signals if r.truth is None and r.scorers]
    gpu = tuple(r.name for r in rules if r.entity == "gpu")
    node = tuple(r.name for r in rules if r.entity == "node")
    nodes = max(1, round(columns / (8 * len(gpu) + len(node))))
    dirs = {r.name: {"up": 1, "down": -1}.get(r.direction, 0) for r in rules}
    layout = grid_layout(nodes, 8, gpu, node, cohorts=max(1, nodes // 16), directions=dirs)
    steps = np.array([{r.name: r.resolution for r in rules}[n] for n in layout.signal_names])
    layout = dataclasses.replace(layout, resolution=steps[layout.signal])  # as the rules round
    by_name = {r.name: r.scorers for r in rules}
    names = np.array([by_name[s] for s in layout.signal_names], dtype=object)[layout.signal]
    subsets = {s: np.flatnonzero([s in names_j for names_j in names]) for s in SCORERS}
    return layout, {s: idx for s, idx in subsets.items() if idx.size}


def stream(n: int, ticks: int, counters: np.ndarray | None = None, seed: int = 0) -> np.ndarray:
    """Gauges around 100 with unit noise; ``counters`` columns carry rare-event rates (one
    event per ~3 h per series, in events/s). 5% of all values missing."""
    rng = np.random.default_rng(seed)
    x = 100.0 + rng.normal(size=(ticks, n))
    if counters is not None and counters.size:
        events = rng.poisson(TICK_S / 10_800.0, size=(ticks, counters.size))
        x[:, counters] = events / TICK_S
    x[rng.random(x.shape) < 0.05] = np.nan
    return x


def run_all(scorers: list[Scorer], layout: ColumnLayout, x: np.ndarray) -> float:
    """CPU seconds to push every tick of ``x`` through ``scorers`` (all columns each)."""
    start = time.process_time()
    for i, row in enumerate(x):
        for s in scorers:
            s.update(TICK_S * i, row, layout)
    return time.process_time() - start


def run_routed(
    scorers: dict[str, Scorer],
    subsets: dict[str, tuple[np.ndarray, ColumnLayout]],
    layout: ColumnLayout,
    x: np.ndarray,
    mode: str = "stage",
) -> float:
    """CPU seconds of the realistic path: each scorer on its own columns. ``mode`` "alone":
    the scorers' ``update`` on their columns gathered beforehand; "stage": the pipeline's own
    ``ScorerStage`` on each row of ``x``; "written": the same on a reused buffer the tick's
    row is first copied into (the copy timed too)."""
    if mode == "alone":
        parts = {name: np.ascontiguousarray(x[:, idx]) for name, (idx, _) in subsets.items()}
        start = time.process_time()
        for i in range(x.shape[0]):
            for name, scorer in scorers.items():
                scorer.update(TICK_S * i, parts[name][i], subsets[name][1])
        return time.process_time() - start
    stage = ScorerStage(list(scorers.values()))
    masks = {name: np.isin(np.arange(len(layout)), idx) for name, (idx, _) in subsets.items()}
    stage.set_layout(masks, layout)
    buffer = np.empty(len(layout))
    start = time.process_time()
    for i, row in enumerate(x):
        if mode == "written":
            buffer[:] = row
            row = buffer
        stage.run(TICK_S * i, row)
    return time.process_time() - start


def per_scorer_us(
    scorers: dict[str, Scorer], subsets: dict[str, tuple[np.ndarray, ColumnLayout]], x: np.ndarray
) -> dict[str, float]:
    """Median CPU microseconds a tick of each scorer on its own columns (gathered before the
    clock starts, as in ``run_routed``'s "alone"), the first tick (group building, state
    growth) left out: where the realistic path's time goes."""
    parts = {name: np.ascontiguousarray(x[:, idx]) for name, (idx, _) in subsets.items()}
    spent: dict[str, list[int]] = {name: [] for name in scorers}
    for i in range(x.shape[0]):
        for name, scorer in scorers.items():
            start = time.process_time_ns()
            scorer.update(TICK_S * i, parts[name][i], subsets[name][1])
            spent[name].append(time.process_time_ns() - start)
    return {name: statistics.median(ns[1:]) / 1e3 for name, ns in spent.items()}


class _RiverCase:
    """What both river loops share: ``nodes`` nodes of the realistic layout, its stream, each
    scorer's columns and the peer groups (as ``PeerDeviation`` forms them). The loops' bodies
    stay written out: a helper called per group inside the timing would slow river's side."""

    def __init__(self, nodes: int, ticks: int) -> None:
        self.layout, subsets = rules_layout(nodes * 376)  # 376 columns a node
        self.n = len(self.layout)
        empty = np.zeros(0, dtype=np.int64)
        self.x = stream(self.n, ticks, subsets.get("counts", empty))
        self.cols = {s: subsets.get(s, empty).tolist() for s in SCORERS}
        peer_idx = subsets.get("peers", empty)
        self.groups = [
            peer_idx[row[row >= 0]].tolist()
            for matrix in peer_groups(self.layout.subset(peer_idx), 3)
            for row in matrix
        ]


def river_same_work(nodes: int, ticks: int) -> tuple[int, float]:
    """(columns, CPU seconds) of the river loop doing the realistic path's work per column
    (module docstring) on ``nodes`` nodes of the realistic layout."""
    case = _RiverCase(nodes, ticks)
    n, x, cols, groups = case.n, case.x, case.cols, case.groups
    level = {
        j: (stats.EWMean(fading_factor=0.01), stats.EWVar(fading_factor=0.01))
        for j in cols["zscore"]
    }
    change = {j: drift.PageHinkley() for j in cols["changepoint"]}
    rate = {j: stats.EWMean(fading_factor=0.01) for j in cols["counts"]}
    health = {j: stats.EWMean(fading_factor=0.01) for j in cols["health"]}
    deviation = {j: stats.EWMean(fading_factor=0.1) for j in cols["peers"]}
    out = [0.0] * n
    start = time.process_time()
    for row in x:
        values = row.tolist()
        for j in cols["zscore"]:
            v = values[j]
            if v == v:  # skip NaN like the project does
                m, var = level[j]
                s2 = var.get()
                out[j] = (v - m.get()) / math.sqrt(s2) if s2 > 0.0 else 0.0
                m.update(v)
                var.update(v)
        for j in cols["changepoint"]:
            v = values[j]
            if v == v:
                ph = change[j]
                ph.update(v)
                out[j] = float(ph.drift_detected)
        for j in cols["counts"]:
            v = values[j]
            if v == v:
                mean = rate[j]
                mu = max(mean.get() * TICK_S, 1e-3)
                out[j] = (round(v * TICK_S) - mu) / math.sqrt(mu)
                mean.update(v)
        for j in cols["health"]:
            v = values[j]
            if v == v:
                health[j].update(v)
                out[j] = health[j].get()
        for members in groups:
            seen = [(j, values[j]) for j in members if values[j] == values[j]]
            if len(seen) < 3:
                continue
            vs = [v for _, v in seen]
            med = statistics.median(vs)
            mad = statistics.median([abs(v - med) for v in vs])
            sigma = max(1.4826 * mad, 1e-3 * abs(med) + 1e-6)
            for j, v in seen:
                ew = deviation[j]
                ew.update((v - med) / sigma)
                out[j] = ew.get()
    return n, time.process_time() - start


class _RiverBaseline:
    """The project's robust EW baseline written with river's statistics, as a river user would
    (RobustEWBaseline's work per observation): read the mean and variance, the z against a
    floored sigma, then update the mean by the residual clipped to +-``clip`` sigma and the
    variance only when the point is within ``clip`` (never learn from what is called
    anomalous); 0 until ``warmup`` observations."""

    __slots__ = ("clip", "floor", "mean", "n", "var", "warmup")

    def __init__(self, fading: float, warmup: int, clip: float, floor: float) -> None:
        self.mean, self.var = stats.EWMean(fading_factor=fading), stats.EWVar(fading_factor=fading)
        self.n, self.warmup, self.clip, self.floor = 0, warmup, clip, floor

    def z(self, v: float) -> float:
        m = self.mean.get()
        sigma = math.sqrt(max(self.var.get(), self.floor))
        z = (v - m) / sigma
        warm = self.n >= self.warmup
        if not warm or abs(z) <= self.clip:
            self.var.update(v)
        r = v - m
        self.mean.update(m + (max(-self.clip * sigma, min(self.clip * sigma, r)) if warm else r))
        self.n += 1
        return z if warm else 0.0


def river_complete_work(nodes: int, ticks: int) -> tuple[int, float]:
    """(columns, CPU seconds) of the river loop doing what the project computes per column on
    every tick, on ``nodes`` nodes of the realistic layout: ``river_same_work`` plus the
    parts that loop leaves out (module docstring: "complete same-work loop")."""
    case = _RiverCase(nodes, ticks)
    layout, n, x, cols, groups = case.layout, case.n, case.x, case.cols, case.groups
    level = {j: _RiverBaseline(0.01, 20, 4.0, 1e-6) for j in cols["zscore"]}
    slow = {j: _RiverBaseline(0.001, 30, 4.0, 1e-6) for j in cols["changepoint"]}
    change = {j: drift.PageHinkley() for j in cols["changepoint"]}
    rate = {j: stats.EWMean(fading_factor=0.001) for j in cols["counts"]}
    dispersion = {j: stats.EWMean(fading_factor=0.001) for j in cols["counts"]}
    kind = [health_kind(layout.signal_names[sig]) for sig in layout.signal.tolist()]
    log_z = {j: _RiverBaseline(0.01, 20, 4.0, 1e-6) for j in cols["health"] if kind[j] == KIND_LOGZ}
    memory = {j: stats.EWMean(fading_factor=0.001) for j in cols["health"] if j not in log_z}
    scale = {j: stats.EWMean(fading_factor=0.025) for j in cols["peers"]}
    smooth = {j: stats.EWMean(fading_factor=0.3) for j in cols["peers"]}
    habit = {j: _RiverBaseline(0.001, 20, 4.0, 1.0) for j in cols["peers"]}
    out = [0.0] * n
    start = time.process_time()
    for row in x:
        values = row.tolist()
        for j in cols["zscore"]:
            v = values[j]
            if v == v:
                out[j] = level[j].z(v)
        for j in cols["changepoint"]:
            v = values[j]
            if v == v:
                u = max(-4.0, min(4.0, slow[j].z(v)))
                ph = change[j]
                ph.update(u)
                out[j] = float(ph.drift_detected)
        for j in cols["counts"]:
            v = values[j]
            if v == v:
                mean, phi = rate[j], dispersion[j]
                mu = max(mean.get() * TICK_S, 1e-3)
                k = round(v * TICK_S)
                f = max(phi.get(), 1.0)
                pearson = (k - mu) ** 2 / mu
                kk, mm = k / f, mu / f
                out[j] = (
                    3.0 * math.sqrt(kk) * (1.0 - 1.0 / (9.0 * kk) - (mm / kk) ** (1.0 / 3.0))
                    if kk > 0.0
                    else 0.0
                )
                if pearson <= 16.0 * f:  # learn the dispersion from ordinary ticks only
                    phi.update(pearson)
                mean.update(min(v, (mu + 3.0 * math.sqrt(mu * f) + 1.0) / TICK_S))
        for j in cols["health"]:  # the log-z kind a baseline; up, count, fraction a memory
            v = values[j]
            if v == v:
                if j in log_z:
                    out[j] = log_z[j].z(math.log1p(max(v, 0.0)))
                else:
                    mem = memory[j]
                    mem.update(v)
                    out[j] = min(1.0, abs(v - mem.get()))
        for members in groups:
            seen = [(j, values[j]) for j in members if values[j] == values[j]]
            if len(seen) < 3:
                continue
            vs = [v for _, v in seen]
            med = statistics.median(vs)
            mad = statistics.median([abs(v - med) for v in vs])
            sigma = max(1.4826 * mad, 1e-3 * abs(med) + 1e-6)
            for j, v in seen:
                sv = scale[j]
                sv.update(sigma * sigma)
                z = max(-50.0, min(50.0, (v - med) / max(sigma, math.sqrt(sv.get()))))
                sm = smooth[j]
                sm.update(z)
                out[j] = habit[j].z(sm.get())
    return n, time.process_time() - start


def river_loops(series: int, ticks: int) -> dict[str, float]:
    """CPU seconds of each river per-series loop over the same kind of data."""
    x = stream(series, ticks)
    out: dict[str, float] = {}

    means = [stats.EWMean(fading_factor=0.01) for _ in range(series)]
    variances = [stats.EWVar(fading_factor=0.01) for _ in range(series)]
    start = time.process_time()
    for row in x:
        for j, v in enumerate(row.tolist()):
            if v == v:  # skip NaN like the project does
                means[j].update(v)
                variances[j].update(v)
    out["ew"] = time.process_time() - start

    means = [stats.EWMean(fading_factor=0.01) for _ in range(series)]
    variances = [stats.EWVar(fading_factor=0.01) for _ in range(series)]
    z = [0.0] * series
    start = time.process_time()
    for row in x:
        for j, v in enumerate(row.tolist()):
            if v == v:
                m, var = means[j], variances[j]
                s2 = var.get()
                z[j] = (v - m.get()) / math.sqrt(s2) if s2 > 0.0 else 0.0
                m.update(v)
                var.update(v)
    out["z"] = time.process_time() - start

    detectors = [drift.PageHinkley() for _ in range(series)]
    flags = [False] * series
    start = time.process_time()
    for row in x:
        for j, v in enumerate(row.tolist()):
            if v == v:
                ph = detectors[j]
                ph.update(v)
                flags[j] = ph.drift_detected
    out["ph"] = time.process_time() - start
    return out


_COMPILE_PROBE = """
import time
import numpy as np
from detector.scorers.registry import grid_layout
start = time.perf_counter()
from detector.scorers import changepoint, counts, health, peers, zscore
layout = grid_layout(4, 8, ("a",), ("b", "health_up", "health_scrape_duration"))
x = np.ones(len(layout))
makers = (zscore.RobustZScore, changepoint.ChangePoint, peers.PeerDeviation,
          health.TelemetryHealth, counts.CountBurst)
for make in makers:
    make().update(0.0, x, layout)
print(time.perf_counter() - start)
"""


def compile_seconds() -> tuple[float, float]:
    """Wall seconds for a fresh process to import the scorers and make their first calls:
    with an empty numba cache (compiling every kernel), then with the cache it filled."""
    env = dict(os.environ)
    times = []
    with tempfile.TemporaryDirectory() as cache:
        env["NUMBA_CACHE_DIR"] = cache
        for _ in range(2):
            out = subprocess.run(
                [sys.executable, "-c", _COMPILE_PROBE], env=env, check=True, capture_output=True
            )
            times.append(float(out.stdout.decode().split()[-1]))
    return times[0], times[1]


def state_bytes(scorers: list[Scorer]) -> int:
    return sum(a.nbytes for s in scorers for a in s.state_dict().values())


def river_rates(args: argparse.Namespace) -> tuple[int, dict[str, float]]:
    """One run of every river baseline: the same-work loops' columns, and series-updates per
    CPU second by key."""
    loops = river_loops(args.river_series, args.river_ticks)
    rates = {k: args.river_series * args.river_ticks / sec for k, sec in loops.items()}
    columns = 0
    for key, run in (("full", river_same_work), ("complete", river_complete_work)):
        columns, seconds = run(args.river_nodes, args.river_ticks)
        rates[key] = columns * args.river_ticks / seconds
    return columns, rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--columns", type=int, default=30_000)
    parser.add_argument("--ticks", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--river-series", type=int, default=3_000)
    parser.add_argument("--river-ticks", type=int, default=50)
    parser.add_argument("--river-nodes", type=int, default=8)
    args = parser.parse_args()

    cold, warm = compile_seconds()
    print(f"kernels: first use compiles in {cold:.2f} s (empty cache), {warm:.2f} s from cache")

    layout = cluster_layout(args.columns)
    n = len(layout)
    x = stream(n, args.ticks)
    paths: dict[str, Callable[[], list[Scorer]]] = {
        "zscore": lambda: [RobustZScore()],
        "changepoint": lambda: [ChangePoint()],
        "peers": lambda: [PeerDeviation()],
        "health (2% of columns)": lambda: [TelemetryHealth()],
        "all four on every column": lambda: [
            RobustZScore(),
            ChangePoint(),
            PeerDeviation(),
            TelemetryHealth(),
        ],
    }
    real, subsets = rules_layout(args.columns)
    m = len(real)
    counters = subsets.get("counts", np.zeros(0, dtype=np.int64))
    xr = stream(m, args.ticks, counters)
    routed = {s: (idx, real.subset(idx)) for s, idx in subsets.items()}

    def make_routed() -> dict[str, Scorer]:
        return {s: SCORERS[s]() for s in subsets}

    modes = {
        "realistic: scorers alone": "alone",
        "realistic: pipeline ScorerStage": "stage",
        "realistic: ScorerStage, row just written": "written",
    }
    per_series: dict[str, float] = {}
    for name, make in paths.items():  # warm-up: compile or load the kernels
        scorers = make()
        run_all(scorers, layout, x[:2])
        per_series[name] = state_bytes(scorers) / n
    for mode in modes.values():
        run_routed(make_routed(), routed, real, xr[:2], mode)
    routed_scorers = make_routed()
    run_routed(routed_scorers, routed, real, xr[:2])
    routed_bytes = state_bytes(list(routed_scorers.values())) / m
    per_series.update(dict.fromkeys(modes, routed_bytes))

    # Interleaved: each repeat runs river's loops and then every project row, so a ratio
    # compares runs seconds apart; this machine's speed drifts up to 2x over minutes, which
    # moved ratios of river measured first and the project after by as much.
    river_runs: list[dict[str, float]] = []
    project_runs: list[dict[str, float]] = []
    river_columns = 0
    for _ in range(args.repeats):
        river_columns, river = river_rates(args)
        river_runs.append(river)
        rates = {name: n * args.ticks / run_all(make(), layout, x) for name, make in paths.items()}
        for label, mode in modes.items():
            rates[label] = m * args.ticks / run_routed(make_routed(), routed, real, xr, mode)
        project_runs.append(rates)

    def rate(runs: list[dict[str, float]], key: str) -> float:
        return statistics.median(r[key] for r in runs)

    def ratio(runs: list[dict[str, float]], key: str, base: str) -> float:
        """The median over repeats of the repeat's own ratio to river's ``base`` loop."""
        return statistics.median(r[key] / b[base] for r, b in zip(runs, river_runs, strict=True))

    mix = ", ".join(f"{s} {idx.size / m:.0%}" for s, idx in subsets.items())
    print(
        f"layout: {n} columns ({n // (8 * len(GPU_SIGNALS) + len(NODE_SIGNALS))} nodes x 8 "
        f"GPUs), {args.ticks} ticks, 5% missing; realistic: {m} columns ({mix}); "
        f"river on {args.river_series} series x {args.river_ticks} ticks, same-work loop on "
        f"{river_columns} columns ({args.river_nodes} nodes) x {args.river_ticks} ticks; "
        f"medians of {args.repeats} interleaved repeats (rates: median rate; ratios: median "
        f"of each repeat's ratio)"
    )
    widths = {"ew": 12, "z": 11, "full": 13, "complete": 12}  # ratio columns: river's loops
    head = (
        f"{'path':<42}{'updates/s':>14}{'x river EW':>12}{'x river z':>11}"
        f"{'x same work':>13}{'x complete':>12}{'B/series':>10}"
    )
    print(head)
    labels = {
        "ew": "river EWMean+EWVar, update only",
        "z": "river z-score (get, z, update)",
        "ph": "river PageHinkley",
        "full": "river, same work as the realistic path",
        "complete": "river, complete same-work loop",
    }
    for key, label in labels.items():
        cells = "".join(f"{ratio(river_runs, key, b):>{w}.2f}" for b, w in widths.items())
        print(f"{label:<42}{rate(river_runs, key):>14,.0f}{cells}{'-':>10}")
    for name in project_runs[0]:
        cells = "".join(f"{ratio(project_runs, name, b):>{w}.1f}" for b, w in widths.items())
        print(f"{name:<42}{rate(project_runs, name):>14,.0f}{cells}{per_series[name]:>10.1f}")
    print(f"changepoint vs river PageHinkley: {ratio(project_runs, 'changepoint', 'ph'):.1f}x")
    breakdowns = [per_scorer_us(make_routed(), routed, xr) for _ in range(args.repeats)]
    us = {name: statistics.median(b[name] for b in breakdowns) for name in subsets}
    cells = ", ".join(
        f"{name} {us[name]:.1f} ({subsets[name].size} columns)"
        for name in sorted(us, key=lambda k: -us[k])
    )
    print(
        f"realistic path, median CPU us a tick per scorer (alone, first tick left out; "
        f"median of {args.repeats} runs): {cells}; sum {sum(us.values()):.1f} us, "
        f"{m / sum(us.values()):.0f}M updates/s"
    )


if __name__ == "__main__":
    main()
