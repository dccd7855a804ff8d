"""Alertmanager delivery: labels, resend/resolve, outages, shadow, storm, suppression."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np
import pytest

from detector.alerting.queue import Backoff, CoalescingQueue
from detector.alerting.sender import AlertSender, AlertStats
from detector.config.schema import AlertsConfig
from detector.loop import leading_gpu
from detector.loop.policy import AlertPolicy, Notification
from detector.model import Alert, Incident
from detector.pipeline import TickResult

T0 = 1_700_000_000.0
RESEND = 60.0


class FakeClock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class FakeAlertmanager:
    """An httpx transport that records POSTed alerts; ``down`` makes it refuse connections."""

    def __init__(self) -> None:
        self.posts: list[list[dict[str, Any]]] = []
        self.down = False
        self.status = 200

    def handler(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        assert "/api/v2/alerts" == request.url.path
        self.posts.append(json.loads(request.content))
        return httpx.Response(self.status, json={})

    @property
    def alerts(self) -> list[dict[str, Any]]:
        return [a for post in self.posts for a in post]


@dataclass(frozen=True)
class Tick:
    """What the policy reads of a tick: its time, the nodes with data, what ended."""

    time: float
    nodes: int
    ended: tuple[Alert, ...]
    incidents: tuple[Incident, ...]


def tick(
    t: float,
    nodes: int = 10,
    ended: Sequence[Alert] = (),
    incidents: Sequence[Incident] = (),
) -> Tick:
    return Tick(t, nodes, tuple(ended), tuple(incidents))


class Channel:
    """The tick loop's policy feeding the sender, as the daemon wires them: the policy
    decides each tick's notifications, the sender queues them (none in shadow mode)."""

    def __init__(self, policy: AlertPolicy, sender: AlertSender) -> None:
        self.policy, self.sender = policy, sender
        self.deliver, self.run, self.aclose = sender.deliver, sender.run, sender.aclose

    def update(
        self, tick: Tick, open_alerts: Sequence[Alert], muted_nodes: Collection[str] = ()
    ) -> list[Notification]:
        notes = self.policy.update(
            tick.time, tick.nodes, open_alerts, tick.ended, tick.incidents, muted_nodes
        )
        if not self.policy.shadow:
            self.sender.queue(notes)
        return notes

    def stats(self) -> AlertStats:
        return self.sender.stats(self.policy)


def alert(node: str, start: float = T0, signals: tuple[str, ...] = ("gpu_temp",)) -> Alert:
    return Alert(node, "3", start, None, 0.83, signals)


def make(
    *ams: FakeAlertmanager,
    clock: FakeClock,
    queue_limit: int = 10_000,
    backoff: Backoff | None = None,
    **policy: Any,
) -> tuple[Channel, list[httpx.AsyncClient]]:
    """A sender posting to one fake Alertmanager per ``ams`` (one client, routed by host);
    ``policy`` are AlertPolicy settings (resend every RESEND unless given)."""
    by_host = {f"am{i}": am for i, am in enumerate(ams)}

    def route(request: httpx.Request) -> httpx.Response:
        return by_host[request.url.host].handler(request)

    client = httpx.AsyncClient(transport=httpx.MockTransport(route))
    urls = [f"http://{host}:9093" for host in by_host]
    policy.setdefault("resend_interval_s", RESEND)
    sender = AlertSender(
        urls,
        resend_interval_s=policy["resend_interval_s"],
        client=client,
        queue_limit=queue_limit,
        clock=clock,
        backoff=backoff,
        rng=random.Random(0),
    )
    return Channel(AlertPolicy(**policy), sender), [client]


