"""Crash and restart: the daemon's real entry point in a subprocess, ``kill -9``-ed at seeded
random points while a planted GPU failure fires and resolves, and restarted from its state
file each time. Alertmanager (a fake, tests/chaos/alertmanager.py) must see the failure's
alert exactly once (one startsAt), firing and then resolved; the scorers must never re-warm.
A corrupt state file (truncated, random bytes, another version) must never crash-loop it."""

from __future__ import annotations

import itertools
import json
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from chaos.alertmanager import FakeAlertmanager
from chaos.cluster_process import ClusterProcess
from chaos.daemon_process import DaemonProcess
from chaos.harness import listen_url, write_config

from detector.alerts import AlertSender
from detector.model import Alert
from detector.pipeline import TickResult
from detector.state import FORMAT_VERSION, load_state, save_state

SPEED = 100.0  # one 30 s simulated step per 0.3 s tick
FAILURES = [
    {"alertname": "GPUFailureSuspected", "node": "node-02"},
    {"alertname": "GPUFailureSuspected", "node": "node-03"},
]
MIN_KILLS, MAX_KILLS = 5, 14


def wait_for(condition: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """Poll ``condition`` until it is truthy; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


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


@pytest.fixture
def cluster() -> Iterator[ClusterProcess]:
    failures = [
        {"kind": "gsp", "node": 1, "gpu": 0, "at_s": 600.0, "lead_s": 0.0, "xid": 119},
        {"kind": "gsp", "node": 2, "gpu": 1, "at_s": 1500.0, "lead_s": 0.0, "xid": 119},
    ]
    with ClusterProcess.start(
        speed=SPEED, nodes=4, gpus=2, fraction=0, failures=failures, repair_cap_s=1200.0
    ) as running:
        yield running


def daemon(tmp_path: Path, cluster: ClusterProcess, am_url: str, **sections: Any) -> DaemonProcess:
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


def test_kill_9_at_random_points_loses_and_duplicates_no_alert(
    tmp_path: Path, cluster: ClusterProcess
) -> None:
    """SIGKILLs at seeded random points before, during and after two planted XID 119
    episodes: each alert reaches Alertmanager with one startsAt and is resolved, every
    restart restores the state file, and the scorers' observation counts only grow (no
    re-warm: a restarted daemon scores on its first tick)."""
    rng = random.Random(20261129)
    state = tmp_path / "state.npz"
    phases: list[str] = []  # the failure's alert at Alertmanager when each kill landed
    with FakeAlertmanager(clock=lambda: cluster.sim_time(SPEED)) as am:
        proc = daemon(tmp_path, cluster, am.url)
        observations: list[float] = []

        def phase() -> str:
            if am.resolved(**FAILURES[1]):
                return "resolved"
            firing = any(am.firing(**f) and not am.resolved(**f) for f in FAILURES)
            return "firing" if firing else "before"

        try:
            while len(phases) < MAX_KILLS and (
                len(phases) < MIN_KILLS or "firing" not in phases or "resolved" not in phases
            ):
                saved = state.stat().st_mtime_ns if state.exists() else 0
                proc.start()
                wait_for(
                    lambda saved=saved: state.exists() and state.stat().st_mtime_ns != saved,
                    20,
                    "a state save",
                )
                time.sleep(rng.uniform(0.05, 1.0))
                phases.append(phase())
                proc.kill9()
                observations.append(zscore_observations(state))
            proc.start()
            wait_for(lambda: ready(proc), 20, "the last run to serve /readyz")
            for failure in FAILURES:
                wait_for(lambda f=failure: am.resolved(**f), 40, f"{failure} to resolve")
            assert 0 == proc.stop()
        finally:
            proc.kill9()
        restored = [e for e in proc.logs() if e.get("event") == "state restored"]
        starts = [am.episodes(am.alerts(**failure)) for failure in FAILURES]
    assert {"before", "firing"} <= set(phases), phases  # the kills hit the episodes
    assert len(phases) == len(restored)  # every run after the first carried on from the file
    assert all(b > a for a, b in itertools.pairwise(observations)), observations
    for failure, episodes in zip(FAILURES, starts, strict=True):
        assert 1 == len(episodes), episodes  # one alert ...
        assert [1] == [len(s) for s in episodes.values()]  # ... one episode: no duplicate
        assert am.firing(**failure), (phases, am.alerts(**failure))  # it fired (and resolved)
    others = [a.labels for a in am.alerts(alertname="GPUFailureSuspected")]
    assert {"node-02", "node-03"} == {labels["node"] for labels in others}
    assert [] == [e for e in proc.logs() if e.get("level") in ("error", "critical")]


def _other_format(path: Path) -> None:
    blob = json.dumps({"format": FORMAT_VERSION + 1, "meta": {}}).encode()
    with path.open("wb") as fh:
        np.savez(fh, __meta__=np.frombuffer(blob, dtype=np.uint8))


UNUSABLE = "state file unusable, starting clean"
MISFIT = "state file does not fit this build, starting clean"
# name -> (damage done to a good file, the warning the daemon must log)
CORRUPTIONS: dict[str, tuple[Callable[[Path], object], str]] = {
    "truncated": (lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]), UNUSABLE),
    "random_bytes": (lambda p: p.write_bytes(np.random.default_rng(1).bytes(50_000)), UNUSABLE),
    "empty": (lambda p: p.write_bytes(b""), UNUSABLE),
    "other_format": (_other_format, UNUSABLE),
    "other_pipeline_version": (
        lambda p: save_state(p, {}, {"pipeline": {"version": -1, "series": []}}),
        MISFIT,
    ),
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_corrupt_state_file_starts_clean_with_a_warning(
    tmp_path: Path, cluster: ClusterProcess, corruption: str
) -> None:
    """A damaged state file: the daemon warns naming the file, starts clean, serves, and
    replaces the file with a good one (no crash loop)."""
    state = tmp_path / "state.npz"
    save_state(state, {"x": np.arange(1000.0)}, {"pipeline": {}})
    damage, warning = CORRUPTIONS[corruption]
    damage(state)
    before = state.read_bytes()
    with FakeAlertmanager() as am:
        proc = daemon(tmp_path, cluster, am.url)
        proc.start()
        try:
            wait_for(lambda: ready(proc), 20, "/readyz 200")
            wait_for(lambda: state.read_bytes() != before, 10, "a new state file")
            assert load_state(state) is not None
            assert 0 == proc.stop()
        finally:
            proc.kill9()
    warnings = [e for e in proc.logs() if e.get("event") == warning]
    assert [str(state)] == [w["path"] for w in warnings]
    assert not [e for e in proc.logs() if e.get("event") == "state restored"]


def _tick(t: float, ended: tuple[Alert, ...] = ()) -> TickResult:
    return TickResult(
        time=t,
        node_names=("n1", "n2", "n3", "n4"),
        node_score=np.zeros(4),
        xid_held=np.zeros(4, dtype=bool),
        gpu_node=np.zeros(0, dtype=np.int64),
        gpu_label=(),
        gpu_score=np.zeros(0),
        started=(),
        ended=ended,
        xids=(),
        incidents=(),
    )


def _restarted(sender: AlertSender) -> AlertSender:
    """A new sender loaded from ``sender``'s state after a JSON round trip (the state file)."""
    state = json.loads(json.dumps(sender.state_dict(), allow_nan=True))
    fresh = AlertSender(["http://user:secret@am:9093"], resend_interval_s=60.0)
    fresh.load_state_dict(state)
    return fresh


