"""Alertmanager delivery: the tick loop's notifications POSTed to every configured Alertmanager.

Contract:

- ``AlertSender.queue(notifications)`` queues the notifications the tick loop's policy decided
  this tick (``detector.loop.AlertPolicy``: labels, severity, resend, storm breaker,
  suppression, maintenance) for EVERY Alertmanager. It does no I/O. In shadow mode the daemon
  queues nothing.
- ``await deliver()`` makes at most one attempt per Alertmanager that has pending updates and
  whose backoff has elapsed, concurrently: ``POST <url>/api/v2/alerts`` with a JSON list.
  Firing alerts get ``endsAt = now + 4 x resend_interval_s`` stamped at send time (so an update
  that waited through an outage is still firing on arrival, as Prometheus does); resolved ones
  carry their end time. ``run(stop)`` calls it in a loop for the daemon.
- Failures back off exponentially with jitter per Alertmanager; the queue (bounded,
  coalescing, drop-oldest) keeps the latest state of every alert meanwhile. A 4xx other than
  408/429 means Alertmanager will never take the batch: it is dropped, not retried.
- Write-ahead (``write_ahead`` True, the daemon sets it when it keeps a state file): updates
  queued by ``queue`` are ``held`` (not delivered) until ``release()``, which the daemon
  calls once the state holding them is saved. So whatever reached Alertmanager is in the
  state file, and a crash between a send and the next save cannot make a restarted daemon
  detect the same episode again and send it with a second startsAt.
- ``state_dict()`` / ``load_state_dict()``: every Alertmanager's pending updates as JSON-able
  data (keyed by the URL without credentials), so a crash loses no undelivered update (the
  policy's memory of what was sent is the tick loop's state).
- httpx errors and bad statuses become ``AlertDeliveryError`` in ``_post`` (the one boundary);
  ``deliver`` logs and counts them and never raises. URLs are logged and labelled without
  their user:password part.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx

from ..config import AlertsConfig
from ..errors import AlertDeliveryError
from ..logs import get_logger
from ..loop import AlertPolicy, Notification
from .queue import Backoff, CoalescingQueue

__all__ = ["AlertSender", "AlertStats", "DeliveryStats"]

log = get_logger(component="alerts")
_RETRYABLE_4XX = (408, 429)


class _Rejected(AlertDeliveryError):
    """Alertmanager refused the batch for good (4xx): retrying would not help."""


@dataclass(slots=True)
class DeliveryStats:
    """Counters of one Alertmanager (alerts = alert updates, requests = POSTs)."""

    sent_alerts: int = 0
    failed_requests: int = 0
    retried_requests: int = 0
    dropped_alerts: int = 0
    queued: int = 0  # pending updates now (a gauge)


@dataclass(frozen=True, slots=True)
class AlertStats:
    """What export.py shows: per Alertmanager delivery, suppressions, firing by severity."""

    alertmanagers: dict[str, DeliveryStats]
    suppressed: dict[str, int]  # reason -> alert episodes not sent
    firing: dict[str, int]  # severity -> open alerts and incidents
    shadow: bool


@dataclass(slots=True)
class _Target:
    url: str  # .../api/v2/alerts
    name: str  # base URL without credentials: safe for logs and labels
    queue: CoalescingQueue
    stats: DeliveryStats = field(default_factory=DeliveryStats)
    failures: int = 0  # consecutive
    next_attempt: float = float("-inf")


def _public(url: str) -> str:
    return str(httpx.URL(url).copy_with(username=None, password=None)).rstrip("/")


def _note_state(note: Notification) -> list[Any]:
    return [
        [list(kv) for kv in note.labels],
        [list(kv) for kv in note.annotations],
        note.starts_at,
        note.ends_at,
    ]


def _note_from(data: list[Any]) -> Notification:
    labels, annotations, starts_at, ends_at = data
    return Notification(
        tuple((str(k), str(v)) for k, v in labels),
        tuple((str(k), str(v)) for k, v in annotations),
        float(starts_at),
        None if ends_at is None else float(ends_at),
    )


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class AlertSender:
    """See the module docstring. ``client`` None: an owned client, closed by ``aclose``."""

    def __init__(
        self,
        urls: Sequence[str],
        *,
        resend_interval_s: float = 60.0,
        client: httpx.AsyncClient | None = None,
        queue_limit: int = 10_000,
        clock: Callable[[], float] = time.time,
        timeout_s: float = 10.0,
        backoff: Backoff | None = None,
        batch_size: int = 1000,
        rng: random.Random | None = None,
    ) -> None:
        self.resend_interval_s = resend_interval_s
        self.clock = clock
        self.timeout_s = timeout_s
        self.backoff = backoff or Backoff()
        self.batch_size = batch_size
        self._rng = rng or random.Random()
        self._owns_client = client is None
        self._client = client or httpx.AsyncClient(timeout=timeout_s)
        self._targets = [
            _Target(u.rstrip("/") + "/api/v2/alerts", _public(u), CoalescingQueue(queue_limit))
            for u in urls
        ]
        self._wake = asyncio.Event()
        self.write_ahead = False
        self.held = False  # updates queued since the last release(): not delivered yet

    @classmethod
    def from_config(
        cls,
        config: AlertsConfig,
        *,
        client: httpx.AsyncClient | None = None,
        clock: Callable[[], float] = time.time,
    ) -> AlertSender:
        """A sender to ``config.alertmanager_urls``."""
        return cls(
            config.alertmanager_urls,
            resend_interval_s=config.resend_interval_s,
            client=client,
            clock=clock,
        )

    def queue(self, notes: Sequence[Notification]) -> None:
        """Queue this tick's notifications for every Alertmanager (no I/O)."""
        if not notes:
            return
        for target in self._targets:
            for note in notes:
                target.queue.put(note)
        if self.write_ahead:
            self.held = True
        else:
            self._wake.set()

    def release(self) -> None:
        """Deliver what ``queue`` held (write-ahead: call once the state is saved)."""
        if self.held:
            self.held = False
            self._wake.set()

    def stats(self, policy: AlertPolicy) -> AlertStats:
        """Delivery counters per Alertmanager with ``policy``'s suppressions and firing."""
        for target in self._targets:
            target.stats.dropped_alerts = target.queue.dropped
            target.stats.queued = len(target.queue)
        return AlertStats(
            alertmanagers={t.name: t.stats for t in self._targets},
            suppressed=dict(policy.suppressed),
            firing={s: policy.firing.get(s, 0) for s in ("critical", "warning")},
            shadow=policy.shadow,
        )

    def state_dict(self) -> dict[str, Any]:
        """Pending updates per Alertmanager (see the module docstring)."""
        return {
            "pending": {t.name: [_note_state(n) for n in t.queue.pending()] for t in self._targets},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict`` output; pending updates of Alertmanagers no longer
        configured are dropped. Raises KeyError/TypeError/ValueError when malformed (queues
        may then hold part of the pending updates)."""
        pending = {name: [_note_from(n) for n in notes] for name, notes in state["pending"].items()}
        for target in self._targets:
            for note in pending.get(target.name, []):
                target.queue.put(note)
        if any(len(t.queue) for t in self._targets):
            self._wake.set()

    def next_due(self) -> float | None:
        """When the next attempt is due (clock time), None when nothing is pending."""
        due = [max(t.next_attempt, 0.0) for t in self._targets if len(t.queue)]
        return min(due) if due else None

    async def deliver(self) -> None:
        """One attempt per due Alertmanager with pending updates (see module docstring);
        nothing while updates are held."""
        if self.held:
            return
        now = self.clock()
        due = [t for t in self._targets if len(t.queue) and t.next_attempt <= now]
        await asyncio.gather(*(self._attempt(t, now) for t in due))

    async def run(self, stop: asyncio.Event) -> None:
        """Deliver until ``stop`` is set, waking on new updates or when a retry is due."""
        while not stop.is_set():
            self._wake.clear()  # before delivering: an update queued meanwhile wakes us again
            await self.deliver()
            due = self.next_due()
            wait = self.resend_interval_s if due is None else max(0.05, due - self.clock())
            waiters = [asyncio.ensure_future(e.wait()) for e in (self._wake, stop)]
            await asyncio.wait(waiters, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
            for w in waiters:
                w.cancel()

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    async def _attempt(self, target: _Target, now: float) -> None:
        batch = target.queue.peek(self.batch_size)
        if target.failures:
            target.stats.retried_requests += 1
        try:
            await self._post(target, batch, now)
        except AlertDeliveryError as err:
            target.failures += 1
            target.stats.failed_requests += 1
            delay = self.backoff.delay(target.failures, self._rng)
            target.next_attempt = now + delay
            if isinstance(err, _Rejected):
                target.queue.discard(batch)
            log.warning("alert delivery failed", error=str(err), retry_in_s=round(delay, 1))
            return
        target.failures = 0
        target.next_attempt = float("-inf")
        target.queue.ack(batch)
        target.stats.sent_alerts += len(batch)

    async def _post(self, target: _Target, batch: list[Notification], now: float) -> None:
        """POST ``batch``; every failure leaves as AlertDeliveryError (the httpx boundary)."""
        body = json.dumps([self._payload(n, now) for n in batch]).encode()
        headers = {"Content-Type": "application/json"}
        try:
            response = await self._client.post(
                target.url, content=body, headers=headers, timeout=self.timeout_s
            )
        except httpx.HTTPError as exc:
            reason = type(exc).__name__
            raise AlertDeliveryError(f"alertmanager {target.name}: {reason}") from None
        if response.status_code >= 300:
            code = response.status_code
            rejected = 400 <= code < 500 and code not in _RETRYABLE_4XX
            kind = _Rejected if rejected else AlertDeliveryError
            raise kind(f"alertmanager {target.name}: HTTP {code}: {response.text[:200]!r}")

    def _payload(self, note: Notification, now: float) -> dict[str, object]:
        ends = note.ends_at if note.ends_at is not None else now + 4 * self.resend_interval_s
        return {
            "labels": dict(note.labels),
            "annotations": dict(note.annotations),
            "startsAt": _iso(note.starts_at),
            "endsAt": _iso(ends),
        }
