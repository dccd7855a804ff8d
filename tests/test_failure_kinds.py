"""Each failure kind is caught by the scorer meant for it, through the production pipeline,
while noise and common-mode moves raise nothing.

A small cluster (6 nodes x 4 GPUs, 30 s ticks, ~3 h) of real DCGM metric names with noise:
GPU temperature and power (workload gauges, scored against peers), the volatile SBE counter
and PCIe replay counter (rare-event counters, Poisson bursts), the power-violation counter
(throttling: peers and bursts; the job throttles at the crest of every load wave, on every node
at once), row-remap pending (a state level, z-score/changepoint) and scrape health (`up`).
Each test plants one kind on node 2, GPU 1 (or all of node 2's GPUs) and checks who alerts and
on what evidence.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from detector.config.load import load_config
from detector.loop import TickLoop
from detector.model import Alert, FloatArray, Frame
from detector.series.index import SeriesIndex

T0 = 1_700_000_000.0
STEP = 30.0
TICKS = 400
PLANT = 300  # after every warm-up (the counts scorer learns for an hour)
NODES, GPUS = 6, 4
GAUGES = {
    "temp": "DCGM_FI_DEV_GPU_TEMP",
    "power": "DCGM_FI_DEV_POWER_USAGE",
    "remap": "DCGM_FI_DEV_ROW_REMAP_PENDING",
}
COUNTERS = {"sbe": "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "replay": "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"}
VIOLATION = {"viol": "DCGM_FI_DEV_POWER_VIOLATION"}  # ns throttled by the power limit
Plant = Callable[[int, dict[str, FloatArray]], None]  # (tick, arrays nodes x gpus) in place


def run(plant: Plant | None = None, gpus: int = GPUS) -> list[Alert]:
    """All alerts (started) over the run; the plant edits the nodes x GPUs value arrays."""
    index = SeriesIndex()
    columns: dict[tuple[str, int, int], int] = {}
    for node in range(NODES):
        for gpu in range(gpus):
            labels = (("Hostname", f"node{node}"), ("gpu", str(gpu)), ("UUID", f"GPU-{node}{gpu}"))
            for key, metric in {**GAUGES, **COUNTERS, **VIOLATION}.items():
                columns[(key, node, gpu)] = index.add(metric, labels)
        columns[("up", node, -1)] = index.add("up", (("instance", f"node{node}:9400"),))
    pipeline = TickLoop.from_config(load_config(None, env={}), index)
    rng = np.random.default_rng(0)
    counts = {key: np.zeros((NODES, gpus)) for key in COUNTERS}
    throttled = np.zeros((NODES, gpus))
    throttle_rng = np.random.default_rng(1)  # its own stream: the others' draws stay as they were
    alerts: list[Alert] = []
    for k in range(TICKS):
        # synchronous training: every GPU follows the job's load; a 20-minute wave
        load = 0.8 + 0.2 * np.sin(2 * np.pi * k / 40.0)
        arrays = {
            "temp": 45 + 30 * load + rng.normal(0, 0.5, (NODES, gpus)),
            "power": 300 + 600 * load + rng.normal(0, 8, (NODES, gpus)),
            "remap": np.zeros((NODES, gpus)),
            "up": np.ones((NODES, gpus)),
        }
        for key in COUNTERS:
            counts[key] += rng.poisson(0.002, (NODES, gpus))  # a rare healthy error now and then
            arrays[key] = counts[key]
        # at the crest of the wave the whole job runs at its power cap: ~5% of the time throttled
        crest = load > 0.95
        jitter = throttle_rng.uniform(0, 0.01 * crest, (NODES, gpus))
        arrays["viol"] = STEP * 1e9 * (0.05 * crest + jitter)
        if plant is not None:
            plant(k, arrays)
        throttled += arrays["viol"]
        arrays["viol"] = throttled.copy()
        values = np.full(len(index), np.nan)
        for (key, node, gpu), col in columns.items():
            values[col] = arrays[key][node, max(gpu, 0)]
        alerts.extend(pipeline.step(Frame(T0 + STEP * k, values)).started)
    return alerts


def only_alert(alerts: list[Alert]) -> Alert:
    assert [("node2", "1")] == [(a.node, a.gpu) for a in alerts]
    return alerts[0]


def test_noise_alone_raises_nothing() -> None:
    """Three hours of synchronous load swings and noise, rare healthy SBEs: no alert."""
    assert [] == run()


def test_common_mode_move_raises_nothing() -> None:
    """Every GPU of every node heats 15 C at once (a cooling-loop event, a new job): no alert."""

    def plant(k: int, a: dict[str, FloatArray]) -> None:
        if k >= PLANT:
            a["temp"] += 15.0
            a["power"] += 100.0

    assert [] == run(plant)


def test_job_wide_throttling_raises_nothing() -> None:
    """The whole job hits its power cap harder (every GPU of every node throttled half the
    time, a power-capping policy change): common mode, no alert."""

    def plant(k: int, a: dict[str, FloatArray]) -> None:
        if k >= PLANT:
            a["viol"] += STEP * 1e9 * 0.5

    assert [] == run(plant)


def test_node_wide_throttling_is_caught() -> None:
    """A failing PSU throttles every GPU of one 8-GPU node (rising to half the time): its GPUs
    still agree with each other, so peers see nothing; the bursts against the counter's own
    rate do, on all eight at once."""

    def plant(k: int, a: dict[str, FloatArray]) -> None:
        if k >= PLANT:
            a["viol"][2] += STEP * 1e9 * min(0.8, 0.05 * (k - PLANT))

    alerts = run(plant, gpus=8)
    assert ["node2"] == [a.node for a in alerts]
    assert "power_violation" == alerts[0].signals[0]


def test_level_shift_of_a_state_level_is_caught() -> None:
    """A row remap goes pending (0 -> 1) on one GPU: the state-level scorers catch it."""

    def plant(k: int, a: dict[str, FloatArray]) -> None:
        if k >= PLANT:
            a["remap"][2, 1] = 1.0

    assert "row_remap_pending" == only_alert(run(plant)).signals[0]


def test_slow_drift_against_peers_is_caught() -> None:
    """One GPU drifts 0.15 C per tick (4.5 C in 15 min) while its peers follow the load."""

    def plant(k: int, a: dict[str, FloatArray]) -> None:
        if k >= PLANT:
            a["temp"][2, 1] += 0.15 * (k - PLANT)

    alert = only_alert(run(plant))
    assert "gpu_temp" == alert.signals[0]
    assert alert.start < T0 + STEP * (PLANT + 60)


def test_rate_burst_of_an_error_counter_is_caught() -> None:
    """30 single-bit ECC errors in two minutes on a GPU that sees one a day."""

    def plant(k: int, a: dict[str, FloatArray]) -> None:
        if k >= PLANT:
            a["sbe"][2, 1] += 7.5 * min(k - PLANT, 4)

    assert "ecc_sbe_volatile" == only_alert(run(plant)).signals[0]


def test_lone_peer_deviant_is_caught() -> None:
    """One GPU's power falls to idle while its peers keep working (a hung or throttled GPU)."""

    def plant(k: int, a: dict[str, FloatArray]) -> None:
        if k >= PLANT:
            a["power"][2, 1] = 300.0 + np.random.default_rng(k).normal(0, 8)

    assert "power_usage" == only_alert(run(plant)).signals[0]