async def test_firing_then_resolved_reaches_alertmanager_with_labels_and_ends_at() -> None:
    """A firing alert carries its labels and endsAt = now + 4 x resend; the end resolves it."""
    am, clock = FakeAlertmanager(), FakeClock()
    sender, clients = make(am, clock=clock, cluster="c1", runbook_url="https://rb/gpu")
    a = alert("n1")
    sender.update(tick(T0), [a])
    await sender.deliver()
    firing = am.alerts[-1]
    assert {
        "alertname": "GPUFailureSuspected",
        "node": "n1",
        "gpu": "3",
        "severity": "warning",
        "cluster": "c1",
        "signal": "gpu_temp",
    } == firing["labels"]
    assert "https://rb/gpu" == firing["annotations"]["runbook_url"]
    assert "0.83" in firing["annotations"]["description"]
    assert "2023-11-14T22:13:20.000Z" == firing["startsAt"]
    assert "2023-11-14T22:17:20.000Z" == firing["endsAt"]  # + 4 x 60 s

    clock.t = T0 + 30
    ended = Alert("n1", "3", T0, T0 + 30, 0.83, ("gpu_temp",))
    sender.update(tick(T0 + 30, ended=[ended]), [])
    await sender.deliver()
    resolved = am.alerts[-1]
    assert firing["labels"] == resolved["labels"]
    assert "2023-11-14T22:13:50.000Z" == resolved["endsAt"]
    assert 2 == len(am.posts)
    await clients[0].aclose()


async def test_firing_alert_is_resent_every_resend_interval_and_resolved_once() -> None:
    """Between resends nothing is posted; after the end no further update is sent."""
    am, clock = FakeAlertmanager(), FakeClock()
    sender, clients = make(am, clock=clock)
    a = alert("n1")
    for dt in (0, 15, 30, 45, 60, 75, 120):
        clock.t = T0 + dt
        sender.update(tick(clock.t), [a])
        await sender.deliver()
    assert 3 == len(am.posts)  # t=0, 60, 120
    clock.t = T0 + 135
    sender.update(tick(clock.t, ended=[Alert("n1", "3", T0, clock.t, 0.8, ())]), [])
    await sender.deliver()
    for dt in (150, 300):
        clock.t = T0 + dt
        sender.update(tick(clock.t), [])
        await sender.deliver()
    assert 4 == len(am.posts)
    await clients[0].aclose()


async def test_xid_forced_alert_is_critical_and_escalation_replaces_the_warning() -> None:
    """Evidence naming a failure XID makes the alert critical; the warning one is resolved."""
    am, clock = FakeAlertmanager(), FakeClock()
    sender, clients = make(am, clock=clock, is_failure_xid=lambda code: code == 79)
    sender.update(tick(T0), [alert("n1")])
    clock.t = T0 + 15
    sender.update(tick(clock.t), [alert("n1", signals=("gpu_temp", "xid_79"))])
    await sender.deliver()
    by_severity = {a["labels"]["severity"]: a for a in am.alerts}
    assert "2023-11-14T22:13:35.000Z" == by_severity["warning"]["endsAt"]  # resolved now
    assert "critical" in by_severity
    assert "failure XID 79" in by_severity["critical"]["annotations"]["description"]
    xid_13 = alert("n2", signals=("xid_13",))  # not a failure XID
    sender.update(tick(clock.t), [alert("n1", signals=("gpu_temp", "xid_79")), xid_13])
    await sender.deliver()
    assert ("n2", "warning") == tuple(am.alerts[-1]["labels"][k] for k in ("node", "severity"))
    await clients[0].aclose()


