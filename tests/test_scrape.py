"""Scraping: errors translated per target, body and series caps, health series, the frame
against the simulator's live exporters, and a hung target not holding the round."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import httpx
import numpy as np
import pytest

from detector.ingest.scrape import Scraper, ScrapeRound
from detector.ingest.targets import Target, make_target
from detector.model import DCGM_BLANK_THRESHOLD
from detector.series.index import SeriesIndex
from detector.sim import Scenario, SimulatedCluster, serve

PAGE = b"""# TYPE temp gauge
temp{gpu="0"} 40
temp{gpu="1"} 41.5
# TYPE errs counter
errs_total{gpu="0"} 3
weird{gpu="0"} NaN
hot{gpu="0"} +Inf
"""
Handler = Callable[[httpx.Request], Awaitable[httpx.Response]]
HANG_GUARD_S = 120.0  # a broken timeout fails the test instead of hanging it


def scraper_for(handler: Handler, **options: float) -> Scraper:
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    settings: dict[str, float] = {"timeout_s": 1.0, "jitter_fraction": 0.0} | options
    return Scraper(
        client,
        timeout_s=settings["timeout_s"],
        jitter_fraction=settings["jitter_fraction"],
        body_limit_bytes=int(settings.get("body_limit_bytes", 1 << 20)),
        max_series_per_target=int(settings.get("max_series_per_target", 1000)),
    )


def by_host(pages: dict[str, Callable[[], httpx.Response]]) -> Handler:
    async def handler(request: httpx.Request) -> httpx.Response:
        return pages[request.url.host]()

    return handler


def value(index: SeriesIndex, round_: ScrapeRound, metric: str, node: str, gpu: str = "") -> float:
    labels = (("node", node), ("gpu", gpu)) if gpu else (("node", node),)
    column = index.column_of(metric, labels)
    assert column is not None, f"{metric} of {node} not in the index"
    return float(round_.frame.values[column])


async def scrape(scraper: Scraper, targets: list[Target]) -> tuple[SeriesIndex, ScrapeRound]:
    index = SeriesIndex()
    async with scraper:
        round_ = await asyncio.wait_for(scraper.scrape_all(targets, index, 1000.0), HANG_GUARD_S)
    return index, round_


async def test_good_page_lands_in_the_frame_with_target_labels() -> None:
    """Values go to their series' columns (node from the target), NaN and +Inf kept as is."""
    scraper = scraper_for(by_host({"gpu-01": lambda: httpx.Response(200, content=PAGE)}))
    index, round_ = await scrape(scraper, [make_target("http://gpu-01:9400/metrics")])
    assert 40.0 == value(index, round_, "temp", "gpu-01", "0")
    assert 41.5 == value(index, round_, "temp", "gpu-01", "1")
    assert 3.0 == value(index, round_, "errs_total", "gpu-01", "0")
    assert math.isnan(value(index, round_, "weird", "gpu-01", "0"))
    assert math.inf == value(index, round_, "hot", "gpu-01", "0")
    assert {"temp": "gauge", "errs": "counter"} == round_.types
    assert 1000.0 == round_.frame.time
    assert len(index) == len(round_.frame.values)
    assert [] == round_.errors


@pytest.mark.parametrize(
    ("response", "reason"),
    [
        (lambda: httpx.Response(500, content=b"oops"), "http_500"),
        (lambda: httpx.Response(404), "http_404"),
        (lambda: httpx.Response(200, content=b"<html>\x00garbage\n{{{\n"), "parse"),
        (lambda: httpx.Response(200, content=b"x" * 5000), "body_too_large"),
    ],
)
async def test_failed_target_is_down_with_its_reason_and_others_unaffected(
    response: Callable[[], httpx.Response], reason: str
) -> None:
    """A failing target gets up=0, a ScrapeError with the reason; its neighbour is up."""
    pages = {"bad": response, "good": lambda: httpx.Response(200, content=PAGE)}
    scraper = scraper_for(by_host(pages), body_limit_bytes=4096)
    targets = [make_target("http://bad:9400/metrics"), make_target("http://good:9400/metrics")]
    index, round_ = await scrape(scraper, targets)
    bad, good = round_.targets
    assert (False, True) == (bad.up, good.up)
    assert bad.error is not None
    assert (reason, "http://bad:9400/metrics") == (bad.error.reason, bad.error.target)
    assert 0.0 == value(index, round_, "up", "bad")
    assert 1.0 == value(index, round_, "up", "good")
    assert 0.0 == value(index, round_, "scrape_samples_scraped", "bad")
    assert 40.0 == value(index, round_, "temp", "good", "0")
    assert [bad.error] == round_.errors


