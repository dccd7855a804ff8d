"""The daemon's HTTP server: endpoints, readiness, limits, basic auth, TLS."""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import importlib.util
import ipaddress
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from detector.config.load import Config
from detector.errors import ConfigError
from detector.service.export import Exporter
from detector.service.server import Readiness, Server, start_server, tls_context

BCRYPT = "$2b$12$" + "a" * 53


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def config(**server: Any) -> Config:
    return Config.model_validate({"scrape": {"interval_s": 15, "timeout_s": 5}, "server": server})


@pytest.fixture
async def served() -> AsyncIterator[tuple[Server, FakeClock]]:
    clock = FakeClock()
    readiness = Readiness(15.0, clock=clock)
    server = await start_server(
        config(request_timeout_s=0.5, max_request_bytes=2048),
        Exporter(CollectorRegistry(), version="t"),
        readiness,
        host="127.0.0.1",
        port=0,
    )
    yield server, clock
    await server.close()


async def raw(port: int, data: bytes, *, tls: ssl.SSLContext | None = None) -> bytes:
    """Send ``data`` on a fresh connection and read until the server closes it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls)
    writer.write(data)
    await writer.drain()
    reply = await asyncio.wait_for(reader.read(), 120)  # a hang guard: it takes milliseconds
    writer.close()
    return reply


async def test_metrics_healthz_and_unknown_paths(served: tuple[Server, FakeClock]) -> None:
    """/metrics serves the exposition, /healthz ok, unknown paths 404, POST 405."""
    server, _ = served
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as client:
        metrics = await client.get("/metrics")
        assert 200 == metrics.status_code
        assert 'detector_build_info{version="t"} 1.0' in metrics.text
        assert (200, "ok\n") == ((r := await client.get("/healthz")).status_code, r.text)
        assert 404 == (await client.get("/nope")).status_code
        assert 405 == (await client.post("/metrics", content=b"x")).status_code
        head = await client.head("/metrics")
        assert (200, b"") == (head.status_code, head.content)


async def test_readyz_after_first_tick_until_ticks_go_stale(
    served: tuple[Server, FakeClock],
) -> None:
    """Not ready before a tick, ready after one, not ready once > 3 intervals old."""
    server, clock = served
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as client:
        assert 503 == (await client.get("/readyz")).status_code
        server.readiness.tick_done()
        clock.t += 45  # exactly 3 intervals: still fresh
        assert 200 == (await client.get("/readyz")).status_code
        clock.t += 1
        stale = await client.get("/readyz")
        assert 503 == stale.status_code
        assert "46s ago" in stale.text


async def test_oversized_requests_are_rejected(served: tuple[Server, FakeClock]) -> None:
    """A head over the limit gets 431, a body over it 413, a chunked body 400."""
    server, _ = served
    big_header = b"GET /metrics HTTP/1.1\r\nX-Pad: " + b"a" * 4096 + b"\r\n\r\n"
    assert (await raw(server.port, big_header)).startswith(b"HTTP/1.1 431 ")
    big_body = b"GET /metrics HTTP/1.1\r\nContent-Length: 100000\r\n\r\n"
    assert (await raw(server.port, big_body)).startswith(b"HTTP/1.1 413 ")
    chunked = b"GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    assert (await raw(server.port, chunked)).startswith(b"HTTP/1.1 400 ")
    assert (await raw(server.port, b"garbage\r\n\r\n")).startswith(b"HTTP/1.1 400 ")


async def test_slow_client_is_disconnected(served: tuple[Server, FakeClock]) -> None:
    """A client that never finishes its request is dropped without a response."""
    server, _ = served
    assert b"" == await raw(server.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n")


async def test_too_many_connections_get_503() -> None:
    """Connections beyond max_connections are answered 503 at once."""
    server = await start_server(
        config(max_connections=1, request_timeout_s=5),
        Exporter(CollectorRegistry(), version="t"),
        Readiness(15.0),
        host="127.0.0.1",
        port=0,
    )
    try:
        _, holder = await asyncio.open_connection("127.0.0.1", server.port)  # never completes
        await asyncio.sleep(0.05)
        reply = await raw(server.port, b"GET /healthz HTTP/1.1\r\n\r\n")
        assert reply.startswith(b"HTTP/1.1 503 ")
        holder.close()
    finally:
        await server.close()


async def test_basic_auth_protects_metrics_not_probes() -> None:
    """Without or with wrong credentials /metrics is 401; right ones 200; probes stay open."""
    digest = hashlib.sha256(b"s3cret").hexdigest()
    server = await start_server(
        config(basic_auth={"ops": f"sha256:{digest}"}),
        Exporter(CollectorRegistry(), version="t"),
        Readiness(15.0),
        host="127.0.0.1",
        port=0,
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as client:
            denied = await client.get("/metrics")
            assert 401 == denied.status_code
            assert denied.headers["www-authenticate"].startswith("Basic")
            assert 401 == (await client.get("/metrics", auth=("ops", "wrong"))).status_code
            assert 401 == (await client.get("/metrics", auth=("eve", "s3cret"))).status_code
            assert 200 == (await client.get("/metrics", auth=("ops", "s3cret"))).status_code
            assert 200 == (await client.get("/healthz")).status_code
    finally:
        await server.close()


async def test_bcrypt_hashes_need_the_bcrypt_package() -> None:
    """Without the bcrypt package a bcrypt hash is refused with an actionable ConfigError."""
    if importlib.util.find_spec("bcrypt") is not None:
        pytest.skip("bcrypt installed: hashes are usable")
    with pytest.raises(ConfigError, match=r"users \['ops'\] have bcrypt hashes.*install") as err:
        await start_server(
            config(basic_auth={"ops": BCRYPT}),
            Exporter(CollectorRegistry(), version="t"),
            Readiness(15.0),
            host="127.0.0.1",
            port=0,
        )
    assert BCRYPT not in str(err.value)


def self_signed(tmp: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (cryptography if installed, else openssl)."""
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    if importlib.util.find_spec("cryptography") is not None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        private = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
        now = dt.datetime.now(dt.UTC)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(private.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False,
            )
            .sign(private, hashes.SHA256())
        )
        cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        key.write_bytes(
            private.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    elif shutil.which("openssl"):
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
             "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
            check=True,
            capture_output=True,
            timeout=120,
        )  # fmt: skip
    else:
        pytest.skip("neither the cryptography package nor openssl is available")
    return cert, key


