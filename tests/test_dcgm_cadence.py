"""dcgm-exporter's collection cadence: a cached (repeated) scrape is no observation, a tick
missing a node's evidence keeps its alert state, and neither hides a real deviant or a frozen
exporter (repeats.py, signals.py, pipeline.py)."""

from __future__ import annotations

import asyncio
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml
from step_clock import StepClock

from detector.config.load import load_config
from detector.config.rules import load_signal_rules
from detector.errors import ConfigError
from detector.loop import TickLoop
from detector.model import Alert, FloatArray, Frame, Labels
from detector.pipeline import build_pipeline
from detector.replay.run import simulated_frames
from detector.series.index import SeriesIndex
from detector.service.daemon import Daemon, run_daemon
from detector.signals.map import SignalMap
from detector.signals.repeats import RepeatedScrapes
from detector.sim import FailureSpec, Scenario, SimulatedCluster, serve

T0 = 1_700_000_000.0
HOUR = 3600.0
GPUS = 8


def dcgm_labels(gpu: int, node: str = "n1") -> Labels:
    return (
        ("Hostname", node),
        ("gpu", str(gpu)),
        ("instance", f"{node}:9400"),
        ("job", "dcgm-exporter"),
    )


def node_labels(node: str = "n1") -> Labels:
    return (("instance", f"{node}:9100"), ("job", "node-exporter"))


class Node:
    """One node's two exporters as series of a SignalMap: per GPU a temperature, a power
    gauge and an energy counter (24 series: a real DCGM page is larger), node-exporter's load,
    and the scraper's ``up`` for the DCGM target."""

    def __init__(self, gpus: int = GPUS) -> None:
        self.index = SeriesIndex()
        self.signals = SignalMap(load_signal_rules(), self.index)
        self.gpus = gpus
        self.temp = [self.index.add("DCGM_FI_DEV_GPU_TEMP", dcgm_labels(g)) for g in range(gpus)]
        self.power = [
            self.index.add("DCGM_FI_DEV_POWER_USAGE", dcgm_labels(g)) for g in range(gpus)
        ]
        self.energy = [
            self.index.add("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", dcgm_labels(g))
            for g in range(gpus)
        ]
        self.load = self.index.add("node_load1", node_labels())
        self.up = self.index.add("up", (("instance", "n1:9400"), ("job", "dcgm-exporter")))
        self.rng = np.random.default_rng(1)
        self.signals.sync()

    def page(self, k: int) -> FloatArray:
        """Tick ``k``'s true values: every gauge moves, the counters advance."""
        v = np.full(len(self.index), np.nan)
        v[self.temp] = np.round(60.0 + self.rng.normal(0, 0.5, self.gpus))  # whole degrees
        v[self.power] = 600.0 + self.rng.normal(0, 10, self.gpus)
        v[self.energy] = 1e6 + 9000.0 * k + np.arange(self.gpus)
        v[self.load] = 40.0 + self.rng.normal(0, 1)
        v[self.up] = 1.0
        return v

    def column(self, signal: str, gpu: str | None) -> int:
        for i in range(len(self.signals)):
            name, _, label, _ = self.signals.column_names(i)
            if name == signal and label == gpu:
                return i
        raise KeyError(signal)


def cached(page: FloatArray, previous: FloatArray, node: Node) -> FloatArray:
    """``page`` with the DCGM series served from ``previous`` (the exporter's cache)."""
    out = page.copy()
    dcgm = node.temp + node.power + node.energy
    out[dcgm] = previous[dcgm]
    return out


