"""Scraping: every target of a tick concurrently, bounded in time and size, into one frame.

Contract
    ``Scraper.scrape_all(targets, index, now)`` scrapes all targets concurrently (one pooled
    ``httpx.AsyncClient`` per target, connections kept alive across ticks) and returns a
    :class:`ScrapeRound`: the tick's :class:`Frame` (values aligned to ``index``, NaN where
    unseen, columns via ``index.columns`` with the target labels as ``extra``), per-target
    :class:`TargetScrape` results and the declared metric types. ``scrape_targets(targets)``
    is the same without the index (``detector record`` uses it).

    Time: every download of a round ends within ``timeout_s`` of the round's start, whatever
    the targets do (parsing the bodies then adds its CPU time). Each target starts after a
    deterministic jitter of up to ``jitter_fraction * timeout_s`` (spreads the connects and
    the load on exporters; the same URL always gets the same offset) and must finish by the
    round's deadline, so a slow or hung target costs its own scrape, never the tick.

    Failures are per target, never raised: httpx errors are translated here (and only here)
    into :class:`~detector.errors.ScrapeError` with ``reason`` one of ``timeout``,
    ``connect``, ``http_<status>``, ``body_too_large`` (the decoded body passed
    ``body_limit_bytes`` while streaming: the download is aborted), ``parse`` (nothing
    parsable). A failed target is ``up`` 0. Partial problems keep the target up and are
    ``warnings``: ``parse`` (bad lines dropped, good lines kept) and ``too_many_series``
    (more than ``max_series_per_target`` samples: the first ones kept).

    Health series, as Prometheus writes them, are added to the frame per target with its
    target labels: ``up`` (1/0), ``scrape_duration_seconds``, ``scrape_samples_scraped``
    (samples in the payload, before the cap). Where the index merges several targets into one
    health column (a node's dcgm and node exporters without a ``job`` label: ``instance`` is
    a context label; with one, each job has its own, see series.SCRAPE_HEALTH_METRICS), the
    column shows the worst case: min of ``up``, max of the duration, sum of the samples, so
    one exporter of a node going down is never hidden by the other.

    Values are kept as exposed (NaN, +Inf; counter resets are the signal stage's business).
"""

from __future__ import annotations

import asyncio
import ssl
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType

import httpx
import numpy as np

from ..config import ScrapeConfig
from ..errors import ParseError, ScrapeError
from ..logs import get_logger
from ..model import Exposition, FloatArray, Frame, IntArray
from ..series import SCRAPE_HEALTH_METRICS, SeriesIndex
from .parse import parse_exposition, split_series
from .targets import Target

__all__ = ["HEALTH_METRICS", "ScrapeRound", "Scraper", "TargetScrape"]

HEALTH_METRICS = SCRAPE_HEALTH_METRICS
# Prometheus' own preference order; exporters that speak OpenMetrics may answer with it.
ACCEPT = "text/plain;version=0.0.4;q=1,application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.1"
_log = get_logger(component="scrape")


@dataclass(frozen=True, slots=True)
class TargetScrape:
    """One target's scrape. ``error`` set: it failed (``up`` 0, no exposition)."""

    target: Target
    duration_s: float
    samples: int = 0  # samples in the payload, before the series cap
    bad_lines: int = 0
    error: ScrapeError | None = None
    warnings: tuple[ScrapeError, ...] = ()
    exposition: Exposition | None = None  # the parsed payload, capped

    @property
    def up(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True)
class ScrapeRound:
    """One tick's scrape of every target."""

    frame: Frame
    targets: tuple[TargetScrape, ...]
    types: dict[str, str] = field(default_factory=dict)  # metric family -> declared type
    duration_s: float = 0.0

    @property
    def errors(self) -> list[ScrapeError]:
        """Every failure and warning of the round, in target order."""
        out: list[ScrapeError] = []
        for result in self.targets:
            if result.error is not None:
                out.append(result.error)
            out.extend(result.warnings)
        return out