async def test_alert_held_past_page_after_escalates_to_critical_once() -> None:
    """An alert firing for page_after_s pages: the warning is resolved, a critical one fires,
    and it stays critical (no step back down) until the episode ends."""
    am, clock = FakeAlertmanager(), FakeClock()
    sender, clients = make(am, clock=clock, page_after_s=600.0)
    a = alert("n1")
    for dt in (0, 300, 585):
        clock.t = T0 + dt
        sender.update(tick(clock.t), [a])
    await sender.deliver()
    assert {"warning"} == {x["labels"]["severity"] for x in am.alerts}
    clock.t = T0 + 600
    sender.update(tick(clock.t), [a])
    await sender.deliver()
    resolved, paged = am.alerts[-2:]
    assert ("warning", "2023-11-14T22:23:20.000Z") == (
        resolved["labels"]["severity"],
        resolved["endsAt"],
    )
    assert "critical" == paged["labels"]["severity"]
    why = "Firing for 10 min (alerts.page_after_s): it pages."
    assert why in paged["annotations"]["description"]
    assert {k: v for k, v in resolved["labels"].items() if k != "severity"} == {
        k: v for k, v in paged["labels"].items() if k != "severity"
    }
    posted = len(am.alerts)
    clock.t = T0 + 1200
    sender.update(tick(clock.t), [a])
    await sender.deliver()
    assert ["critical"] == [x["labels"]["severity"] for x in am.alerts[posted:]]
    await clients[0].aclose()


def test_page_after_none_pages_only_on_failure_xids() -> None:
    """With page_after_s null an alert stays warning however long it fires; an XID pages."""
    policy = AlertPolicy(page_after_s=None, is_failure_xid=lambda code: code == 79)
    day = 86_400.0
    notes = policy.update(T0 + day, 10, [alert("n1"), alert("n2", signals=("xid_79",))])
    severities = {dict(n.labels)["node"]: dict(n.labels)["severity"] for n in notes}
    assert {"n1": "warning", "n2": "critical"} == severities


def test_page_after_comes_from_the_config() -> None:
    """alerts.page_after_s reaches the policy (default 600 s: ten minutes past firing)."""
    assert 600.0 == AlertPolicy.from_config(AlertsConfig()).page_after_s
    assert AlertPolicy.from_config(AlertsConfig(page_after_s=None)).page_after_s is None


async def test_outage_then_recovery_delivers_latest_state_of_every_alert() -> None:
    """While an Alertmanager is down updates coalesce; when back, each alert's latest state
    arrives once, resolved ones resolved, and the other Alertmanager was never held up."""
    down, up, clock = FakeAlertmanager(), FakeAlertmanager(), FakeClock()
    sender, clients = make(down, up, clock=clock, storm_fraction=1.0)
    down.down = True
    open_now = [alert(f"n{i}") for i in range(3)]
    for step in range(20):  # 20 ticks of 15 s = 5 minutes down
        clock.t = T0 + 15 * step
        if step == 10:  # n0 resolves during the outage
            ended = Alert("n0", "3", T0, clock.t, 0.8, ())
            open_now = open_now[1:]
            sender.update(tick(clock.t, ended=[ended]), open_now)
        else:
            sender.update(tick(clock.t), open_now)
        await sender.deliver()
    stats = sender.stats().alertmanagers
    assert 0 == stats["http://am0:9093"].sent_alerts
    assert stats["http://am0:9093"].failed_requests >= 3
    assert stats["http://am0:9093"].retried_requests >= 2
    assert 3 == stats["http://am0:9093"].queued  # one pending update per alert
    assert up.alerts  # the healthy one kept receiving

    down.down = False
    clock.t += 120  # past any backoff (max 60 s)
    await sender.deliver()
    latest = {a["labels"]["node"]: a for a in down.alerts}
    assert ["n0", "n1", "n2"] == sorted(latest)
    assert 3 == len(down.alerts)  # coalesced: one update per alert
    assert latest["n0"]["endsAt"] < latest["n1"]["endsAt"]
    assert "2023-11-14T22:15:50.000Z" == latest["n0"]["endsAt"]  # resolved at its end
    assert 0 == sender.stats().alertmanagers["http://am0:9093"].queued
    await clients[0].aclose()


async def test_full_queue_drops_oldest_updates_and_counts_them() -> None:
    """A queue at its limit keeps the newest alerts and counts the dropped ones."""
    am, clock = FakeAlertmanager(), FakeClock()
    sender, clients = make(am, clock=clock, queue_limit=2, storm_fraction=1.0)
    am.down = True
    sender.update(tick(T0), [alert(f"n{i}") for i in range(5)])
    assert 3 == sender.stats().alertmanagers["http://am0:9093"].dropped_alerts
    am.down = False
    await sender.deliver()
    assert ["n3", "n4"] == sorted(a["labels"]["node"] for a in am.alerts)
    await clients[0].aclose()


