"""What the end-to-end test watches: Alertmanager's webhook notifications, and snapshots of
Alertmanager's and Prometheus' alert lists taken in the background.

- ``WebhookReceiver``: a loopback HTTP server (its own thread) that records every POSTed
  Alertmanager webhook payload (``{"status", "groupLabels", "alerts": [...]}``) with its
  arrival time. It answers 200 so Alertmanager does not retry.
- ``Poller``: a thread that GETs a few JSON URLs every ``interval_s`` and keeps every answer
  (failures are kept as None). An alert that fires and resolves between two test steps is
  still in the history: tests assert on what was seen, whatever order they run in.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx


@dataclass(frozen=True)
class Notification:
    """One webhook POST from Alertmanager."""

    arrived: float  # time.monotonic()
    path: str
    payload: dict[str, Any]

    @property
    def status(self) -> str:
        return str(self.payload.get("status", ""))

    @property
    def group_labels(self) -> dict[str, str]:
        return dict(self.payload.get("groupLabels", {}))

    @property
    def alerts(self) -> list[dict[str, Any]]:
        return list(self.payload.get("alerts", []))


class WebhookReceiver:
    """See the module docstring. ``url``: where Alertmanager should POST."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._received: list[Notification] = []
        self.bad_requests: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                try:
                    payload = json.loads(body)
                except ValueError:
                    receiver.bad_requests.append(body[:200].decode(errors="replace"))
                    self.send_response(400)
                else:
                    with receiver._lock:
                        receiver._received.append(
                            Notification(time.monotonic(), self.path, payload)
                        )
                    self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="e2e-webhook", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/hook"

    def received(self) -> list[Notification]:
        with self._lock:
            return list(self._received)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


@dataclass
class Poller:
    """See the module docstring. ``urls``: name -> URL; ``history(name)``: (time, JSON|None)."""

    urls: Mapping[str, str]
    interval_s: float = 0.25
    _history: dict[str, list[tuple[float, Any]]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="e2e-poller", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with httpx.Client(timeout=2.0) as client:
            while not self._stop.is_set():
                for name, url in self.urls.items():
                    try:
                        response = client.get(url)
                        answer = response.json() if response.status_code == 200 else None
                    except (httpx.HTTPError, ValueError):
                        answer = None
                    with self._lock:
                        self._history.setdefault(name, []).append((time.monotonic(), answer))
                self._stop.wait(self.interval_s)

    def history(self, name: str) -> list[tuple[float, Any]]:
        with self._lock:
            return list(self._history.get(name, []))

    def first(self, name: str, match: Callable[[Any], bool]) -> tuple[float, Any] | None:
        """The first recorded answer of ``name`` that ``match`` accepts."""
        for when, answer in self.history(name):
            if answer is not None and match(answer):
                return when, answer
        return None

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
