"""The webhook executor against a real local HTTP server: retries with backoff on 5xx,
no retry on a 4xx the receiver refuses for good, an error naming node and URL. The waits go
through a virtual sleep (recorded, never slept)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from detector.actions import ActionEngine, ActionRunner, Candidate, Decision, WebhookExecutor
from detector.config import ActionsConfig
from detector.errors import ActionError
from detector.model import XidEvent

T0 = 1_750_000_000.0


class Receiver:
    """Answers POSTs with the next status of ``statuses`` (then 200); keeps the bodies."""

    def __init__(self) -> None:
        self.statuses: list[int] = []
        self.bodies: list[dict[str, Any]] = []
        self.content_types: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                receiver.bodies.append(json.loads(self.rfile.read(length)))
                receiver.content_types.append(self.headers.get("Content-Type", ""))
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/gpu"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    thread = threading.Thread(target=r.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield r
    finally:
        r.server.shutdown()
        r.server.server_close()
        thread.join()


class VirtualSleep:
    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def _config(url: str, attempts: int = 4) -> ActionsConfig:
    return ActionsConfig(
        enabled=True,
        dry_run=False,
        kind="webhook",
        webhook={"url": url, "attempts": attempts, "backoff_s": 1.5},
    )


async def test_retries_with_backoff_until_the_receiver_takes_it(receiver: Receiver) -> None:
    """503, 503, then 200: three POSTs of the same JSON body, waits 1.5 s then 3 s."""
    receiver.statuses = [503, 503]
    sleep = VirtualSleep()
    config = _config(receiver.url)
    runner = ActionRunner(ActionEngine(config), WebhookExecutor(config, sleep=sleep))
    failure = Candidate.from_xid(XidEvent(time=T0, node="gpu-04", gpu="1", xid=48), "memory")
    await runner.step(T0, [failure], n_nodes=63)
    await runner.executor.aclose()
    assert [1.5, 3.0] == sleep.waits
    assert 3 == len(receiver.bodies)
    expected = {
        "event": "exclude",
        "node": "gpu-04",
        "time": "2025-06-15T15:06:40Z",
        "reason": "failure XID 48 on GPU 1",
        "failure_class": "memory",
        "evidence": ["xid_48"],
        "alert_id": "xid48:gpu-04/1@1750000000",
        "by": "detector",
    }
    assert [expected] * 3 == receiver.bodies
    assert {"application/json"} == set(receiver.content_types)
    assert {("exclude", "done"): 1} == dict(runner.engine.stats().decisions)


async def test_a_refusing_receiver_is_not_retried(receiver: Receiver) -> None:
    """A 400 is final: one POST, an ActionError naming node, URL and status."""
    receiver.statuses = [400]
    sleep = VirtualSleep()
    executor = WebhookExecutor(_config(receiver.url), sleep=sleep)
    decision = Decision(action="release", node="gpu-04", time=T0, reason="r", alert_id="a")
    with pytest.raises(ActionError, match=r"release node gpu-04: POST .*/hooks/gpu failed after 1"):
        await executor.release(decision)
    await executor.aclose()
    assert [] == sleep.waits
    assert ["release"] == [b["event"] for b in receiver.bodies]


async def test_gives_up_after_the_configured_attempts(receiver: Receiver) -> None:
    """Always 500: ``attempts`` POSTs, then an error carrying the last status."""
    receiver.statuses = [500] * 10
    sleep = VirtualSleep()
    executor = WebhookExecutor(_config(receiver.url, attempts=3), sleep=sleep)
    decision = Decision(action="exclude", node="gpu-04", time=T0, reason="r", alert_id="a")
    with pytest.raises(ActionError, match=r"failed after 3 attempt\(s\): HTTP 500"):
        await executor.apply(decision)
    await executor.aclose()
    assert 3 == len(receiver.bodies)
    assert [1.5, 3.0] == sleep.waits


async def test_an_unreachable_receiver_is_retried_then_reported() -> None:
    """A refused connection is retried like a 5xx, then named in the error."""
    sleep = VirtualSleep()
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.server_close()  # nothing listens there now
    executor = WebhookExecutor(_config(url, attempts=2), sleep=sleep)
    decision = Decision(action="exclude", node="gpu-04", time=T0, reason="r", alert_id="a")
    with pytest.raises(ActionError, match=r"failed after 2 attempt\(s\): ConnectError"):
        await executor.apply(decision)
    await executor.aclose()
    assert [1.5] == sleep.waits