async def test_tls_serves_metrics_to_a_verifying_client(tmp_path: Path) -> None:
    """With tls_cert/tls_key the server speaks HTTPS; plain HTTP gets no response."""
    cert, key = self_signed(tmp_path)
    server = await start_server(
        config(tls_cert=str(cert), tls_key=str(key), request_timeout_s=2),
        Exporter(CollectorRegistry(), version="t"),
        Readiness(15.0),
        host="127.0.0.1",
        port=0,
    )
    try:
        trust = ssl.create_default_context(cafile=str(cert))
        async with httpx.AsyncClient(verify=trust) as client:
            reply = await client.get(f"https://127.0.0.1:{server.port}/metrics")
        assert 200 == reply.status_code
        assert "detector_build_info" in reply.text
        assert not (await raw(server.port, b"GET /metrics HTTP/1.1\r\n\r\n")).startswith(b"HTTP")
    finally:
        await server.close()


def test_unusable_tls_files_raise_config_error(tmp_path: Path) -> None:
    """A missing or non-PEM certificate is a ConfigError naming the files."""
    bogus = tmp_path / "cert.pem"
    bogus.write_text("not a certificate")
    with pytest.raises(ConfigError, match=r"tls_cert/tls_key .*cert\.pem"):
        tls_context(bogus, tmp_path / "missing.pem")
