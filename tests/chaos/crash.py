"""The kill -9 loop shared by tests/test_crash_restart.py and bench/chaos_bench.py.

A small simulated cluster (4 nodes x 2 GPUs) with two planted XID 119 failures (node-02 at
1500 s, node-03 at 2400 s); the daemon's real entry point in a subprocess is started,
SIGKILLed at seeded random simulated times (at a random moment of the tick: mid-scrape,
mid-save or asleep), and restarted: one kill before the alerts, one inside each, one after the
last resolve, and ``kills - 4`` more anywhere; a last run then lives until both alerts
resolved.

Clock: the cluster's process and the daemon's share a ``SharedStepClock`` (tests/step_clock.py)
that the daemon moves one scrape interval (1 s, i.e. one 30 s simulated step at SPEED) after
each tick; while the daemon is down the loop moves it a seeded number of intervals (the time a
crash loses). A loaded machine slows the loop down but changes nothing the daemon sees: on a
wall clock a slow restart once let the cluster run past a planted failure unseen.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from step_clock import SharedStepClock

from detector.service.state import load_state

from .alertmanager import FakeAlertmanager
from .cluster_process import ClusterProcess
from .daemon_process import DaemonProcess
from .harness import listen_url, write_config

SPEED = 30.0  # one 30 s simulated step per 1 s tick
# The daemon's scrape interval (wall seconds between ticks; clock steps) and timeout: the step
# clock makes the interval's length free, and a long timeout keeps a loaded machine's slow
# pages from failing whole scrape rounds (a restarted run whose only tick scraped nothing
# scored nothing: its observation count stood still, which the test reads as a re-warm).
INTERVAL_S, TIMEOUT_S = 1.0, 0.9
MIN_TICKS_A_RUN = 2  # a run lives at least this many ticks before its kill
# Simulated seconds after the start in which one kill each is drawn (seeded): before the first
# XID, inside each alert (the XID holds it firing for alerts.xid_hold_s = 300 s; the window
# leaves it 3 ticks to reach Alertmanager), and after the second alert resolved.
KILL_WINDOWS = ((300.0, 1400.0), (1590.0, 1770.0), (2490.0, 2670.0), (2900.0, 3300.0))
TICKS_DOWN = (0, 3)  # clock steps the cluster moves on while the daemon is down (seeded)
FAILURES = [
    {"alertname": "GPUFailureSuspected", "node": "node-02"},
    {"alertname": "GPUFailureSuspected", "node": "node-03"},
]


# Every wait is a guard against a hang, not a timing assertion: it returns as soon as its
# condition holds. The daemon runs in a subprocess in real time, and on a slow 2-core machine
# with a second job running its starts and ticks ran several times slower than on a quiet
# one (waits of 40 s and 20 s ran out in a full test run there, and passed alone); so each
# guard is GUARD_FACTOR times the time it names, and never under HANG_GUARD_FLOOR_S.
GUARD_FACTOR = 3.0
HANG_GUARD_FLOOR_S = 120.0


def wait_for(condition: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """Poll ``condition`` until it is truthy; fail naming ``what`` after ``GUARD_FACTOR`` x
    ``timeout_s`` (at least ``HANG_GUARD_FLOOR_S``)."""
    waited = max(HANG_GUARD_FLOOR_S, GUARD_FACTOR * timeout_s)
    deadline = time.monotonic() + waited
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {waited:g}s waiting for {what}")


def ready(proc: DaemonProcess) -> bool:
    """The daemon answers /readyz with 200 (it has ticked); fails at once if it died."""
    assert proc.alive(), proc.raw_logs()[-3000:]
    try:
        return httpx.get(f"{listen_url(proc.config)}/readyz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def zscore_observations(state: Path) -> float:
    """The most observations any column's z-score baseline has had (0: no usable state)."""
    loaded = load_state(state)
    if loaded is None:
        return 0.0
    count = loaded[0].get("scorer.zscore/count")
    return float(count.max()) if count is not None and count.size else 0.0


@contextmanager
def crash_cluster() -> Iterator[ClusterProcess]:
    """The cluster's process on a fresh ``SharedStepClock`` (at 0 until a daemon ticks)."""
    failures = [
        {"kind": "gsp", "node": 1, "gpu": 0, "at_s": 1500.0, "lead_s": 0.0, "xid": 119},
        {"kind": "gsp", "node": 2, "gpu": 1, "at_s": 2400.0, "lead_s": 0.0, "xid": 119},
    ]
    with (
        tempfile.TemporaryDirectory() as folder,
        ClusterProcess.start(
            clock_file=Path(folder) / "clock",
            speed=SPEED,
            nodes=4,
            gpus=2,
            fraction=0,
            failures=failures,
            repair_cap_s=1200.0,
        ) as running,
    ):
        yield running