def test_a_repeated_dcgm_page_is_no_observation_and_the_next_rate_spans_both_ticks() -> None:
    """A tick whose DCGM page repeats the previous one byte for byte reads as not observed
    (its signals NaN, like a lost scrape), node-exporter and the scraper's ``up`` still count;
    the next fresh page's counter rate is the true average over both intervals, not 2x."""
    node = Node()
    pages = [node.page(k) for k in range(4)]
    pages[2] = cached(pages[2], pages[1], node)
    out = [node.signals.compute(T0 + 15.0 * k, p) for k, p in enumerate(pages)]
    temp, energy = node.column("gpu_temp", "0"), node.column("energy_rate", "0")
    load, up = node.column("node_load", None), node.column("health_up", None)
    assert math.isnan(out[2][temp])
    assert math.isnan(out[2][energy])
    assert not math.isnan(out[2][load])
    assert out[2][up] == 1.0
    assert out[3][temp] == pytest.approx(pages[3][node.temp[0]])
    watts = (pages[3][node.energy[0]] - pages[1][node.energy[0]]) / 30.0 * 1e-3
    assert out[3][energy] == pytest.approx(watts)  # 600 W, not 0 then 1200
    assert out[1][energy] == pytest.approx(watts)
    assert node.signals.repeats is not None
    assert node.signals.repeats.blanked_ticks == 1


def test_a_small_target_that_repeats_is_still_observed() -> None:
    """A target of a few series (quiet counters, constant gauges) may repeat by chance: below
    ``min_series`` its repeated values are observations."""
    node = Node(gpus=2)  # 6 DCGM series
    first = node.page(0)
    node.signals.compute(T0, first)
    again = node.signals.compute(T0 + 15.0, cached(node.page(1), first, node))
    assert not math.isnan(again[node.column("gpu_temp", "0")])


def test_a_frozen_exporter_is_bridged_for_the_hold_then_reported() -> None:
    """An exporter serving one collection for minutes is blanked only while unchanged for up to
    ``hold_s`` (60 s: four 15 s ticks), then its repeated values pass through (zero rates,
    flat gauges) and ``health_targets_frozen_fraction`` reports it: one of the node's two
    exporters frozen, 0.5, back to 0 once its page moves again."""
    node = Node()
    frozen = node.page(0)
    temp = node.column("gpu_temp", "0")
    share = node.column("health_targets_frozen_fraction", None)
    observed, shares = [], []
    for k in range(12):
        page = cached(node.page(k), frozen, node) if 0 < k < 11 else node.page(k)
        if k == 0:
            page = frozen
        out = node.signals.compute(T0 + 15.0 * k, page)
        observed.append(not math.isnan(out[temp]))
        shares.append(out[share])
        assert node.signals.repeats is not None
        if k == 10:
            assert node.signals.repeats.frozen_s(T0 + 150.0).max() == pytest.approx(150.0)
    assert observed == [True, False, False, False, False] + [True] * 7
    assert shares == [0.0] * 5 + [0.5] * 6 + [0.0]


def test_bad_hold_is_a_config_error() -> None:
    """A negative hold or a minimum of no series is refused, naming the parameter."""
    with pytest.raises(ConfigError, match="hold_s"):
        RepeatedScrapes(hold_s=-1.0)
    with pytest.raises(ConfigError, match="min_series"):
        RepeatedScrapes(min_series=0)


# -- the pipeline: one missed tick does not end (or start) an alert ------------------------
def deviant_run(
    pipeline: TickLoop, node: Node, spike: range, missed: set[int], step: float = 15.0
) -> list[Alert]:
    """GPU 3's temperature runs 15 C above its peers' during ``spike`` (ticks); the DCGM page
    is missing on the ``missed`` ticks, node-exporter answers every tick."""
    started = []
    dcgm = node.temp + node.power + node.energy
    for k in range(240):
        page = node.page(k)
        if k in spike:
            page[node.temp[3]] += 15.0
        if k in missed:
            page[dcgm] = np.nan
        started += pipeline.step(Frame(T0 + step * k, page)).started
    return started


def pipeline_for(node: Node, **params: object) -> TickLoop:
    loop = TickLoop.from_config(load_config(None, env={}), node.index)
    scoring = loop.pipeline
    scoring.params = replace(scoring.params, **params)  # type: ignore[arg-type]
    return loop


ODD = set(range(1, 240, 2))


def test_a_deviant_gpu_scraped_every_other_tick_still_alerts() -> None:
    """A GPU deviating for 30 ticks, its exporter answering every other tick (DCGM 30 s,
    node-exporter 15 s): its alert fires; without bridging the ticks that miss its evidence,
    each of them dropped the pending alert and it never fired."""
    node = Node()
    bridged = deviant_run(pipeline_for(node), node, range(150, 180), ODD)
    assert [(a.node, a.gpu) for a in bridged] == [("n1", "3")]
    node = Node()
    unbridged = deviant_run(
        pipeline_for(node, bridge_missed_tick=False), node, range(150, 180), ODD
    )
    assert unbridged == []


