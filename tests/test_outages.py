"""Outages survived by the live daemon (in-process, simulator and daemon on one step clock,
tests/step_clock.py: one 30 s simulated step per 0.3 s tick, moved after each tick, so the
run is the same on a loaded machine), all in one run so the scenario reads as a timeline in
simulated seconds:

- Alertmanager down from 150 s to 750 s (10 minutes); a planted XID on node-01 at 300 s
  fires and resolves inside the outage, one on node-02 at 600 s fires inside it and resolves
  after it. Every episode must reach Alertmanager in its latest state: node-01 resolved,
  node-02 firing then resolved.
- A target that never answers (node-dead) and node-04's exporter dead from 300 s to 600 s.
- The state file on a 4 KiB tmpfs (disk full) until it is grown to 8 MiB at 450 s.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from chaos.alertmanager import FakeAlertmanager, parse_time
from chaos.harness import config, free_port, quiet_scenario, restored_logging
from chaos.servers import ChaosFarm
from step_clock import StepClock

from detector.logs import configure_logging
from detector.loop import LoopTick as TickResult
from detector.service.daemon import Daemon, run_daemon
from detector.sim import FailureSpec, serve

SPEED = 100.0
TICK_S = 0.3  # scrape.interval_s: the step clock moves this much (30 simulated s) a tick
HANG_GUARD_S = 300.0  # the run takes ~15 s; this only turns a hang into a failure
AM_DOWN, AM_UP = 150.0, 750.0
TARGET_DOWN, TARGET_UP = 300.0, 600.0
DISK_GROWN = 450.0
END = 1100.0


@dataclass
class OutageRun:
    started: list[tuple[str, float]] = field(default_factory=list)  # (node, start)
    ended: list[tuple[str, float]] = field(default_factory=list)
    up: dict[str, list[tuple[float, bool]]] = field(default_factory=dict)  # node -> (t, up)
    node04_scored: list[tuple[float, bool]] = field(default_factory=list)
    saves: list[tuple[float, int, int]] = field(default_factory=list)  # (t, saves, errors)
    ticks: int = 0
    overruns: int = 0
    failed_requests: int = 0
    alerts: list[tuple[str, str | None, tuple[str, ...]]] = field(default_factory=list)
    am: FakeAlertmanager | None = None
    start: float = 0.0  # the scenario's start (simulated unix time)
    log: str = ""
    leftovers: list[str] = field(default_factory=list)


class Timeline:
    """Runs each action once the simulated clock has passed its time: ``catch_up(t)`` between
    two ticks (the step clock stands still meanwhile, so the next tick sees every action due;
    the fakes' shutdown blocks the loop for a moment, which costs no simulated time)."""

    def __init__(self, actions: list[tuple[float, Callable[[], object]]]):
        self.actions = sorted(actions, key=lambda a: a[0])

    @property
    def done(self) -> bool:
        return not self.actions

    def catch_up(self, t: float) -> None:
        while self.actions and self.actions[0][0] <= t:
            self.actions.pop(0)[1]()


def mount_tmpfs(path: Path, size: str) -> None:
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)


async def run_outage(tmp: Path, log: Path) -> OutageRun:
    """The timeline of the module docstring, once (needs root for the tmpfs)."""
    scenario = quiet_scenario(
        nodes=4,
        gpus=2,
        failures=(
            FailureSpec("gsp", node=0, gpu=0, at_s=300.0, lead_s=0.0, xid=119),
            FailureSpec("gsp", node=1, gpu=1, at_s=600.0, lead_s=0.0, xid=119),
        ),
        repair_cap_s=1200.0,
    )
    disk = tmp / "disk"
    disk.mkdir()
    mount_tmpfs(disk, "4k")
    step = StepClock()
    exporters = serve(scenario, port=0, speed=SPEED, clock=step)
    clock = step.scaled(scenario.start, SPEED)
    farm = ChaosFarm()
    am = FakeAlertmanager(clock=clock).up()
    run = OutageRun(am=am, start=scenario.start)
    timeline: Timeline | None = None
    try:
        targets = [{"url": u, "node": n, "kind": "dcgm"} for n, (u, _) in exporters.urls.items()]
        node04 = farm.add("proxy", exporters.urls["node-04"][0])
        targets[3]["url"] = node04.url
        dead = f"http://127.0.0.1:{free_port()}/metrics"  # nothing listens there
        targets.append({"url": dead, "node": "node-dead", "kind": "dcgm"})
        cfg = config(
            tmp / "outage.yaml",
            targets,
            scrape={"interval_s": TICK_S, "timeout_s": 0.2},
            # Resends every 60 simulated s (2 ticks) also wake the delivery loop, whose retry
            # waits are clock seconds taken as wall seconds (the same thing outside tests).
            alerts={"threshold": 0.99, "alertmanager_urls": [am.url], "resend_interval_s": 60},
            state={"path": str(disk / "state.npz"), "save_interval_s": 0.3},
            logging={"level": "info", "format": "json"},
        )

        def grow_disk() -> None:
            subprocess.run(["mount", "-o", "remount,size=8m", str(disk)], check=True)

        def set_down(value: bool) -> Callable[[], None]:
            return lambda: setattr(node04, "down", value)

        timeline = Timeline(
            [
                (AM_DOWN, am.down),
                (AM_UP, am.up),
                (TARGET_DOWN, set_down(True)),
                (TARGET_UP, set_down(False)),
                (DISK_GROWN, grow_disk),
            ],
        )
        stop = asyncio.Event()

        def on_tick(daemon: Daemon, tick: TickResult) -> None:
            step.advance(TICK_S)
            assert timeline is not None
            timeline.catch_up(clock() - scenario.start)
            t = tick.time - scenario.start
            run.started.extend((a.node, a.start) for a in tick.started)
            run.alerts.extend((a.node, a.gpu, a.signals) for a in tick.started)
            run.ended.extend((a.node, a.start) for a in tick.ended)
            assert daemon.last_round is not None
            for result in daemon.last_round.targets:
                run.up.setdefault(result.target.node, []).append((t, result.up))
            scores = dict(zip(tick.node_names, tick.node_score.tolist(), strict=True))
            run.node04_scored.append((t, not np.isnan(scores.get("node-04", np.nan))))
            run.saves.append((t, daemon.stats.state_saves, daemon.stats.state_save_errors))
            resolved = am.resolved(node="node-02")
            if t > END and resolved and timeline.done:
                stats = daemon.alerts.stats(daemon.loop.policy).alertmanagers[am.url]
                run.failed_requests = stats.failed_requests
                run.ticks, run.overruns = daemon.stats.ticks, daemon.stats.overruns
                stop.set()

        with log.open("w") as stream, restored_logging():
            configure_logging("info", "json", stream)
            await asyncio.wait_for(
                run_daemon(
                    cfg, clock=clock, stop=stop, on_tick=on_tick, handle_signals=False, port=0
                ),
                HANG_GUARD_S,
            )
        run.log = log.read_text()
        run.leftovers = [p.name for p in disk.iterdir() if p.name != "state.npz"]
    finally:
        am.down()
        farm.close()
        exporters.close()
        subprocess.run(["umount", str(disk)], check=False)
    return run


