"""A fake Alertmanager on loopback that can go down and come back on the same port.

It keeps every alert POSTed to ``/api/v2/alerts`` with its arrival (wall) time and answers
200; ``down()`` closes the listening socket (connections are refused, as for a stopped
process) and ``up()`` listens again on the same port. Only an alert's labels identify it, as
in Alertmanager (its fingerprint); ``startsAt`` tells episodes of one alert apart.
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Fingerprint = frozenset[tuple[str, str]]


def parse_time(text: str) -> float:
    """An Alertmanager RFC 3339 time as unix seconds."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC).timestamp()


@dataclass
class Received:
    """One alert as it arrived."""

    labels: dict[str, str]
    starts_at: str
    ends_at: str
    arrived: float  # the fake's clock (the daemon's, in tests with a fast clock)

    @property
    def fingerprint(self) -> Fingerprint:
        return frozenset(self.labels.items())


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


@dataclass
class FakeAlertmanager:
    """See the module docstring. ``port`` 0 picks one at the first ``up()``."""

    port: int = 0
    clock: Callable[[], float] = time.time  # arrival stamps: the daemon's clock
    received: list[Received] = field(default_factory=list)
    posts: int = 0
    _server: _Server | None = None
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def up(self) -> FakeAlertmanager:
        farm = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                now = farm.clock()
                with farm._lock:
                    farm.posts += 1
                    for alert in json.loads(body):
                        farm.received.append(
                            Received(alert["labels"], alert["startsAt"], alert["endsAt"], now)
                        )
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                return

        self._server = _Server(("127.0.0.1", self.port), Handler)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def down(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def alerts(self, **labels: str) -> list[Received]:
        with self._lock:
            return [a for a in self.received if labels.items() <= a.labels.items()]

    def firing(self, **labels: str) -> list[Received]:
        """Updates that said "firing" on arrival (endsAt in the future)."""
        return [a for a in self.alerts(**labels) if parse_time(a.ends_at) > a.arrived]

    def resolved(self, **labels: str) -> list[Received]:
        """Updates that said "resolved" on arrival (endsAt not after it)."""
        return [a for a in self.alerts(**labels) if parse_time(a.ends_at) <= a.arrived]

    def episodes(self, alerts: Iterable[Received] | None = None) -> dict[Fingerprint, set[str]]:
        """Distinct startsAt per fingerprint: more than one for an alert is a duplicate."""
        out: dict[Fingerprint, set[str]] = defaultdict(set)
        for a in self.alerts() if alerts is None else alerts:
            out[a.fingerprint].add(a.starts_at)
        return dict(out)

    def latest(self) -> dict[Fingerprint, Received]:
        """The last update of every alert (what Alertmanager would show now)."""
        out: dict[Fingerprint, Received] = {}
        for a in self.alerts():
            out[a.fingerprint] = a
        return out

    def __enter__(self) -> FakeAlertmanager:
        return self.up()

    def __exit__(self, *exc: Any) -> None:
        self.down()