def test_a_gpu_that_falls_off_the_bus_alerts_with_its_exporter_answering_every_other_tick() -> None:
    """GPU 3's series vanish for good (fell off the bus) while the DCGM page comes every
    other tick: the node alerts on its GPU count. The GPU count and missing fraction are
    computed, not read from a series; until they counted as observed when they had a value,
    the ticks without a DCGM page were not bridged, their score 0 dropped the pending alert
    each time and it never fired (a robustness seed: XID 79, no precursor, never caught)."""
    node = Node()
    pipeline = pipeline_for(node)
    dcgm = node.temp + node.power + node.energy
    gone = [node.temp[3], node.power[3], node.energy[3]]
    started = []
    for k in range(240):
        page = node.page(k)
        if k >= 150:
            page[gone] = np.nan
        if k in ODD:
            page[dcgm] = np.nan
        started += pipeline.step(Frame(T0 + 15.0 * k, page)).started
    assert [a.node for a in started] == ["n1"]
    assert started[0].signals[0] in {"health_gpu_count", "health_series_missing_fraction"}
    assert started[0].start <= T0 + 15.0 * 150 + 120.0


def test_a_deviant_gpu_keeps_its_alert_through_a_lost_scrape() -> None:
    """A firing GPU alert goes on through a lost DCGM scrape (one alert, not two)."""
    node = Node()
    alerts = deviant_run(pipeline_for(node), node, range(100, 200), {150}, step=30.0)
    assert [(a.node, a.gpu) for a in alerts] == [("n1", "3")]


def test_a_frozen_dcgm_exporter_alerts_as_telemetry_health() -> None:
    """A hung DCGM serving one page for ten minutes raises an alert led by the freeze."""
    node = Node()
    pipeline = pipeline_for(node)
    started = []
    frozen = None
    for k in range(160):
        page = node.page(k)
        if k >= 120:
            frozen = page if frozen is None else frozen
            page = cached(page, frozen, node)
        started += pipeline.step(Frame(T0 + 15.0 * k, page)).started
    assert [a.signals[0] for a in started] == ["health_targets_frozen_fraction"]
    assert started[0].start <= T0 + 15.0 * 120 + 180.0


def test_a_one_tick_spike_before_a_lost_scrape_does_not_alert() -> None:
    """A spike seen on one 30 s tick, then a lost scrape, then a normal tick back from the gap:
    no alert. The bridged tick and the tick back from the gap are no evidence of their own
    (a peer score carried over the gap had made the spike last the minimum duration)."""
    node = Node()
    assert deviant_run(pipeline_for(node), node, range(150, 151), {151}, step=30.0) == []


# -- the simulated cluster: cached DCGM scrapes change no alert ------------------------------
def alerts_of(scenario: Scenario) -> list[tuple[str, tuple[str, ...]]]:
    cluster = SimulatedCluster(scenario)
    index = SeriesIndex()
    pipeline = TickLoop.from_config(load_config(None, env={}), index)
    return [
        (a.node, a.signals)
        for frame in simulated_frames(cluster, index)
        for a in pipeline.step(frame).started
    ]


CLUSTER = Scenario(nodes=8, days=0.5, seed=3, dcgm_fields="all", failure_count=0)