@pytest.mark.parametrize("what", ["gpu", "exporter"])
def test_vanished_telemetry_is_caught(what: str) -> None:
    """A GPU falls off the bus (its series vanish, its neighbours still report), or the node's
    exporter goes down (up = 0): telemetry health catches it."""

    def plant(k: int, a: dict[str, FloatArray]) -> None:
        if k >= PLANT:
            if what == "gpu":
                for key in a:
                    if key != "up":
                        a[key][2, 1] = np.nan
            else:
                a["up"][2, :] = 0.0

    alerts = run(plant)
    assert ["node2"] == [a.node for a in alerts]
    expected = (
        {"health_series_missing_fraction", "health_gpu_count"} if what == "gpu" else {"health_up"}
    )
    assert alerts[0].signals[0] in expected


def test_evidence_names_the_planted_column() -> None:
    """Pipeline.evidence lists what drives a node's score: the drifting GPU's temperature."""
    index = SeriesIndex()
    pipeline = TickLoop.from_config(load_config(None, env={}), index)
    labels = [(("Hostname", "n1"), ("gpu", str(g))) for g in range(4)]
    cols = [index.add("DCGM_FI_DEV_GPU_TEMP", lab) for lab in labels]
    rng = np.random.default_rng(1)
    tick = None
    for k in range(120):
        values = np.full(len(index), np.nan)
        values[cols] = 60 + rng.normal(0, 0.5, 4)
        if k >= 100:
            values[cols[2]] += 20.0
        tick = pipeline.step(Frame(T0 + STEP * k, values))
    assert tick is not None
    found = pipeline.pipeline.evidence(tick.scores)
    assert [("n1", "2", "gpu_temp")] == [(e.node, e.gpu, e.signal) for e in found]
    assert found[0].score > 3.0