def crash_daemon(
    tmp_path: Path, cluster: ClusterProcess, am_url: str, **sections: Any
) -> DaemonProcess:
    config = write_config(
        tmp_path / "config.yaml",
        cluster.targets,
        scrape={"interval_s": INTERVAL_S, "timeout_s": TIMEOUT_S},
        # Firing updates say endsAt = send time + 4 resends: 2400 simulated s = 80 ticks, so
        # one delayed by a slow delivery still arrives firing.
        alerts={"threshold": 0.99, "alertmanager_urls": [am_url], "resend_interval_s": 600},
        state={"path": str(tmp_path / "state.npz"), "save_interval_s": 0.3},
        logging={"level": "info", "format": "json"},
        **sections,
    )
    return DaemonProcess(
        config, cluster.start_time, cluster.origin, SPEED, tmp_path, cluster.clock_file
    )


@dataclass
class CrashRun:
    phases: list[str] = field(default_factory=list)  # alerts at Alertmanager at each kill
    observations: list[float] = field(default_factory=list)  # z-score counts after each kill
    restored: int = 0  # runs that logged "state restored"
    exit_code: int | None = None  # of the last, gracefully stopped run
    starts: list[dict[Any, set[str]]] = field(default_factory=list)  # per FAILURES entry
    fired: list[bool] = field(default_factory=list)
    resolved: list[bool] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)  # error/critical log lines
    other_failure_alerts: set[str] = field(default_factory=set)  # nodes not planted


def kill_times(rng: random.Random, kills: int) -> list[float]:
    """Simulated seconds after the start of each kill, in order: one in each of
    ``KILL_WINDOWS``, the rest anywhere in them."""
    times = [rng.uniform(*window) for window in KILL_WINDOWS]
    times += [rng.uniform(*rng.choice(KILL_WINDOWS)) for _ in range(kills - len(times))]
    return sorted(times)


def kill_loop(tmp: Path, seed: int, kills: int = 6) -> CrashRun:
    """Run the loop described in the module docstring; returns what it saw."""
    rng = random.Random(seed)
    state = tmp / "state.npz"
    run = CrashRun()
    with crash_cluster() as cluster, FakeAlertmanager(clock=lambda: cluster.sim_time(SPEED)) as am:
        proc = crash_daemon(tmp, cluster, am.url)
        assert cluster.clock_file is not None
        clock = SharedStepClock(cluster.clock_file)

        def phase() -> str:
            if am.resolved(**FAILURES[1]):
                return "resolved"
            firing = any(am.firing(**f) and not am.resolved(**f) for f in FAILURES)
            return "firing" if firing else "before"

        try:
            for at in kill_times(rng, kills):
                saved = state.stat().st_mtime_ns if state.exists() else 0
                kill_at = max(at / SPEED, clock() + MIN_TICKS_A_RUN * INTERVAL_S)  # shared clock
                proc.start()
                wait_for(
                    lambda saved=saved: state.exists() and state.stat().st_mtime_ns != saved,
                    20,
                    "a state save",
                )
                wait_for(lambda kill_at=kill_at: clock() >= kill_at, 60, "the kill's tick")
                time.sleep(rng.uniform(0.0, INTERVAL_S))  # anywhere in a tick, or a save
                run.phases.append(phase())
                proc.kill9()
                run.observations.append(zscore_observations(state))
                clock.advance(rng.randint(*TICKS_DOWN) * INTERVAL_S)
            proc.start()
            wait_for(lambda: ready(proc), 20, "the last run to serve /readyz")
            for failure in FAILURES:
                wait_for(lambda f=failure: am.resolved(**f), 40, f"{failure} to resolve")
            run.exit_code = proc.stop()
        finally:
            proc.kill9()
        logs = proc.logs()
        run.restored = sum(1 for e in logs if e.get("event") == "state restored")
        run.errors = [e for e in logs if e.get("level") in ("error", "critical")]
        run.starts = [am.episodes(am.alerts(**f)) for f in FAILURES]
        run.fired = [bool(am.firing(**f)) for f in FAILURES]
        run.resolved = [bool(am.resolved(**f)) for f in FAILURES]
        planted = {f["node"] for f in FAILURES}
        run.other_failure_alerts = {
            a.labels["node"] for a in am.alerts(alertname="GPUFailureSuspected")
        } - planted
    return run