@pytest.mark.parametrize(
    ("failure", "reason"),
    [
        (httpx.ConnectError("connection refused"), "connect"),
        (httpx.ReadTimeout("read timed out"), "timeout"),
        (httpx.RemoteProtocolError("peer closed"), "connect"),
    ],
)
async def test_transport_errors_are_translated(failure: Exception, reason: str) -> None:
    """httpx transport errors become ScrapeError reasons; nothing escapes the round."""

    async def handler(request: httpx.Request) -> httpx.Response:
        raise failure

    _, round_ = await scrape(scraper_for(handler), [make_target("http://a:9400/metrics")])
    assert round_.targets[0].error is not None
    assert reason == round_.targets[0].error.reason


async def test_streamed_body_is_aborted_once_past_the_limit() -> None:
    """A chunked body with no length is cut at the limit: the rest is never read."""
    sent = []

    async def endless() -> AsyncIterator[bytes]:
        for i in range(1000):
            sent.append(i)
            yield b"m 1\n" * 256  # 1 KiB per chunk

    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=endless())

    _, round_ = await scrape(
        scraper_for(handler, body_limit_bytes=8192), [make_target("http://a:9400/metrics")]
    )
    assert round_.targets[0].error is not None
    assert "body_too_large" == round_.targets[0].error.reason
    assert len(sent) < 20


async def test_slow_target_times_out_within_the_round() -> None:
    """A target answering after the timeout is down with reason timeout; a fast one is up."""

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "slow":
            await asyncio.sleep(HANG_GUARD_S)
        return httpx.Response(200, content=PAGE)

    targets = [make_target("http://slow:9400/metrics"), make_target("http://fast:9400/metrics")]
    _, round_ = await scrape(scraper_for(handler, timeout_s=0.2), targets)
    slow, fast = round_.targets
    assert slow.error is not None
    assert ("timeout", True) == (slow.error.reason, fast.up)


async def test_partly_bad_page_keeps_good_lines_and_warns() -> None:
    """Bad lines are counted and dropped, the target stays up with a parse warning."""
    page = PAGE + b'bad line here\ntemp{gpu="2"} 42\n'
    scraper = scraper_for(by_host({"a": lambda: httpx.Response(200, content=page)}))
    index, round_ = await scrape(scraper, [make_target("http://a:9400/metrics")])
    result = round_.targets[0]
    assert (True, 1, 6) == (result.up, result.bad_lines, result.samples)  # 5 + 1 good
    assert ["parse"] == [w.reason for w in result.warnings]
    assert 42.0 == value(index, round_, "temp", "a", "2")


async def test_too_many_series_keeps_the_first_ones_and_reports() -> None:
    """Past max_series_per_target the first N samples are kept, the rest reported."""
    page = "".join(f'm{{i="{i}"}} {i}\n' for i in range(50)).encode()
    scraper = scraper_for(
        by_host({"a": lambda: httpx.Response(200, content=page)}), max_series_per_target=10
    )
    index, round_ = await scrape(scraper, [make_target("http://a:9400/metrics")])
    result = round_.targets[0]
    assert result.up
    assert ["too_many_series"] == [w.reason for w in result.warnings]
    assert 50.0 == value(index, round_, "scrape_samples_scraped", "a")
    kept = [info for info in index.infos if info.metric == "m"]
    assert [str(i) for i in range(10)] == [dict(info.labels)["i"] for info in kept]


async def test_exporters_sharing_a_health_column_show_the_worst_case() -> None:
    """Two targets of one node on one instance: up is the min, samples the sum."""
    pages = {"gpu-01": lambda: httpx.Response(200, content=PAGE)}

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/down":
            return httpx.Response(503)
        return pages[request.url.host]()

    targets = [
        make_target("http://gpu-01:9400/metrics"),
        make_target("http://gpu-01:9400/down"),
        make_target("http://gpu-01:9400/metrics?again=1"),
    ]
    index, round_ = await scrape(scraper_for(handler), targets)
    assert 0.0 == value(index, round_, "up", "gpu-01")
    assert 2 * 5.0 == value(index, round_, "scrape_samples_scraped", "gpu-01")
    durations = [r.duration_s for r in round_.targets]
    assert max(durations) == value(index, round_, "scrape_duration_seconds", "gpu-01")