@pytest.fixture(scope="module")
def outage(tmp_path_factory: pytest.TempPathFactory) -> OutageRun:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs (disk full) needs root; CI runs as root")
    tmp = tmp_path_factory.mktemp("outage")
    return asyncio.run(run_outage(tmp, tmp / "daemon.log"))


def test_alerts_raised_during_an_alertmanager_outage_all_arrive_after_it(
    outage: OutageRun,
) -> None:
    """10 minutes without Alertmanager: every episode started meanwhile arrives once it is
    back, in its latest state (node-01 already resolved, node-02 firing), and node-02's
    resolve follows; nothing arrived while it was down, and deliveries were retried."""
    am = outage.am
    assert am is not None
    start = outage.start
    during = [a for a in am.alerts() if AM_DOWN < a.arrived - start < AM_UP]
    assert [] == during
    assert {n for n, _ in outage.started} == {"node-01", "node-02"}
    for node, began in outage.started:
        episodes = am.episodes(am.alerts(node=node))
        assert [1] == [len(s) for s in episodes.values()], episodes  # one alert, one episode
        [starts] = episodes.values()
        assert abs(parse_time(next(iter(starts))) - began) < 1e-3
    node01 = am.alerts(node="node-01")
    assert node01[-1] in am.resolved(node="node-01")  # its latest state: resolved
    assert all(a.arrived - start >= AM_UP for a in node01)  # it all waited for the outage
    node02 = am.alerts(node="node-02")
    assert node02[0] in am.firing(node="node-02")
    assert node02[-1] in am.resolved(node="node-02")
    assert outage.failed_requests >= 2


def test_a_dead_target_and_a_returning_one_cost_only_their_own_scrapes(
    outage: OutageRun,
) -> None:
    """node-dead is down on every tick and node-04 exactly while its exporter is dead; node-04
    is scored again once it is back; neither raises a GPU failure alert."""
    assert {False} == {up for _, up in outage.up["node-dead"]}
    node04 = outage.up["node-04"]
    assert {False} == {up for t, up in node04 if TARGET_DOWN + 40 < t < TARGET_UP - 10}
    # Alive before and after (a loaded machine may time out the odd scrape).
    before = [up for t, up in node04 if t < TARGET_DOWN - 10]
    after = [up for t, up in node04 if t > TARGET_UP + 40]
    assert sum(before) > len(before) / 2, before
    assert sum(after) > len(after) / 2, after
    assert any(scored for t, scored in outage.node04_scored if t > TARGET_UP + 40)
    assert [] == [a for a in outage.alerts if a[0] in ("node-dead", "node-04")]
    for node in ("node-01", "node-02", "node-03"):  # the others' scrapes were not held up
        ups = [up for _, up in outage.up[node]]
        assert sum(ups) > len(ups) / 2, (node, ups)


def test_disk_full_state_saves_are_logged_counted_and_resume(outage: OutageRun) -> None:
    """A state file that does not fit (4 KiB tmpfs): each save fails, is counted and logged,
    leaves no temporary file; ticks go on; once there is room, saves succeed again."""
    full = [(t, s, e) for t, s, e in outage.saves if t < DISK_GROWN - 10]
    assert full
    assert (0, True) == (full[-1][1], full[-1][2] >= 2)  # failing, counted, still ticking
    later = [(t, s, e) for t, s, e in outage.saves if t > DISK_GROWN + 30]
    assert later
    assert later[-1][1] >= 2  # room again: saved
    assert "state not saved, will retry" in outage.log
    assert "No space left on device" in outage.log
    assert [] == outage.leftovers
