"""The kill -9 loop shared by tests/test_crash_restart.py and bench/chaos_bench.py.

A small simulated cluster (4 nodes x 2 GPUs, 100x clock) with two planted XID 119 failures
(node-02 at 600 s, node-03 at 1500 s); the daemon's real entry point in a subprocess is
started, SIGKILLed at a seeded random moment after each state save, and restarted, until the
kills have landed before and during the alerts and after the last resolve (at least
``min_kills``, at most ``max_kills``); a last run then lives until both alerts resolved.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from detector.service.state import load_state

from .alertmanager import FakeAlertmanager
from .cluster_process import ClusterProcess
from .daemon_process import DaemonProcess
from .harness import listen_url, write_config

SPEED = 100.0  # one 30 s simulated step per 0.3 s tick
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
    failures = [
        # the first well after the first run is up: a daemon on a slow machine started in
        # 3-4.3 s (300-430 simulated s), and one whose first scrape follows the XID misses it
        {"kind": "gsp", "node": 1, "gpu": 0, "at_s": 1500.0, "lead_s": 0.0, "xid": 119},
        {"kind": "gsp", "node": 2, "gpu": 1, "at_s": 2400.0, "lead_s": 0.0, "xid": 119},
    ]
    with ClusterProcess.start(
        speed=SPEED, nodes=4, gpus=2, fraction=0, failures=failures, repair_cap_s=1200.0
    ) as running:
        yield running


def crash_daemon(
    tmp_path: Path, cluster: ClusterProcess, am_url: str, **sections: Any
) -> DaemonProcess:
    config = write_config(
        tmp_path / "config.yaml",
        cluster.targets,
        scrape={"interval_s": 0.3, "timeout_s": 0.2},
        # Firing updates say endsAt = send time + 4 resends: 2400 simulated s = 24 s of wall
        # time, so one delayed by a loaded machine still arrives firing.
        alerts={"threshold": 0.99, "alertmanager_urls": [am_url], "resend_interval_s": 600},
        state={"path": str(tmp_path / "state.npz"), "save_interval_s": 0.3},
        logging={"level": "info", "format": "json"},
        **sections,
    )
    return DaemonProcess(config, cluster.start_time, cluster.origin, SPEED, tmp_path)


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


def kill_loop(tmp: Path, seed: int, min_kills: int = 5, max_kills: int = 14) -> CrashRun:
    """Run the loop described in the module docstring; returns what it saw."""
    rng = random.Random(seed)
    state = tmp / "state.npz"
    run = CrashRun()
    with crash_cluster() as cluster, FakeAlertmanager(clock=lambda: cluster.sim_time(SPEED)) as am:
        proc = crash_daemon(tmp, cluster, am.url)

        def phase() -> str:
            if am.resolved(**FAILURES[1]):
                return "resolved"
            firing = any(am.firing(**f) and not am.resolved(**f) for f in FAILURES)
            return "firing" if firing else "before"

        try:
            while len(run.phases) < max_kills and (
                len(run.phases) < min_kills
                or "firing" not in run.phases
                or "resolved" not in run.phases
            ):
                saved = state.stat().st_mtime_ns if state.exists() else 0
                proc.start()
                wait_for(
                    lambda saved=saved: state.exists() and state.stat().st_mtime_ns != saved,
                    20,
                    "a state save",
                )
                time.sleep(rng.uniform(0.05, 1.0))
                run.phases.append(phase())
                proc.kill9()
                run.observations.append(zscore_observations(state))
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