async def test_rejected_batch_is_dropped_not_retried() -> None:
    """A 400 from Alertmanager drops the batch (retrying would not help) and counts it."""
    am, clock = FakeAlertmanager(), FakeClock()
    sender, clients = make(am, clock=clock)
    am.status = 400
    sender.update(tick(T0), [alert("n1")])
    await sender.deliver()
    stats = sender.stats().alertmanagers["http://am0:9093"]
    assert (1, 1, 0, 0) == (
        stats.failed_requests,
        stats.dropped_alerts,
        stats.queued,
        stats.sent_alerts,
    )
    await clients[0].aclose()


async def test_shadow_mode_sends_nothing_but_counts() -> None:
    """Shadow mode computes notifications and counts episodes, and posts nothing."""
    am, clock = FakeAlertmanager(), FakeClock()
    sender, clients = make(am, clock=clock, shadow=True)
    notes = sender.update(tick(T0), [alert("n1"), alert("n2")])
    await sender.deliver()
    assert 2 == len(notes)
    assert [] == am.posts
    assert {"shadow": 2} == sender.stats().suppressed
    assert 2 == sender.stats().firing["warning"]
    await clients[0].aclose()


async def test_storm_sends_one_cluster_incident_instead_of_node_alerts() -> None:
    """Many nodes starting together yield one GPUClusterIncident; node alerts are held."""
    am, clock = FakeAlertmanager(), FakeClock()
    sender, clients = make(am, clock=clock, storm_fraction=0.2, storm_window_s=300)
    sender.update(tick(T0, nodes=20), [alert("n0")])  # 1 of 20: not a storm
    clock.t = T0 + 60
    storm = [alert(f"n{i}", start=clock.t) for i in range(1, 6)]  # 6 of 20 > 20 %
    sender.update(tick(clock.t, nodes=20), [alert("n0"), *storm])
    await sender.deliver()
    names = {a["labels"]["alertname"]: a for a in am.alerts}
    assert ["GPUClusterIncident", "GPUFailureSuspected"] == sorted(names)
    assert 2 == len(am.alerts)
    assert "n0" == names["GPUFailureSuspected"]["labels"]["node"]
    assert "6 of 20 nodes" in names["GPUClusterIncident"]["annotations"]["summary"]
    assert {"storm": 5} == sender.stats().suppressed

    clock.t = T0 + 60 + 301  # the window passes: the incident resolves
    sender.update(tick(clock.t, nodes=20), [alert("n0"), *storm])
    await sender.deliver()
    resolved = [a for a in am.alerts if a["labels"]["alertname"] == "GPUClusterIncident"][-1]
    assert "2023-11-14T22:19:21.000Z" == resolved["endsAt"]
    assert all(a["labels"].get("node") in (None, "n0") for a in am.alerts)  # still held
    await clients[0].aclose()


async def test_suppressed_xids_and_signals_remove_evidence() -> None:
    """An alert whose evidence is all suppressed is not sent; otherwise it is sent without
    the suppressed evidence (a suppressed XID does not make it critical)."""
    am, clock = FakeAlertmanager(), FakeClock()
    sender, clients = make(
        am, clock=clock, suppress_xids=[79], suppress_signals=["nfs_ops"], storm_fraction=1.0
    )
    sender.update(
        tick(T0),
        [
            alert("n1", signals=("xid_79",)),
            alert("n2", signals=("nfs_ops",)),
            alert("n3", signals=("xid_79", "gpu_temp")),
        ],
    )
    await sender.deliver()
    assert 1 == len(am.alerts)
    assert ("n3", "warning", "gpu_temp") == tuple(
        am.alerts[0]["labels"][k] for k in ("node", "severity", "signal")
    )
    assert {"xid": 1, "signal": 1} == sender.stats().suppressed
    await clients[0].aclose()