async def test_jitter_is_deterministic_and_inside_the_timeout_share() -> None:
    """Each URL gets a fixed start offset below jitter_fraction * timeout, and they differ."""
    targets = [make_target(f"http://gpu-{n:02d}:9400/metrics") for n in range(50)]
    async with Scraper(timeout_s=4.0, jitter_fraction=0.25) as scraper:
        offsets = [scraper.jitter_s(t) for t in targets]
    async with Scraper(timeout_s=4.0, jitter_fraction=0.25) as other:
        assert offsets == [other.jitter_s(t) for t in targets]
    assert all(0.0 <= o < 1.0 for o in offsets)
    assert len(set(offsets)) == len(offsets)


async def _hung_server() -> tuple[asyncio.Server, list[asyncio.StreamWriter]]:
    """A local server that accepts connections and never answers."""
    held: list[asyncio.StreamWriter] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        await reader.read()  # wait until the client gives up

    return await asyncio.start_server(accept, "127.0.0.1", 0), held


@pytest.fixture
def live() -> Iterator[tuple[SimulatedCluster, dict[str, tuple[str, str]]]]:
    """The simulator's exporters frozen on their first tick (clock never advances)."""
    scenario = Scenario(nodes=3, gpus=2, days=0.01, seed=5, failure_count=0, fault_trace=None)
    exporters = serve(scenario, port=0, clock=lambda: 0.0)
    try:
        yield SimulatedCluster(scenario), exporters.urls
    finally:
        exporters.close()


def sim_targets(urls: dict[str, tuple[str, str]]) -> list[Target]:
    return [
        make_target(url, node=node, kind=kind)
        for node, pair in urls.items()
        for url, kind in zip(pair, ("dcgm", "node"), strict=True)
    ]


async def test_simulated_cluster_frame_equals_the_simulators_values(
    live: tuple[SimulatedCluster, dict[str, tuple[str, str]]],
) -> None:
    """Over a few rounds every node and every simulated series is in the frame, with the
    exact value the simulator generated (DCGM blanks as NaN)."""
    cluster, urls = live
    _, expected = next(iter(cluster.frames()))
    series = cluster.series()
    blank = np.array([name.startswith("DCGM") for name, _ in series]) & (
        expected >= DCGM_BLANK_THRESHOLD
    )
    expected = np.where(blank, np.nan, expected)
    index = SeriesIndex()
    async with Scraper(timeout_s=5.0, jitter_fraction=0.1) as scraper:
        for tick in range(3):
            round_ = await scraper.scrape_all(sim_targets(urls), index, 1000.0 + 30 * tick)
            assert [] == round_.errors
            assert sorted(urls) == index.nodes()
            columns = [index.column_of(name, labels) for name, labels in series]
            assert None not in columns
            got = round_.frame.values[np.array(columns, dtype=np.int64)]
            np.testing.assert_array_equal(expected, got)


async def test_hung_target_is_down_and_the_rest_of_the_round_is_complete(
    live: tuple[SimulatedCluster, dict[str, tuple[str, str]]],
) -> None:
    """A server that accepts and never answers gets up=0 (timeout); every simulated node is
    still scraped in the same round, which returns (no outer hang guard trips)."""
    _, urls = live
    server, held = await _hung_server()
    port = server.sockets[0].getsockname()[1]
    targets = [*sim_targets(urls), make_target(f"http://127.0.0.1:{port}/metrics", node="hung")]
    try:
        # 5 s: the simulated pages answer in milliseconds, but a loaded machine timed them out
        # at 0.5 s too; the hung server only ever answers by this timeout
        index, round_ = await scrape(Scraper(timeout_s=5.0, jitter_fraction=0.1), targets)
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()
    hung = round_.targets[-1]
    assert hung.error is not None
    assert "timeout" == hung.error.reason
    assert 1 == len(held), "the hung server did receive the scrape"
    assert 0.0 == value(index, round_, "up", "hung")
    assert all(r.up for r in round_.targets[:-1])
    assert all(value(index, round_, "up", node) == 1.0 for node in urls)
