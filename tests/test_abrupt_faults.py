"""Abrupt faults alert fast, live: the daemon in-process against the simulator's exporters on a
step clock (tests/step_clock.py: one 30 s simulated step per tick, moved after each tick), with
a fake Alertmanager stamping arrivals on the same clock. The alert threshold is out of reach
(0.99) and the minimum duration is the default's, so only definitive evidence can alert:

- node-01's GPU 2 falls off the bus at 600 s (XID 79 with no precursor: its series vanish, its
  XID gauge with them, no kernel log): Alertmanager has its critical alert within two scrape
  intervals;
- node-02's exporter is down (connections closed) from 300 s to 450 s;
- node-03's exporter times out (answers after the scrape timeout) from 300 s to 450 s;
- node-04's exporter restarts at 480 s: down for two scrapes, then back with every counter
  restarted from 0;
none of which is a vanished GPU: no alert for them.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from chaos.alertmanager import FakeAlertmanager, parse_time
from chaos.harness import config, quiet_scenario
from chaos.servers import ChaosFarm
from step_clock import StepClock

from detector.loop import LoopTick
from detector.service.daemon import Daemon, run_daemon
from detector.sim import FailureSpec, serve

SPEED = 100.0
TICK_S = 0.3  # scrape.interval_s: 30 simulated seconds a tick
INTERVAL = TICK_S * SPEED
FAULT = 600.0
HANG_GUARD_S = 300.0  # the run takes ~10 s; this only turns a hang into a failure
END = 900.0
RESET_EVERY = 1000  # node-04's counters restart at its 1000th answer: when the test says


async def test_a_gpu_off_the_bus_reaches_alertmanager_within_two_intervals_and_outages_do_not(
    tmp_path: Path,
) -> None:
    """The module docstring's timeline: one alert, node-01's, critical, naming GPU 2 and the
    GPU count, received within two scrape intervals of the fault; none for the outages."""
    scenario = quiet_scenario(
        nodes=4,
        gpus=4,
        failures=(FailureSpec("pcie", node=0, gpu=2, at_s=FAULT, lead_s=0.0, xid=79),),
        repair_cap_s=3600.0,
    )
    step = StepClock()
    exporters = serve(scenario, port=0, speed=SPEED, clock=step)
    clock = step.scaled(scenario.start, SPEED)
    farm = ChaosFarm(slow_s=1.0, reset_every=RESET_EVERY)
    am = FakeAlertmanager(clock=clock).up()
    started: list[tuple[str, str | None, float]] = []
    try:
        pages = {node: dcgm for node, (dcgm, _) in exporters.urls.items()}
        down = farm.add("proxy", pages["node-02"])
        slow = farm.add("proxy", pages["node-03"])
        restarting = farm.add("counter_reset", pages["node-04"])
        urls = {"node-01": pages["node-01"], "node-02": down.url, "node-03": slow.url}
        urls["node-04"] = restarting.url
        targets = [{"url": url, "node": node, "kind": "dcgm"} for node, url in urls.items()]
        cfg = config(
            tmp_path / "config.yaml",
            targets,
            scrape={"interval_s": TICK_S, "timeout_s": 0.2},
            alerts={
                "threshold": 0.99,
                "min_duration_s": 60,
                "min_observations": 3,
                "alertmanager_urls": [am.url],
            },
        )
        timeline = [
            (300.0, lambda: setattr(down, "down", True)),
            (300.0, lambda: setattr(slow, "kind", "slow")),
            (450.0, lambda: setattr(down, "down", False)),
            (450.0, lambda: setattr(slow, "kind", "proxy")),
            (480.0, lambda: setattr(restarting, "down", True)),
            (540.0, lambda: setattr(restarting, "down", False)),
            # its next answer restarts every counter from 0
            (540.0, lambda: setattr(restarting, "requests", RESET_EVERY - 1)),
        ]
        stop = asyncio.Event()

        def on_tick(daemon: Daemon, tick: LoopTick) -> None:
            started.extend((a.node, a.gpu, a.start - scenario.start) for a in tick.started)
            step.advance(TICK_S)
            now = clock() - scenario.start
            while timeline and timeline[0][0] <= now:
                timeline.pop(0)[1]()
            if now > END:
                stop.set()

        await asyncio.wait_for(
            run_daemon(cfg, clock=clock, stop=stop, on_tick=on_tick, handle_signals=False, port=0),
            HANG_GUARD_S,
        )
    finally:
        am.down()
        farm.close()
        exporters.close()
    [(node, gpu, start)] = started
    assert ("node-01", "2") == (node, gpu)
    # the second tick in a row that shows it (signals/map.py CONFIRM_TICKS): two intervals
    assert FAULT < start <= FAULT + 2 * INTERVAL
    firing = [r for r in am.received if r.labels.get("alertname") == "GPUFailureSuspected"]
    assert {"node-01"} == {r.labels["node"] for r in firing}
    first = min(firing, key=lambda r: r.arrived)
    assert {"severity": "critical", "gpu": "2", "signal": "health_gpu_count"}.items() <= (
        first.labels.items()
    )
    assert first.arrived - scenario.start <= FAULT + 2 * INTERVAL
    assert start == parse_time(first.starts_at) - scenario.start
