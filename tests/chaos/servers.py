"""Misbehaving scrape targets on loopback, for chaos tests and bench/chaos_bench.py.

``ChaosFarm`` runs one asyncio loop in a background thread and serves one small HTTP/1.0
server per misbehaving target (port 0, loopback). Each server has a ``kind``:

==============  ==========================================================================
hung            accepts, reads the request, never answers (holds the socket until closed)
slow            answers the upstream page correctly, but only after ``slow_s`` (> timeout)
garbage         200 with seeded random bytes (no parsable sample)
oversized       200, chunked, valid-looking samples far past any sane body limit
http500         500 Internal Server Error
flapping        alternates per request: the upstream page, then a 503
counter_reset   the upstream page with every counter restarted from 0 every
                ``reset_every`` requests (an exporter restart): counters go down
proxy           the upstream page as is (a well-behaved target to switch off and on)
==============  ==========================================================================

Any server whose ``down`` is set closes each connection without a word (a dead exporter).

"upstream" is the simulator's URL of the same node and page, fetched per request, so the
proxied pages carry real, moving data. ``close()`` stops every server and the thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from urllib.parse import urlsplit

KINDS = ("hung", "slow", "garbage", "oversized", "http500", "flapping", "counter_reset")
ALL_KINDS = (*KINDS, "proxy")


async def fetch(url: str, timeout_s: float = 5.0) -> bytes:
    """GET ``url`` (plain HTTP on loopback) and return the body; raises OSError on failure."""
    parts = urlsplit(url)
    async with asyncio.timeout(timeout_s):
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
        try:
            writer.write(f"GET {parts.path} HTTP/1.0\r\nHost: {parts.netloc}\r\n\r\n".encode())
            await writer.drain()
            raw = await reader.read()
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
    head, _, body = raw.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.") or b" 200 " not in head.split(b"\r\n", 1)[0] + b" ":
        raise OSError(f"upstream {url}: {head[:60]!r}")
    return body


def reset_counters(body: bytes, baseline: dict[bytes, float], rebase: bool) -> bytes:
    """Counters of ``body`` minus ``baseline`` (per series); ``rebase``: the current values
    become the new baseline first, i.e. every counter restarts from 0 now."""
    out: list[bytes] = []
    counters: set[bytes] = set()
    for line in body.split(b"\n"):
        if line.startswith(b"# TYPE "):
            fields = line.split()
            if len(fields) == 4 and fields[3] == b"counter":
                counters.add(fields[2])
            out.append(line)
            continue
        if not line or line.startswith(b"#"):
            out.append(line)
            continue
        end = line.rfind(b"}")
        split = line.find(b" ", end + 1 if end >= 0 else 0)
        series, rest = line[:split], line[split + 1 :].split(b" ")
        name = series.split(b"{", 1)[0]
        if name not in counters and not name.endswith(b"_total"):
            out.append(line)
            continue
        try:
            value = float(rest[0])
        except ValueError:
            out.append(line)
            continue
        if rebase or series not in baseline:
            baseline[series] = value if rebase else 0.0
        rest[0] = repr(max(0.0, value - baseline[series])).encode()
        out.append(series + b" " + b" ".join(rest))
    return b"\n".join(out)


@dataclass
class ChaosServer:
    """One misbehaving target; ``url`` is where to scrape it."""

    kind: str
    upstream: str
    url: str = ""
    requests: int = 0
    seed: int = 0
    down: bool = False  # set from any thread: connections are closed unanswered
    baseline: dict[bytes, float] = field(default_factory=dict)


class ChaosFarm:
    """Misbehaving servers on one background loop (see the module docstring)."""

    def __init__(
        self,
        *,
        slow_s: float = 2.0,
        oversized_bytes: int = 4 * 1024 * 1024,
        reset_every: int = 3,
    ) -> None:
        self.slow_s = slow_s
        self.oversized_bytes = oversized_bytes
        self.reset_every = reset_every
        self.servers: list[ChaosServer] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="chaos", daemon=True)
        self._thread.start()
        self._asyncio_servers: list[asyncio.Server] = []
        self._held: set[asyncio.StreamWriter] = set()

    def add(self, kind: str, upstream: str) -> ChaosServer:
        """Start a server of ``kind`` in front of ``upstream``; returns it (``.url`` set)."""
        if kind not in ALL_KINDS:
            raise ValueError(f"unknown chaos kind {kind!r}; one of {ALL_KINDS}")
        server = ChaosServer(kind, upstream, seed=len(self.servers))
        self._call(self._start(server))
        self.servers.append(server)
        return server

    def close(self) -> None:
        """Stop every server, drop held connections, end the loop and join the thread."""
        if not self._thread.is_alive():
            return
        self._call(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    def __enter__(self) -> ChaosFarm:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, coro: Coroutine[None, None, None]) -> None:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        future.result(10)

    async def _start(self, server: ChaosServer) -> None:
        def handler(
            reader: asyncio.StreamReader, writer: asyncio.StreamWriter
        ) -> asyncio.Task[None]:
            return asyncio.ensure_future(self._handle(server, reader, writer))

        srv = await asyncio.start_server(handler, "127.0.0.1", 0, backlog=256)
        self._asyncio_servers.append(srv)
        server.url = f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}/metrics"

    async def _stop(self) -> None:
        for srv in self._asyncio_servers:
            srv.close()
        for writer in list(self._held):
            writer.close()
        for srv in self._asyncio_servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(srv.wait_closed(), 30)
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _handle(
        self, server: ChaosServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self._held.add(writer)
        try:
            await reader.readuntil(b"\r\n\r\n")
            if server.down:
                return
            server.requests += 1
            respond = _BEHAVIOURS[server.kind]
            await respond(self, server, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            self._held.discard(writer)
            writer.close()

    # -- behaviours -------------------------------------------------------------------------
    async def _hung(self, server: ChaosServer, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(3600)

    async def _slow(self, server: ChaosServer, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(self.slow_s)
        await _send(writer, 200, await fetch(server.upstream))

    async def _garbage(self, server: ChaosServer, writer: asyncio.StreamWriter) -> None:
        rng = random.Random(server.seed * 1000 + server.requests)
        await _send(writer, 200, bytes(rng.getrandbits(8) for _ in range(4096)))

    async def _oversized(self, server: ChaosServer, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n")
        writer.write(b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
        line = b'huge_metric{series="%d"} 1\n'
        chunk = b"".join(line % i for i in range(2000))
        sent = 0
        while sent < self.oversized_bytes:
            writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            await writer.drain()
            sent += len(chunk)
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def _http500(self, server: ChaosServer, writer: asyncio.StreamWriter) -> None:
        await _send(writer, 500, b"internal error\n")

    async def _flapping(self, server: ChaosServer, writer: asyncio.StreamWriter) -> None:
        if server.requests % 2:
            await _send(writer, 200, await fetch(server.upstream))
        else:
            await _send(writer, 503, b"exporter restarting\n")

    async def _counter_reset(self, server: ChaosServer, writer: asyncio.StreamWriter) -> None:
        body = await fetch(server.upstream)
        rebase = server.requests % self.reset_every == 0
        await _send(writer, 200, reset_counters(body, server.baseline, rebase))

    async def _proxy(self, server: ChaosServer, writer: asyncio.StreamWriter) -> None:
        await _send(writer, 200, await fetch(server.upstream))


async def _send(writer: asyncio.StreamWriter, status: int, body: bytes) -> None:
    reason = {200: "OK", 500: "Internal Server Error", 503: "Service Unavailable"}[status]
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; version=0.0.4\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    writer.write(head.encode() + body)
    await writer.drain()


_BEHAVIOURS: dict[str, Callable[..., Awaitable[None]]] = {
    "hung": ChaosFarm._hung,
    "slow": ChaosFarm._slow,
    "garbage": ChaosFarm._garbage,
    "oversized": ChaosFarm._oversized,
    "http500": ChaosFarm._http500,
    "flapping": ChaosFarm._flapping,
    "counter_reset": ChaosFarm._counter_reset,
    "proxy": ChaosFarm._proxy,
}
