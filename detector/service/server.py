"""The daemon's HTTP server: GET /metrics, /healthz, /readyz and, when remote write is on,
POST /api/v1/write, on asyncio streams.

No framework: four endpoints do not need one. Contract:

- ``/metrics``: the exporter's exposition (OpenMetrics when the Accept header asks for it).
  ``/summary`` (only with a ``summary`` source): the node summary a fleet reads (summary.py).
  ``/healthz``: 200 while the process serves. ``/readyz``: 200 after the first completed tick
  while the latest one is at most 3 scrape intervals old, else 503 with the reason.
- ``/api/v1/write`` (only with a ``remote_write`` sink, see ``RemoteWriteSink``): Prometheus
  remote-write 1.0; POST only (405 otherwise); 204 once the samples are admitted; 400 with
  the reason for an unreadable request, 415 for another protocol version, 413 for a body over
  ``remote_write.max_body_bytes`` or a declared decompressed size over its limit.
- One request per connection (``Connection: close``); GET and HEAD only elsewhere (405).
- Limits: a request head over ``max_request_bytes`` gets 431, a body over it 413 (over the
  sink's ``max_body_bytes`` on /api/v1/write), chunked bodies 400; a client that has not sent
  its whole request within ``request_timeout_s`` is disconnected; over ``max_connections``
  concurrent connections get 503.
- TLS when ``tls_cert``/``tls_key`` are set. Basic auth when ``basic_auth`` has users: hashes
  are ``sha256:<hex>`` (checked with ``hmac.compare_digest``) or bcrypt, which needs the
  ``bcrypt`` package: without it ``start_server`` refuses bcrypt hashes with a ConfigError.
  /healthz and /readyz stay open (probes carry no credentials and they reveal nothing);
  /api/v1/write needs the credentials too (Prometheus' ``remote_write.basic_auth``).
  Credentials and hashes are never logged.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import importlib
import importlib.util
import ssl
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from ..config import Config
from ..errors import ConfigError, RemoteWriteError
from ..logs import get_logger
from .summary import SUMMARY_PATH

__all__ = [
    "WRITE_PATH",
    "MetricsSource",
    "Readiness",
    "RemoteWriteSink",
    "Server",
    "start_server",
    "tls_context",
]

log = get_logger(component="server")
_REASONS = {
    200: "OK",
    204: "No Content",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}
_OPEN_PATHS = ("/healthz", "/readyz")
WRITE_PATH = "/api/v1/write"
# RemoteWriteError reasons that are not a plain 400
_WRITE_STATUS = {"too_large": 413, "unsupported_media_type": 415}
_DUMMY_HASH = "sha256:" + "0" * 64  # compared against for unknown users: uniform timing


class MetricsSource(Protocol):
    def render(self, accept: str | None = None) -> tuple[bytes, str]: ...


class RemoteWriteSink(Protocol):
    """Where POST /api/v1/write bodies go (ingest.RemoteWriteSource)."""

    max_body_bytes: int

    def receive(self, body: bytes, headers: Mapping[str, str]) -> object:
        """Admit a request; raise RemoteWriteError when it cannot be read."""
        ...

    def refused(self, reason: str) -> None:
        """Count a request the server refused before reading its body."""
        ...


class Readiness:
    """Ready after the first completed tick while ticks are fresh (<= ``stale_after`` intervals
    old) and, when it scrapes targets, while some target answered within ``stale_after``
    intervals: a detector whose every scrape fails scores nothing and is not ready. While the
    statistics still learn (``warming``), the reason says what and until when (still ready:
    peer comparisons score from the first tick)."""

    def __init__(
        self, interval_s: float, clock: Callable[[], float] = time.monotonic, stale_after: int = 3
    ) -> None:
        self.interval_s = interval_s
        self.clock = clock
        self.stale_after = stale_after
        self.last_tick: float | None = None
        self.last_scrape_ok: float | None = None
        self.warming = ""  # what still learns and until when; "" once every scorer has

    def tick_done(self, scraped_ok: bool | None = None) -> None:
        """A tick finished; ``scraped_ok``: some target answered (None: nothing to scrape)."""
        now = self.clock()
        self.last_tick = now
        if scraped_ok is None or scraped_ok:
            self.last_scrape_ok = now

    def status(self) -> tuple[bool, str]:
        if self.last_tick is None:
            return False, "no tick completed yet"
        now = self.clock()
        limit = self.stale_after * self.interval_s
        age = now - self.last_tick
        if age > limit:
            return False, f"last tick {age:.0f}s ago (> {self.stale_after} intervals)"
        if self.last_scrape_ok is None or now - self.last_scrape_ok > limit:
            return False, f"no target scraped successfully for > {self.stale_after} intervals"
        return True, f"ready; {self.warming}" if self.warming else "ready"


class _Reject(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def tls_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A server TLS context (TLS >= 1.2); unreadable or mismatched files raise ConfigError."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"server.tls_cert/tls_key ({cert}, {key}): {exc}") from None
    return context


def _check_hashes(users: Mapping[str, str]) -> None:
    bcrypt_users = sorted(u for u, h in users.items() if h.startswith("$2"))
    if bcrypt_users and importlib.util.find_spec("bcrypt") is None:
        raise ConfigError(
            f"server.basic_auth: users {bcrypt_users} have bcrypt hashes but the 'bcrypt' "
            "package is not installed; install it or use 'sha256:<64 hex digits>' hashes"
        )


def _password_ok(stored: str, password: bytes) -> bool:
    if stored.startswith("sha256:"):
        return hmac.compare_digest(hashlib.sha256(password).hexdigest(), stored[7:].lower())
    bcrypt: Any = importlib.import_module("bcrypt")
    return bool(bcrypt.checkpw(password, stored.encode()))


class Server:
    """A running server; ``port`` is the bound port (useful with port 0)."""

    def __init__(
        self,
        config: Config,
        export: MetricsSource,
        readiness: Readiness,
        remote_write: RemoteWriteSink | None = None,
    ) -> None:
        srv = config.server
        self.limits = (srv.max_request_bytes, srv.request_timeout_s, srv.max_connections)
        self.users = {u: h.get_secret_value() for u, h in srv.basic_auth.items()}
        self.export = export
        self.readiness = readiness
        self.remote_write = remote_write
        self.summary: MetricsSource | None = None  # GET /summary (start_server's summary)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._active = 0

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        max_bytes, timeout_s, max_connections = self.limits
        self._active += 1
        try:
            if self._active > max_connections:
                response = self._response(503, b"too many connections\n")
            else:
                try:
                    response = await asyncio.wait_for(self._serve(reader, max_bytes), timeout_s)
                except _Reject as exc:
                    response = self._response(exc.status, f"{exc}\n".encode())
            writer.write(response)
            await asyncio.wait_for(writer.drain(), timeout_s)
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass  # slow, vanished or broken client: just close
        finally:
            self._active -= 1
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, max_bytes: int) -> bytes:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            raise _Reject(431, "request head too large") from None
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            raise _Reject(400, "malformed request line")
        method, target = parts[0], parts[1]
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, sep, value = line.partition(":")
                if not sep:
                    raise _Reject(400, "malformed header line")
                headers[name.strip().lower()] = value.strip()
        if "transfer-encoding" in headers:
            raise _Reject(400, "chunked request bodies are not accepted")
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError:
            raise _Reject(400, "bad Content-Length") from None
        path = target.split("?", 1)[0]
        writing = self.remote_write is not None and path == WRITE_PATH
        if writing and self.remote_write is not None and length > self.remote_write.max_body_bytes:
            self.remote_write.refused("too_large")
            limit = self.remote_write.max_body_bytes
            raise _Reject(413, f"body larger than remote_write.max_body_bytes ({limit})")
        if length < 0 or (not writing and len(head) + length > max_bytes):
            raise _Reject(413, f"request larger than {max_bytes} bytes")
        if writing and self.users and not self._authorized(headers):  # before reading the body
            raise _Reject(401, "unauthorized")
        payload = await reader.readexactly(length)  # only /api/v1/write reads a body
        if writing:
            status, body, content_type = self._write(method, headers, payload)
        else:
            status, body, content_type = self._route(method, path, headers)
        log.debug("http request", method=method, path=path, status=status)
        allow = "POST" if writing else "GET, HEAD"
        return self._response(status, body, content_type, head_only=method == "HEAD", allow=allow)

    def _route(self, method: str, path: str, headers: dict[str, str]) -> tuple[int, bytes, str]:
        text = "text/plain; charset=utf-8"
        if method not in ("GET", "HEAD"):
            return 405, b"only GET and HEAD\n", text
        if self.users and path not in _OPEN_PATHS and not self._authorized(headers):
            return 401, b"unauthorized\n", text
        if path == "/metrics":
            body, content_type = self.export.render(headers.get("accept"))
            return 200, body, content_type
        if path == SUMMARY_PATH and self.summary is not None:
            body, content_type = self.summary.render(headers.get("accept"))
            return 200, body, content_type
        if path == "/healthz":
            return 200, b"ok\n", text
        if path == "/readyz":
            ready, reason = self.readiness.status()
            return (200 if ready else 503), f"{reason}\n".encode(), text
        return 404, b"not found: try /metrics, /summary, /healthz, /readyz\n", text

    def _write(
        self, method: str, headers: dict[str, str], payload: bytes
    ) -> tuple[int, bytes, str]:
        text = "text/plain; charset=utf-8"
        if method != "POST":
            return 405, f"only POST on {WRITE_PATH}\n".encode(), text
        assert self.remote_write is not None
        try:
            self.remote_write.receive(payload, headers)
        except RemoteWriteError as exc:
            log.warning("remote write refused", reason=exc.reason, detail=exc.detail)
            return _WRITE_STATUS.get(exc.reason, 400), f"{exc}\n".encode(), text
        return 204, b"", text

    def _authorized(self, headers: dict[str, str]) -> bool:
        scheme, _, credential = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user, _, password = base64.b64decode(credential, validate=True).partition(b":")
        except (binascii.Error, ValueError):
            return False
        stored = self.users.get(user.decode("utf-8", "replace"))
        ok = _password_ok(stored or _DUMMY_HASH, password)
        return ok and stored is not None

    def _response(
        self,
        status: int,
        body: bytes,
        content_type: str = "text/plain; charset=utf-8",
        *,
        head_only: bool = False,
        allow: str = "GET, HEAD",
    ) -> bytes:
        lines = [
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}",
            f"Content-Type: {content_type}",
            f"Content-Length: {len(body)}",
            "Connection: close",
        ]
        if status == 401:
            lines.append('WWW-Authenticate: Basic realm="detector", charset="UTF-8"')
        if status == 405:
            lines.append(f"Allow: {allow}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return head if head_only else head + body


async def start_server(
    config: Config,
    export: MetricsSource,
    readiness: Readiness,
    *,
    host: str | None = None,
    port: int | None = None,
    remote_write: RemoteWriteSink | None = None,
    summary: MetricsSource | None = None,
) -> Server:
    """Listen on ``config.server.listen`` (``host``/``port`` override it; port 0 picks one);
    ``remote_write`` set: POST /api/v1/write goes to it; ``summary`` set: GET /summary.

    Raises ConfigError for unusable TLS files, bcrypt hashes without the bcrypt package, or an
    address it cannot listen on (a taken port).
    """
    srv = config.server
    server = Server(config, export, readiness, remote_write)
    server.summary = summary
    _check_hashes(server.users)
    context = tls_context(srv.tls_cert, srv.tls_key) if srv.tls_cert and srv.tls_key else None
    bind_host = host if host is not None else srv.host
    bind_port = port if port is not None else srv.port
    try:
        server._server = await asyncio.start_server(
            server._handle,
            bind_host,
            bind_port,
            ssl=context,
            ssl_handshake_timeout=srv.request_timeout_s if context else None,
            limit=srv.max_request_bytes,
        )
    except OSError as exc:  # a taken port, an address this host does not have
        raise ConfigError(
            f"server.listen {bind_host}:{bind_port}: cannot listen: {exc.strerror or exc} "
            "(another detector or program on that port? set server.listen)"
        ) from None
    server.port = int(server._server.sockets[0].getsockname()[1])
    log.info("http server listening", port=server.port, tls=context is not None)
    return server