class Scraper:
    """Scrapes targets (see the module docstring). Pass ``client`` to share or fake one (it
    is then used for every target and not closed here); without, each target gets its own
    pooled client (kept-alive connections reused tick after tick), closed when the target
    leaves the target list or by ``aclose``."""

    def __init__(
        self,
        client: httpx.AsyncClient | None = None,
        *,
        timeout_s: float = 5.0,
        body_limit_bytes: int = 32 * 1024 * 1024,
        jitter_fraction: float = 0.1,
        max_series_per_target: int = 200_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        # One client per target rather than one pool for all: httpcore 1.0's pool walks every
        # connection it holds (and polls each idle socket) whenever a request starts or ends,
        # so N kept-alive targets in one pool cost O(N^2) CPU a round (encode/httpcore#1035):
        # the whole scrape's CPU was 2.5x at 126 targets, 24x at 2,000 (63 s a tick, most
        # targets timing out), bench/daemon_bench.py.
        self._clients: dict[str, httpx.AsyncClient] = {}
        self._ssl: ssl.SSLContext | None = None  # loading the CA bundle costs ~15 ms: once
        self.timeout_s = timeout_s
        self.body_limit_bytes = body_limit_bytes
        self.jitter_fraction = jitter_fraction
        self.max_series_per_target = max_series_per_target
        self.clock = clock

    @classmethod
    def from_config(cls, scrape: ScrapeConfig, client: httpx.AsyncClient | None = None) -> Scraper:
        return cls(
            client,
            timeout_s=scrape.timeout_s,
            body_limit_bytes=scrape.body_limit_bytes,
            jitter_fraction=scrape.jitter_fraction,
            max_series_per_target=scrape.max_series_per_target,
        )

    def _client_for(self, url: str) -> httpx.AsyncClient:
        if self.client is not None:
            return self.client
        client = self._clients.get(url)
        if client is None:
            if self._ssl is None:  # what httpx builds for verify=True without trust_env
                self._ssl = httpx.create_ssl_context(trust_env=False)
            # No connection limit: a request queued behind the pool would spend its timeout
            # waiting. Proxies from the environment are not for scraping (as Prometheus:
            # none unless configured).
            client = self._clients[url] = httpx.AsyncClient(
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),
                follow_redirects=False,
                trust_env=False,
                verify=self._ssl,
            )
        return client

    async def _close_clients(self, keep: set[str]) -> None:
        for url in [u for u in self._clients if u not in keep]:
            await self._clients.pop(url).aclose()

    async def aclose(self) -> None:
        await self._close_clients(set())

    async def __aenter__(self) -> Scraper:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def jitter_s(self, target: Target) -> float:
        """Start offset of ``target`` within a round: deterministic, < jitter * timeout."""
        share = zlib.crc32(target.url.encode()) / 2**32
        return share * self.jitter_fraction * self.timeout_s

    async def scrape_targets(self, targets: Sequence[Target]) -> list[TargetScrape]:
        """Scrape every target concurrently; results in target order, within ``timeout_s``."""
        deadline = asyncio.get_running_loop().time() + self.timeout_s
        results = list(await asyncio.gather(*(self._scrape(t, deadline) for t in targets)))
        await self._close_clients({t.url for t in targets})  # targets gone from the list
        return results

    async def scrape_all(
        self, targets: Sequence[Target], index: SeriesIndex, now: float
    ) -> ScrapeRound:
        """Scrape every target and build the tick's frame at time ``now`` (unix seconds)."""
        started = self.clock()
        results = await self.scrape_targets(targets)
        types: dict[str, str] = {}
        columns: list[IntArray] = []
        values: list[FloatArray] = []
        for result in results:
            exp = result.exposition
            if exp is not None and exp.keys:
                columns.append(_columns(index, exp, result.target))
                values.append(np.asarray(exp.values, dtype=np.float64))
                for family, kind in exp.types.items():
                    types.setdefault(family, kind)
        health = np.array(
            [
                index.columns(HEALTH_METRICS, split_series, r.target.labels, essential=True)
                for r in results
            ],
            dtype=np.int64,
        ).reshape(len(results), len(HEALTH_METRICS))
        frame = np.full(len(index), np.nan)
        if columns:
            cols, vals = np.concatenate(columns), np.concatenate(values)
            keep = cols >= 0  # -1: refused, the index is at scrape.max_series_total
            frame[cols[keep]] = vals[keep]
        _put_health(frame, health, results)
        return ScrapeRound(Frame(now, frame), tuple(results), types, self.clock() - started)

    async def _scrape(self, target: Target, deadline: float) -> TargetScrape:
        await asyncio.sleep(self.jitter_s(target))
        started = self.clock()
        try:
            async with asyncio.timeout_at(deadline):
                body = await self._fetch(target)
        except ScrapeError as exc:
            return TargetScrape(target, self.clock() - started, error=exc)
        except (TimeoutError, httpx.TimeoutException):
            error = ScrapeError(target.url, "timeout", f"no complete answer in {self.timeout_s:g}s")
            return TargetScrape(target, self.clock() - started, error=error)
        except httpx.DecodingError as exc:  # e.g. a corrupt gzip body
            error = ScrapeError(target.url, "parse", f"undecodable body: {exc}")
            return TargetScrape(target, self.clock() - started, error=error)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            error = ScrapeError(target.url, "connect", f"{type(exc).__name__}: {exc}")
            return TargetScrape(target, self.clock() - started, error=error)
        return self._parse(target, body, self.clock() - started)

    async def _fetch(self, target: Target) -> bytes:
        headers = {"Accept": ACCEPT, "X-Prometheus-Scrape-Timeout-Seconds": f"{self.timeout_s:g}"}
        limit = self.body_limit_bytes
        async with self._client_for(target.url).stream(
            "GET", target.url, headers=headers, timeout=self.timeout_s
        ) as response:
            if response.status_code != 200:
                raise ScrapeError(target.url, f"http_{response.status_code}")
            declared = response.headers.get("content-length", "")
            plain = "content-encoding" not in response.headers
            if plain and declared.isdigit() and int(declared) > limit:  # refuse before reading
                raise ScrapeError(target.url, "body_too_large", f"{declared} > {limit} bytes")
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():  # decoded: a gzip bomb counts in full
                size += len(chunk)
                if size > limit:
                    raise ScrapeError(target.url, "body_too_large", f"more than {limit} bytes")
                chunks.append(chunk)
        return b"".join(chunks)

    def _parse(self, target: Target, body: bytes, duration_s: float) -> TargetScrape:
        exp = parse_exposition(body, target.url)
        samples, bad = len(exp.keys), len(exp.errors)
        if bad and not samples:
            error = ScrapeError(
                target.url, "parse", f"no valid sample; first error: {exp.errors[0]}"
            )
            return TargetScrape(target, duration_s, 0, bad, error=error)
        warnings = []
        if bad:
            detail = f"{bad} bad lines dropped; first: {exp.errors[0]}"
            warnings.append(ScrapeError(target.url, "parse", detail))
        cap = self.max_series_per_target
        if samples > cap:
            del exp.keys[cap:], exp.values[cap:], exp.timestamps[cap:]
            detail = f"{samples} series exposed, first {cap} kept"
            warnings.append(ScrapeError(target.url, "too_many_series", detail))
            # Logged here: a cardinality explosion is the operator's to fix at the exporter,
            # and the daemon only reports failed scrapes, not warnings of a target still up.
            _log.warning("series capped", target=target.url, exposed=samples, kept=cap)
        return TargetScrape(target, duration_s, samples, bad, None, tuple(warnings), exp)