async def test_an_episode_that_ended_during_the_crash_is_resolved_after_restart() -> None:
    """Sent as firing, then the daemon dies; the episode is over when it comes back: the
    restored sender resolves it with the same labels and startsAt (before the fix the new
    policy knew nothing of it and Alertmanager kept it firing until endsAt)."""
    sender = AlertSender(["http://user:secret@am:9093"], resend_interval_s=60.0)
    alert = Alert("n2", "0", 1000.0, None, 0.9, ("xid_119",))
    [firing] = sender.update(_tick(1000.0), [alert])
    restarted = _restarted(sender)
    ended = Alert("n2", "0", 1000.0, 1300.0, 0.9, ("xid_119",))
    notes = restarted.update(_tick(1330.0, ended=(ended,)), [])
    assert [(firing.labels, 1000.0, 1300.0)] == [(n.labels, n.starts_at, n.ends_at) for n in notes]
    await sender.aclose()
    await restarted.aclose()


async def test_undelivered_updates_survive_a_restart_and_are_not_resent_twice() -> None:
    """Queued but never delivered: the restarted sender still has it pending; an alert still
    open after the restart keeps its labels and is not re-sent before its resend is due."""
    sender = AlertSender(["http://user:secret@am:9093"], resend_interval_s=60.0)
    alert = Alert("n3", None, 2000.0, None, 0.8, ("nvlink_errors", "ecc"))
    [queued] = sender.update(_tick(2000.0), [alert])
    restarted = _restarted(sender)
    assert 1 == restarted.stats().alertmanagers["http://am:9093"].queued
    moved = Alert("n3", None, 2000.0, None, 0.85, ("ecc", "nvlink_errors"))  # evidence moved
    assert [] == restarted.update(_tick(2030.0), [moved])  # not due: no new update
    [resent] = restarted.update(_tick(2060.0), [moved])
    assert queued.labels == resent.labels  # the labels Alertmanager has, not re-derived
    assert "secret" not in json.dumps(sender.state_dict())
    await sender.aclose()
    await restarted.aclose()
