"""Crash and restart: the daemon's real entry point in a subprocess, ``kill -9``-ed at seeded
random points while a planted GPU failure fires and resolves, and restarted from its state
file each time. Alertmanager (a fake, tests/chaos/alertmanager.py) must see the failure's
alert exactly once (one startsAt), firing and then resolved; the scorers must never re-warm.
A corrupt state file (truncated, random bytes, another version) must never crash-loop it."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from chaos.alertmanager import FakeAlertmanager
from chaos.cluster_process import ClusterProcess
from chaos.crash import crash_cluster, crash_daemon, kill_loop, ready, wait_for

from detector.alerting.sender import AlertSender
from detector.loop.policy import AlertPolicy, Notification
from detector.model import Alert
from detector.service.state import FORMAT_VERSION, load_state, save_state


def test_kill_9_at_random_points_loses_and_duplicates_no_alert(tmp_path: Path) -> None:
    """SIGKILLs at seeded random points before, during and after two planted XID 119
    episodes: each alert reaches Alertmanager with one startsAt, firing and then resolved,
    every restart restores the state file, and the scorers' observation counts only grow (no
    re-warm: a restarted daemon scores on its first tick)."""
    run = kill_loop(tmp_path, seed=20261129)
    assert {"before", "firing"} <= set(run.phases), run.phases  # the kills hit the episodes
    assert len(run.phases) == run.restored  # every run after the first carried on
    assert all(b > a for a, b in itertools.pairwise(run.observations)), run.observations
    for episodes in run.starts:
        assert 1 == len(episodes), episodes  # one alert ...
        assert [1] == [len(s) for s in episodes.values()]  # ... one episode: no duplicate
    assert [True, True] == run.fired  # nothing lost ...
    assert [True, True] == run.resolved  # ... and every resolve arrived
    assert set() == run.other_failure_alerts
    assert (0, []) == (run.exit_code, run.errors)


@pytest.fixture
def cluster() -> Iterator[ClusterProcess]:
    with crash_cluster() as running:
        yield running


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
        proc = crash_daemon(tmp_path, cluster, am.url)
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


AM = "http://user:secret@am:9093"


class _Channel:
    """The tick loop's policy and the sender, as the daemon keeps them: the policy's memory
    in the loop's state, the sender's pending updates in the delivery state."""

    def __init__(self, client: httpx.AsyncClient | None = None, url: str = AM) -> None:
        self.policy = AlertPolicy(resend_interval_s=60.0)
        self.sender = AlertSender([url], resend_interval_s=60.0, client=client)

    def update(
        self, t: float, open_alerts: list[Alert], ended: tuple[Alert, ...] = ()
    ) -> list[Notification]:
        notes = self.policy.update(t, 4, open_alerts, ended)
        self.sender.queue(notes)
        return notes

    def state_dict(self) -> dict[str, Any]:
        return {"policy": self.policy.state_dict(), "delivery": self.sender.state_dict()}

    def restarted(self) -> _Channel:
        """A new channel loaded from this one's state after a JSON round trip (the file)."""
        state = json.loads(json.dumps(self.state_dict(), allow_nan=True))
        fresh = _Channel()
        fresh.policy.load_state_dict(state["policy"])
        fresh.sender.load_state_dict(state["delivery"])
        return fresh


async def test_an_episode_that_ended_during_the_crash_is_resolved_after_restart() -> None:
    """Sent as firing, then the daemon dies; the episode is over when it comes back: the
    restored policy resolves it with the same labels and startsAt (before the fix the new
    policy knew nothing of it and Alertmanager kept it firing until endsAt)."""
    channel = _Channel()
    alert = Alert("n2", "0", 1000.0, None, 0.9, ("xid_119",))
    [firing] = channel.update(1000.0, [alert])
    restarted = channel.restarted()
    ended = Alert("n2", "0", 1000.0, 1300.0, 0.9, ("xid_119",))
    notes = restarted.update(1330.0, [], ended=(ended,))
    assert [(firing.labels, 1000.0, 1300.0)] == [(n.labels, n.starts_at, n.ends_at) for n in notes]
    await channel.sender.aclose()
    await restarted.sender.aclose()


async def test_undelivered_updates_survive_a_restart_and_are_not_resent_twice() -> None:
    """Queued but never delivered: the restarted sender still has it pending; an alert still
    open after the restart keeps its labels and is not re-sent before its resend is due."""
    channel = _Channel()
    alert = Alert("n3", None, 2000.0, None, 0.8, ("nvlink_errors", "ecc"))
    [queued] = channel.update(2000.0, [alert])
    restarted = channel.restarted()
    stats = restarted.sender.stats(restarted.policy)
    assert 1 == stats.alertmanagers["http://am:9093"].queued
    moved = Alert("n3", None, 2000.0, None, 0.85, ("ecc", "nvlink_errors"))  # evidence moved
    assert [] == restarted.update(2030.0, [moved])  # not due: no new update
    [resent] = restarted.update(2060.0, [moved])
    assert queued.labels == resent.labels  # the labels Alertmanager has, not re-derived
    assert "secret" not in json.dumps(channel.state_dict())
    await channel.sender.aclose()
    await restarted.sender.aclose()


async def test_write_ahead_holds_updates_until_the_state_is_saved() -> None:
    """With write_ahead, a tick's updates are not POSTed until release() (the daemon calls it
    after saving the state that holds them); then they are."""
    posts: list[bytes] = []

    def handler(request: httpx.Request) -> httpx.Response:
        posts.append(request.content)
        return httpx.Response(200)

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    channel = _Channel(client, "http://am:9093")
    sender = channel.sender
    sender.write_ahead = True
    channel.update(3000.0, [Alert("n1", "2", 3000.0, None, 0.9, ("xid_79",))])
    assert sender.held
    await sender.deliver()
    assert [] == posts
    sender.release()
    await sender.deliver()
    assert 1 == len(posts)
    assert "xid_79" in json.loads(posts[0])[0]["labels"]["signal"]
    await client.aclose()