@pytest.mark.parametrize(
    "cadence",
    [{"step_s": 15.0, "dcgm_collect_every": 2}, {"step_s": 30.0, "dcgm_stale_share": 0.1}],
    ids=["collect 30 s scraped 15 s", "10% scraped before collection"],
)
def test_a_cached_dcgm_exporter_raises_the_alerts_of_a_fresh_one(cadence: dict[str, float]) -> None:
    """The same healthy cluster alerts alike (the 8-node cluster's own node-level alerts)
    whether dcgm-exporter is read at scrape time or served from its cache."""
    fresh = replace(CLUSTER, step_s=cadence["step_s"])
    assert alerts_of(replace(fresh, **cadence)) == alerts_of(fresh)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "cadence",
    [{"step_s": 15.0, "dcgm_collect_every": 2}, {"dcgm_stale_share": 0.1}],
    ids=["collect 30 s scraped 15 s", "10% scraped before collection"],
)
def test_a_failing_gpu_next_to_cached_scrapes_is_caught_before_its_xid(
    cadence: dict[str, float],
) -> None:
    """An ECC failure's single-bit error surge still alerts before the XID when the node's
    DCGM pages are cached between collections."""
    spec = FailureSpec("ecc", node=1, gpu=3, at_s=3 * HOUR, lead_s=1800.0, xid=95)
    scenario = replace(CLUSTER, days=0.25, failures=(spec,), xid45_on_teardown=False, **cadence)
    cluster = SimulatedCluster(scenario)
    index = SeriesIndex()
    pipeline = TickLoop.from_config(load_config(None, env={}), index)
    first = None
    for frame in simulated_frames(cluster, index):
        for alert in pipeline.step(frame).started:
            if alert.node == "node-02" and first is None:
                first = alert
    assert first is not None
    assert first.start < scenario.start + spec.at_s
    assert first.gpu == "3"


async def test_the_live_daemon_does_not_observe_a_cached_page(tmp_path: Path) -> None:
    """The daemon, scraping the simulator's live exporters (dcgm-exporter collecting every
    other 30 s step, a step per tick on a step clock), runs the same rule: cached pages are
    blanked."""
    scenario = Scenario(
        nodes=2, gpus=2, days=0.1, fault_trace=None, noisy_nodes=0, seed=1, failure_count=0,
        dcgm_collect_every=2,
    )  # fmt: skip
    speed = 200.0
    step = StepClock()  # one 30 s simulated step per tick, however slow the machine
    running = serve(scenario, port=0, speed=speed, clock=step)
    static = [
        {"url": url, "node": node, "kind": kind}
        for node, (dcgm, node_exp) in running.urls.items()
        for url, kind in ((dcgm, "dcgm"), (node_exp, "node"))
    ]
    doc = {
        "targets": {"static": static},
        "scrape": {"interval_s": 0.15, "timeout_s": 0.12, "jitter_fraction": 0.0},
        "state": {"path": str(tmp_path / "state.npz"), "save_interval_s": 60},
        "kmsg": {"enabled": False},
        "logging": {"level": "warning"},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc))
    stop = asyncio.Event()
    seen: list[Daemon] = []

    def on_tick(daemon: Daemon, tick: object) -> None:
        seen[:] = [daemon]
        step.advance(0.15)
        if daemon.stats.ticks >= 16:
            stop.set()

    try:
        await asyncio.wait_for(
            run_daemon(
                load_config(path, env={}),
                clock=step.scaled(scenario.start, speed),
                stop=stop,
                on_tick=on_tick,
                handle_signals=False,
                port=0,
            ),
            300.0,  # 16 ticks take seconds; this only turns a hang into a failure
        )
    finally:
        running.close()
    repeats = seen[0].pipeline.signal_map.repeats
    assert repeats is not None
    assert len(repeats) == 4  # two nodes: GPU series (dcgm) and node-level ones (node-exporter)
    assert repeats.blanked_ticks >= 4


def test_repeat_hold_comes_from_the_config(tmp_path: Path) -> None:
    """scoring.repeat_hold_s sets how long a repeated page is no observation; null turns the
    repeat detector off; a negative hold is rejected naming the field."""
    path = tmp_path / "c.yaml"
    path.write_text("scoring:\n  repeat_hold_s: 120\n")
    longer = build_pipeline(load_config(path, env={}), SeriesIndex())
    assert longer.signal_map.repeats is not None
    assert longer.signal_map.repeats.hold_s == 120.0
    path.write_text("scoring:\n  repeat_hold_s: null\n")
    assert build_pipeline(load_config(path, env={}), SeriesIndex()).signal_map.repeats is None
    path.write_text("scoring:\n  repeat_hold_s: -1\n")
    with pytest.raises(ConfigError, match="repeat_hold_s"):
        load_config(path, env={})
