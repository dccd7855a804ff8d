"""Scraper connections: one kept-alive connection per target reused across rounds, closed when
the target leaves the list, and an injected client used for every target and left open."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx
import pytest

from detector.ingest.scrape import Scraper
from detector.ingest.targets import make_target

PAGE = b'temp{gpu="0"} 40\n'
RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(PAGE), PAGE)
GUARD_S = 10.0  # a connection that is never closed fails the test instead of hanging it


@dataclass
class KeepAliveServer:
    """Loopback HTTP/1.1 server answering PAGE; counts connections opened and closed."""

    opened: int = 0
    closed: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.opened += 1
        try:
            while await reader.readline():
                while await reader.readline() not in (b"\r\n", b""):
                    pass
                writer.write(RESPONSE)
                await writer.drain()
        finally:
            self.closed += 1
            self.changed.set()
            writer.close()


@pytest.fixture
async def server() -> AsyncIterator[tuple[KeepAliveServer, str]]:
    state = KeepAliveServer()
    listener = await asyncio.start_server(state.handle, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    yield state, f"http://127.0.0.1:{port}"
    listener.close()
    await listener.wait_closed()


async def test_each_target_keeps_one_connection_across_rounds(
    server: tuple[KeepAliveServer, str],
) -> None:
    """Three rounds over three targets open three connections, one per target."""
    state, base = server
    targets = [make_target(f"{base}/n{i}", node=f"n{i}") for i in range(3)]
    async with Scraper(timeout_s=5.0, jitter_fraction=0.0) as scraper:
        for _ in range(3):
            results = await scraper.scrape_targets(targets)
            assert [None] * 3 == [r.error for r in results]
        assert (3, 0) == (state.opened, state.closed)


async def test_target_leaving_the_list_has_its_connection_closed(
    server: tuple[KeepAliveServer, str],
) -> None:
    """A round without a target closes that target's connection; the others stay open."""
    state, base = server
    targets = [make_target(f"{base}/n{i}", node=f"n{i}") for i in range(3)]
    async with Scraper(timeout_s=5.0, jitter_fraction=0.0) as scraper:
        await scraper.scrape_targets(targets)
        state.changed.clear()
        await scraper.scrape_targets(targets[:2])
        async with asyncio.timeout(GUARD_S):
            while state.closed < 1:
                await state.changed.wait()
                state.changed.clear()
        assert (3, 1) == (state.opened, state.closed)


async def test_injected_client_serves_every_target_and_stays_open() -> None:
    """A client passed in answers every target's request and is not closed by aclose."""
    hosts: list[str] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        hosts.append(request.url.host)
        return httpx.Response(200, content=PAGE)

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    targets = [make_target(f"http://h{i}:9400/metrics", node=f"h{i}") for i in range(3)]
    async with Scraper(client, timeout_s=5.0, jitter_fraction=0.0) as scraper:
        await scraper.scrape_targets(targets)
    assert ["h0", "h1", "h2"] == sorted(hosts)
    assert not client.is_closed
    await client.aclose()