def _columns(index: SeriesIndex, exp: Exposition, target: Target) -> IntArray:
    """Columns of a target's keys. A key the parser passed but the index cannot split (a
    label name given twice) is dropped, and logged, rather than losing the whole target."""
    try:
        return index.columns(exp.keys, split_series, target.labels)
    except ParseError:
        pass
    good = []
    for i, key in enumerate(exp.keys):
        try:
            split_series(key)
            good.append(i)
        except ParseError as exc:
            _log.warning("series dropped", target=target.url, error=str(exc))
    exp.keys[:] = [exp.keys[i] for i in good]
    exp.values[:] = [exp.values[i] for i in good]
    exp.timestamps[:] = [exp.timestamps[i] for i in good]
    return index.columns(exp.keys, split_series, target.labels)


def _put_health(frame: FloatArray, columns: IntArray, results: Sequence[TargetScrape]) -> None:
    """Write up / duration / samples, combining targets that share a column (worst case)."""
    if not results:
        return
    up = np.array([1.0 if r.up else 0.0 for r in results])
    duration = np.array([r.duration_s for r in results])
    samples = np.array([float(r.samples) for r in results])
    ups, durations, counts = columns[:, 0], columns[:, 1], columns[:, 2]
    frame[ups], frame[durations], frame[counts] = np.inf, -np.inf, 0.0
    np.minimum.at(frame, ups, up)
    np.maximum.at(frame, durations, duration)
    np.add.at(frame, counts, samples)