async def test_node_in_maintenance_sends_nothing() -> None:
    """A muted node sends neither firing nor resolved; once unmuted, its alert is sent."""
    am, clock = FakeAlertmanager(), FakeClock()
    sender, clients = make(am, clock=clock)
    sender.update(tick(T0), [alert("n1")], muted_nodes={"n1"})
    clock.t = T0 + 60
    sender.update(tick(clock.t), [alert("n1")], muted_nodes={"n1"})
    await sender.deliver()
    assert [] == am.posts
    assert {"maintenance": 1} == sender.stats().suppressed
    clock.t = T0 + 75
    sender.update(tick(clock.t), [alert("n1")])
    await sender.deliver()
    assert ["n1"] == [a["labels"]["node"] for a in am.alerts]
    await clients[0].aclose()


async def test_common_mode_incident_fires_once_and_resolves_when_quiet() -> None:
    """Incidents on one signal become one warning GPUClusterIncident, resolved after quiet."""
    am, clock = FakeAlertmanager(), FakeClock()
    sender, clients = make(am, clock=clock, storm_window_s=300)
    inc = Incident(T0, None, "nfs_write_latency", 40, 50)
    for dt in (0, 15, 30):
        clock.t = T0 + dt
        sender.update(tick(clock.t, incidents=[Incident(clock.t, None, inc.signal, 40, 50)]), [])
    await sender.deliver()
    assert 1 == len(am.alerts)
    assert "warning" == am.alerts[0]["labels"]["severity"]
    assert "nfs_write_latency" == am.alerts[0]["labels"]["signal"]
    clock.t = T0 + 400
    sender.update(tick(clock.t), [])
    await sender.deliver()
    assert "2023-11-14T22:20:00.000Z" == am.alerts[-1]["endsAt"]
    await clients[0].aclose()


async def test_transport_errors_are_counted_not_raised_and_back_off() -> None:
    """A refused connection is retried only after the backoff delay, growing per failure."""
    am, clock = FakeAlertmanager(), FakeClock()
    sender, clients = make(am, clock=clock, backoff=Backoff(base_s=10, max_s=40))
    am.down = True
    sender.update(tick(T0), [alert("n1")])
    attempts = []
    for dt in range(0, 200, 1):
        clock.t = T0 + dt
        before = sender.stats().alertmanagers["http://am0:9093"].failed_requests
        await sender.deliver()
        if sender.stats().alertmanagers["http://am0:9093"].failed_requests > before:
            attempts.append(dt)
    gaps = np.diff(attempts)
    assert 5 <= gaps[0] <= 10  # equal jitter: between half and all of 10 s
    assert all(20 <= g <= 40 for g in gaps[2:])  # capped at 40 s
    await clients[0].aclose()


def test_backoff_doubles_with_jitter_and_caps() -> None:
    """Each delay lies in [d/2, d] for d = base x 2^(n-1), capped at max."""
    rng, b = random.Random(1), Backoff(base_s=1, max_s=8)
    for n, full in [(1, 1), (2, 2), (3, 4), (4, 8), (9, 8)]:
        d = b.delay(n, rng)
        assert full / 2 <= d <= full


def test_queue_coalesces_by_fingerprint_and_keeps_newer_state_on_ack() -> None:
    """A newer update replaces the pending one; acking an older batch keeps the newer one."""
    q = CoalescingQueue(limit=10)
    labels = (("alertname", "A"), ("node", "n1"))
    old = Notification(labels, (), T0, None)
    q.put(old)
    batch = q.peek(10)
    new = Notification(labels, (), T0, T0 + 5)
    q.put(new)
    q.ack(batch)
    assert [new] == q.peek(10)
    with pytest.raises(ValueError, match="limit"):
        CoalescingQueue(0)


def test_from_config_wires_every_setting() -> None:
    """AlertsConfig settings reach the policy (cluster, storm, suppression, shadow)."""
    cfg = AlertsConfig(
        alertmanager_urls=["http://user:pw@am:9093/"],
        shadow=True,
        cluster="c9",
        suppress_signals=["x"],
        resend_interval_s=30,
    )
    sender = AlertSender.from_config(cfg, client=httpx.AsyncClient())
    policy = AlertPolicy.from_config(cfg)
    assert ["http://am:9093"] == list(sender.stats(policy).alertmanagers)  # no password
    assert 30.0 == sender.resend_interval_s
    assert (True, "c9", 30.0) == (policy.shadow, policy.cluster, policy.resend_interval_s)
    assert frozenset({"x"}) == policy.suppress_signals


async def test_real_http_alertmanager_receives_alerts() -> None:
    """Over a real loopback HTTP connection, a POST /api/v2/alerts arrives as JSON."""
    received: list[tuple[str, list[dict[str, Any]]]] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        fields = dict(line.partition(": ")[::2] for line in lines[1:] if line)
        length = int({k.lower(): v for k, v in fields.items()}["content-length"])
        body = await reader.readexactly(length)
        received.append((lines[0], json.loads(body)))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    sender = Channel(AlertPolicy(), AlertSender([f"http://127.0.0.1:{port}"], clock=FakeClock()))
    try:
        sender.update(tick(T0), [alert("n7")])
        await sender.deliver()
    finally:
        await sender.aclose()
        server.close()
        await server.wait_closed()
    assert "POST /api/v2/alerts HTTP/1.1" == received[0][0]
    assert "n7" == received[0][1][0]["labels"]["node"]


async def test_run_delivers_queued_updates_until_stopped() -> None:
    """The delivery task wakes on a new update, posts it, and exits when stop is set."""
    posted = asyncio.Event()
    received: list[Any] = []

    def handler(request: httpx.Request) -> httpx.Response:
        received.append(json.loads(request.content))
        posted.set()
        return httpx.Response(200)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        sender = Channel(AlertPolicy(), AlertSender(["http://am:9093"], client=client))
        stop = asyncio.Event()
        task = asyncio.create_task(sender.run(stop))
        await asyncio.sleep(0)  # the task is now waiting: nothing pending
        sender.update(tick(T0), [alert("n1")])
        await asyncio.wait_for(posted.wait(), 120)  # hang guards: it takes milliseconds
        stop.set()
        await asyncio.wait_for(task, 120)
    assert ["n1"] == [a["labels"]["node"] for post in received for a in post]


def gpu_tick(gpu_node: list[int], gpu_score: list[float]) -> TickResult:
    """A scored tick of two nodes whose GPUs (labels "0", "1", ...) score ``gpu_score``."""
    return TickResult(
        time=T0,
        node_names=("n0", "n1"),
        node_score=np.array([0.9, 0.9]),
        gpu_node=np.array(gpu_node, dtype=np.int64),
        gpu_label=tuple(str(i) for i in range(len(gpu_node))),
        gpu_score=np.array(gpu_score, dtype=float),
        xids=(),
        incidents=(),
    )


def test_the_gpu_that_crossed_the_threshold_leads_its_node() -> None:
    """The node's highest GPU score at or above the threshold names the GPU; below it, or
    with no GPU data, no GPU leads (the strongest column's GPU is named instead)."""
    tick = gpu_tick([0, 0, 0, 1, 1], [0.2, 0.72, 0.65, 0.5, float("nan")])
    assert "1" == leading_gpu(tick, 0, 0.6)
    assert leading_gpu(tick, 0, 0.8) is None
    assert "3" == leading_gpu(tick, 1, 0.3)  # the NaN GPU sent nothing: it does not lead
    assert leading_gpu(gpu_tick([0, 1], [0.9, float("nan")]), 1, 0.1) is None
    assert leading_gpu(gpu_tick([], []), 0, 0.1) is None
